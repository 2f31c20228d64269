package bridge

import (
	"testing"
	"time"
)

func TestChangedBox(t *testing.T) {
	const w, h = 100, 70
	base := testFrame(w, h)
	copyRGB(base.Pix, base.Pix) // as the shared framebuffer is
	for _, tc := range []struct {
		name   string
		change func(snap, fb *Frame)
		r      Rect
		want   Rect
		ok     bool
	}{
		{"same", func(snap, fb *Frame) {}, Rect{0, 0, w, h}, Rect{}, false},
		{"only the X byte differs", func(snap, fb *Frame) { fb.Pix[4*(5*w+5)+3] ^= 0x55 }, Rect{0, 0, w, h}, Rect{}, false},
		{"one pixel, even column", func(snap, fb *Frame) { fb.Pix[4*(5*w+6)] ^= 1 }, Rect{0, 0, w, h}, Rect{6, 5, 1, 1}, true},
		{"one pixel, odd column", func(snap, fb *Frame) { fb.Pix[4*(5*w+7)+2] ^= 1 }, Rect{0, 0, w, h}, Rect{7, 5, 1, 1}, true},
		{"two pixels far apart", func(snap, fb *Frame) {
			fb.Pix[4*(3*w+90)+1] ^= 1
			fb.Pix[4*(60*w+4)] ^= 1
		}, Rect{0, 0, w, h}, Rect{4, 3, 87, 58}, true},
		{"a change outside r is not seen", func(snap, fb *Frame) { fb.Pix[4*(5*w+6)] ^= 1 }, Rect{10, 10, 30, 30}, Rect{}, false},
		{"odd width: the last pixel", func(snap, fb *Frame) { fb.Pix[4*(12*w+42)] ^= 1 }, Rect{10, 10, 33, 20}, Rect{42, 12, 1, 1}, true},
		{"unknown pixels count as changed", func(snap, fb *Frame) { forget(snap, Rect{20, 30, 3, 2}) }, Rect{0, 0, w, h}, Rect{20, 30, 3, 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, fb := newSnap(w, h), testFrame(w, h)
			copyRGB(fb.Pix, fb.Pix)
			copyKnown(snap, base, Rect{0, 0, w, h})
			tc.change(snap, fb)
			got, ok := changedBox(snap, fb, tc.r)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("changedBox = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
			if ok {
				copyKnown(snap, fb, got)
				if _, again := changedBox(snap, fb, tc.r); again {
					t.Fatal("after copying the box, something still differs")
				}
			}
		})
	}
	if _, ok := changedBox(newSnap(w, h), base, Rect{0, 0, w, h}); !ok {
		t.Fatal("a new viewer's picture is unknown: everything differs")
	}
}

func TestMoveRows(t *testing.T) {
	const w, h = 64, 50
	for _, sc := range []scroll{
		{dst: Rect{0, 0, w, 40}, dy: 10},    // content moves up
		{dst: Rect{8, 12, 40, 38}, dy: -12}, // down, part of the columns
		{dst: Rect{0, 5, w, 1}, dy: 1},
	} {
		snap := testFrame(w, h)
		want := testFrame(w, h)
		before := testFrame(w, h)
		for y := sc.dst.Y; y < sc.dst.Y+sc.dst.H; y++ {
			for x := sc.dst.X; x < sc.dst.X+sc.dst.W; x++ {
				copy(want.at(x, y), before.at(x, y+sc.dy))
			}
		}
		moveRows(snap, sc)
		if string(snap.Pix) != string(want.Pix) {
			t.Fatalf("move %+v: rows not where a viewer's CopyRect puts them", sc)
		}
	}
}

// A tile that changed and changed back before the viewer asked is not
// sent: the viewer has it already.
func TestChangeRevertedNotSent(t *testing.T) {
	scr := newMemScreen(300, 200)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setPixelFormat(noVNCFormat)
	c.setEncodings(EncTight, EncRaw)
	c.tight.pf = c.pf
	c.request(false)
	c.update()
	n := scr.captureCount()
	scr.paint(Rect{10, 10, 5, 5}, 0x123456)
	c.request(true)
	if rects := c.update(); len(rects) != 1 || rects[0] != (Rect{10, 10, 5, 5}) {
		t.Fatalf("update %v, want the painted box", rects)
	}
	scr.settle(t, n)
	n = scr.captureCount()
	scr.paint(Rect{10, 10, 5, 5}, 0xfedcba)
	scr.settle(t, n)
	n = scr.captureCount()
	scr.paint(Rect{10, 10, 5, 5}, 0x123456) // back as the viewer has it
	scr.settle(t, n)
	c.request(true)
	if _, _, _, ok := c.serverMessage(200 * time.Millisecond); ok {
		t.Fatal("an update for a tile the viewer has as it is")
	}
	scr.paint(Rect{200, 150, 3, 3}, 0x00ff00)
	if rects := c.update(); len(rects) != 1 || rects[0] != (Rect{200, 150, 3, 3}) {
		t.Fatalf("update %v, want only the new change", rects)
	}
	if !c.matches(scr) {
		t.Fatal("the viewer's picture does not match the screen")
	}
}

// naiveChangedBox is changedBox by looking at every pixel.
func naiveChangedBox(snap, fb *Frame, r Rect) (Rect, bool) {
	var box Rect
	for y := r.Y; y < r.Y+r.H; y++ {
		for x := r.X; x < r.X+r.W; x++ {
			a, b := snap.at(x, y), fb.at(x, y)
			if a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == 0 {
				continue
			}
			if p := (Rect{x, y, 1, 1}); box.Empty() {
				box = p
			} else {
				box = union(box, p)
			}
		}
	}
	return box, !box.Empty()
}

// FuzzChangedBox compares changedBox with looking at every pixel, on
// pictures that differ in a few places chosen by the input.
func FuzzChangedBox(f *testing.F) {
	f.Add(uint8(17), uint8(9), uint8(1), uint8(2), uint8(13), uint8(5), []byte{3, 4, 1, 16, 8, 2})
	f.Add(uint8(64), uint8(64), uint8(0), uint8(0), uint8(64), uint8(64), []byte{0, 0, 0, 63, 63, 3})
	f.Add(uint8(5), uint8(3), uint8(0), uint8(0), uint8(5), uint8(3), []byte{})
	f.Fuzz(func(t *testing.T, w, h, rx, ry, rw, rh uint8, changes []byte) {
		W, H := int(w)%70+1, int(h)%70+1
		r := Rect{int(rx) % W, int(ry) % H, 0, 0}
		r.W, r.H = int(rw)%(W-r.X)+1, int(rh)%(H-r.Y)+1
		fb := testFrame(W, H)
		copyRGB(fb.Pix, fb.Pix) // as the shared framebuffer is
		snap := newSnap(W, H)
		copyKnown(snap, fb, Rect{0, 0, W, H})
		for i := 0; i+2 < len(changes) && i < 60; i += 3 { // x, y, what
			x, y := int(changes[i])%W, int(changes[i+1])%H
			switch k := changes[i+2] % 4; k {
			case 0, 1, 2: // a colour byte
				fb.at(x, y)[k] ^= 0x11
			case 3: // unknown to the viewer
				forget(snap, Rect{x, y, 1, 1})
			}
			if changes[i+2]&0x80 != 0 {
				fb.at(x, y)[3] ^= 0xff // the X byte never counts
			}
		}
		got, ok := changedBox(snap, fb, r)
		want, wantOK := naiveChangedBox(snap, fb, r)
		if got != want || ok != wantOK {
			t.Fatalf("%dx%d in %v: changedBox = %v, %v; every pixel says %v, %v", W, H, r, got, ok, want, wantOK)
		}
	})
}

func TestCopyRGB(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 100} { // pixels
		src, dst := make([]byte, 4*n), make([]byte, 4*n)
		for i := range src {
			src[i], dst[i] = byte(i*37+1), 0x77
		}
		copyRGB(dst, src)
		for i := range dst {
			want := src[i]
			if i%4 == 3 {
				want = 0
			}
			if dst[i] != want {
				t.Fatalf("%d pixels: byte %d = %#x, want %#x", n, i, dst[i], want)
			}
		}
	}
}
