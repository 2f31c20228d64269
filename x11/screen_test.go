package x11

import (
	"context"
	"errors"
	"fmt"
	"image"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// TestScreen draws with a second X client and checks what Screen sees
// (damage, captured pixels) and does (pointer, keys, a bound keysym).
func TestScreen(t *testing.T) {
	x, s := startScreen(t, XvfbConfig{Resolution: Resolution{640, 480, 24}})
	if w, h := s.Size(); w != 640 || h != 480 {
		t.Fatalf("size %dx%d", w, h)
	}
	t.Logf("capture via SHM: %v", s.shmem != nil)
	if s.dmg == nil {
		t.Fatal("damage comes through xgb, not on a connection of its own (a local display)")
	}

	// Another client maps a red window at (100, 50) listening for keys.
	c, err := xgb.NewConnDisplay(x.Display)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	root := xproto.Setup(c).DefaultScreen(c).Root
	win, _ := xproto.NewWindowId(c)
	xproto.CreateWindow(c, 24, win, root, 100, 50, 200, 100, 0, xproto.WindowClassInputOutput, 0,
		xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask,
		[]uint32{0xff0000, 1, xproto.EventMaskKeyPress | xproto.EventMaskButtonPress})
	xproto.MapWindow(c, win)
	xproto.SetInputFocus(c, xproto.InputFocusPointerRoot, win, xproto.TimeCurrentTime)
	xproto.GetInputFocus(c).Reply() // round trip: all of the above is done

	// Damage reports the window's area.
	deadline := time.After(5 * time.Second)
	var got image.Rectangle
	for !got.Overlaps(image.Rect(100, 50, 300, 150)) {
		select {
		case r := <-s.Damage():
			got = got.Union(r)
		case <-deadline:
			t.Fatalf("no damage for the window (got %v)", got)
		}
	}
	pix := make([]byte, 640*480*4)
	if err := s.Capture(image.Rect(0, 0, 640, 480), pix, 640*4); err != nil {
		t.Fatal(err)
	}
	at := func(x, y int) [3]byte { i := (y*640 + x) * 4; return [3]byte{pix[i], pix[i+1], pix[i+2]} }
	if p := at(150, 100); p != [3]byte{0, 0, 0xff} {
		t.Fatalf("inside the window BGR = %v, want red", p)
	}
	if p := at(10, 10); p == [3]byte{0, 0, 0xff} {
		t.Fatal("outside the window is red too")
	}
	// A partial capture lands at its own coordinates.
	part := make([]byte, 640*480*4)
	s.Capture(image.Rect(290, 140, 310, 160), part, 640*4)
	if i := (145*640 + 295) * 4; part[i+2] != 0xff || part[(145*640+305)*4+2] == 0xff {
		t.Fatal("partial capture misplaced")
	}
	// A shared capture is addressed at its screen coordinates with its
	// own stride, and holds what Capture copies.
	for _, r := range []image.Rectangle{image.Rect(290, 140, 310, 160), image.Rect(0, 0, 640, 480), image.Rect(101, 51, 102, 52), image.Rect(600, 470, 700, 500)} {
		ran := false
		err := s.CaptureShared(r, func(sh []byte, stride int) {
			ran = true
			in := r.Intersect(image.Rect(0, 0, 640, 480))
			if stride != in.Dx()*4 || len(sh) < (in.Max.Y-1)*stride+4*in.Max.X {
				t.Fatalf("%v: stride %d, %d bytes: the last row does not fit", r, stride, len(sh))
			}
			for y := in.Min.Y; y < in.Max.Y; y++ {
				for x := in.Min.X; x < in.Max.X; x++ {
					i := (y*640 + x) * 4
					if j := y*stride + 4*x; [3]byte(sh[j:j+3]) != [3]byte(pix[i:i+3]) {
						t.Fatalf("%v: shared pixel %d,%d = %v, captured %v", r, x, y, sh[j:j+3], pix[i:i+3])
					}
				}
			}
		})
		if s.shmem == nil {
			if !errors.Is(err, ErrNoSHM) || ran {
				t.Fatalf("no SHM: CaptureShared %v (ran %v), want ErrNoSHM", err, ran)
			}
			continue
		}
		if err != nil || !ran {
			t.Fatalf("%v: CaptureShared %v (ran %v)", r, err, ran)
		}
	}

	// The pointer's shape (Xvfb's default X-shaped cursor).
	img, hot, err := s.CursorImage()
	if err != nil || img.Bounds().Dx() == 0 || !hot.In(img.Bounds()) {
		t.Fatalf("cursor %v hot %v: %v", img.Bounds(), hot, err)
	}
	opaque := 0
	for i := 3; i < len(img.Pix); i += 4 {
		if img.Pix[i] > 0 {
			opaque++
		}
	}
	if opaque == 0 {
		t.Fatal("cursor image is all transparent")
	}

	// Pointer: move and click inside the window.
	if err := s.Pointer(150, 80, 1); err != nil {
		t.Fatal(err)
	}
	s.Pointer(150, 80, 0)
	p, _ := xproto.QueryPointer(c, root).Reply()
	if p.RootX != 150 || p.RootY != 80 {
		t.Fatalf("pointer at %d,%d", p.RootX, p.RootY)
	}
	// Keys: 'a', 'A' (shift added), and € (no key: a spare one is bound).
	for _, ks := range []uint32{'a', 'A', 0x20ac} {
		if err := s.Key(ks, true); err != nil {
			t.Fatalf("key %#x: %v", ks, err)
		}
		s.Key(ks, false)
	}
	var presses []xproto.KeyPressEvent
	var clicked bool
	timeout := time.After(5 * time.Second)
	for len(presses) < 3 {
		evc := make(chan xgb.Event, 1)
		go func() { ev, _ := c.WaitForEvent(); evc <- ev }()
		select {
		case ev := <-evc:
			switch e := ev.(type) {
			case xproto.KeyPressEvent:
				if m, _ := xproto.GetKeyboardMapping(c, e.Detail, 1).Reply(); m.Keysyms[0] != keysymShiftL {
					presses = append(presses, e)
				}
			case xproto.ButtonPressEvent:
				clicked = e.Detail == 1
			}
		case <-timeout:
			t.Fatalf("got %d key presses, want 3", len(presses))
		}
	}
	if !clicked {
		t.Error("no button 1 press in the window")
	}
	m, _ := xproto.GetKeyboardMapping(c, presses[2].Detail, 1).Reply()
	if m.Keysyms[0] != 0x20ac {
		t.Errorf("€ pressed keycode %d, which maps to %#x", presses[2].Detail, m.Keysyms[0])
	}
	if presses[1].State&xproto.ModMaskShift == 0 || presses[0].State&xproto.ModMaskShift != 0 {
		t.Errorf("shift states %#x %#x: want only 'A' shifted", presses[0].State, presses[1].State)
	}
}

// TestResize grows and shrinks the screen through RANDR: Xvfb starts at
// the largest size and is shrunk at once; the new size is reported, seen
// by another client (xdpyinfo) and captured whole.
func TestResize(t *testing.T) {
	xdpyinfo := testenv.LookPath(t, "xdpyinfo")
	x, s := startScreen(t, XvfbConfig{Resolution: Resolution{640, 480, 24}, MaxResolution: Resolution{1280, 800, 24}})
	dims := func() string {
		out, err := exec.Command(xdpyinfo, "-display", x.Display).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "dimensions:" {
				return f[1]
			}
		}
		t.Fatal("xdpyinfo printed no dimensions")
		return ""
	}
	if w, h := s.Size(); w != 640 || h != 480 || dims() != "640x480" {
		t.Fatalf("starting size %dx%d, xdpyinfo %s", w, h, dims())
	}
	for _, tc := range []struct{ w, h, wantW, wantH int }{
		{1000, 700, 1000, 700},
		{800, 900, 800, 800}, // taller than the maximum: clamped
		{5000, 5000, 1280, 800},
		{10, 10, MinDimension, MinDimension},
		{1024, 768, 1024, 768},
	} {
		t0 := time.Now()
		w, h, err := s.Resize(tc.w, tc.h)
		took := time.Since(t0)
		if err != nil || w != tc.wantW || h != tc.wantH {
			t.Fatalf("Resize(%d, %d) = %d, %d, %v; want %d, %d", tc.w, tc.h, w, h, err, tc.wantW, tc.wantH)
		}
		// A resize may pass through a bounding size; the last report is
		// the final one.
		for p := (image.Point{}); p != image.Pt(w, h); {
			select {
			case p = <-s.SizeChanged():
			case <-time.After(5 * time.Second):
				t.Fatalf("SizeChanged never said %dx%d after Resize(%d, %d) (last %v)", w, h, tc.w, tc.h, p)
			}
		}
		if sw, sh := s.Size(); sw != w || sh != h {
			t.Fatalf("Size %dx%d after resizing to %dx%d", sw, sh, w, h)
		}
		if got := dims(); got != fmt.Sprintf("%dx%d", w, h) {
			t.Fatalf("xdpyinfo says %s after resizing to %dx%d", got, w, h)
		}
		pix := make([]byte, w*h*4)
		if err := s.Capture(image.Rect(0, 0, w, h), pix, w*4); err != nil {
			t.Fatalf("capture at %dx%d: %v", w, h, err)
		}
		t.Logf("resized to %dx%d in %v", w, h, took)
	}
}

// TestSHMWithServerAsAnotherUser: deskd runs as root and Xvfb as the GUI
// user; MIT-SHM must still work (the segment is handed to the server's
// user), since GetImage costs ~10x more per frame.
func TestSHMWithServerAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run Xvfb as another user")
	}
	x, s := startScreen(t, XvfbConfig{Resolution: Resolution{320, 240, 24}, Credential: &syscall.Credential{Uid: 1000, Gid: 1000}})
	uid, _, err := serverCred(x.Display)
	if err != nil || uid != 1000 {
		t.Fatalf("server credentials: uid %d, %v", uid, err)
	}
	if s.shmem == nil {
		t.Fatal("capture fell back to GetImage with Xvfb running as uid 1000")
	}
	pix := make([]byte, 320*240*4)
	if err := s.Capture(image.Rect(0, 0, 320, 240), pix, 320*4); err != nil {
		t.Fatal(err)
	}
}

// startScreen starts an Xvfb with cfg (its path found here) and opens
// its Screen; both end with the test.
func startScreen(t *testing.T, cfg XvfbConfig) (*Xvfb, *Screen) {
	t.Helper()
	cfg.Path = testenv.LookPath(t, "Xvfb")
	sp := proc.NewSpawner()
	t.Cleanup(sp.Close)
	x, err := StartXvfb(t.Context(), sp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Stop(context.Background(), 5*time.Second) })
	s, err := OpenScreen(x.Display, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return x, s
}
