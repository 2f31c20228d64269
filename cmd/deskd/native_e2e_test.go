package main

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/x11"
)

// dumpBGRX writes a BGRX frame as PNG, for a person to look at.
func dumpBGRX(path string, pix []byte, w, h int) {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < w*h; i++ {
		img.Pix[4*i], img.Pix[4*i+1], img.Pix[4*i+2], img.Pix[4*i+3] = pix[4*i+2], pix[4*i+1], pix[4*i], 255
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	os.WriteFile(path, buf.Bytes(), 0o644)
}

// settled captures scr once the test page is painted and two captures
// 300 ms apart agree (Chromium is still painting when start returns).
func settled(t *testing.T, scr *x11.Screen) []byte {
	t.Helper()
	w, h := scr.Size()
	a, b := make([]byte, w*h*4), make([]byte, w*h*4)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := scr.Capture(image.Rect(0, 0, w, h), a, w*4); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // a quiet period is what is being waited for
		scr.Capture(image.Rect(0, 0, w, h), b, w*4)
		// The test page is painted (its orange block is there) and still.
		i := 4 * (h/3*w + w/8)
		painted := b[i] == 0x00 && b[i+1] == 0x88 && b[i+2] == 0xff
		if painted && match(a, b, 0) == 1 {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test page never settled on the screen (painted: %v)", painted)
		}
	}
}

// match is the share of pixels of got (BGRX) within tol of want (BGRX).
func match(got, want []byte, tol int) float64 {
	n := 0
	for i := 0; i+3 < len(want); i += 4 {
		if absDiff(got[i], want[i]) <= tol && absDiff(got[i+1], want[i+1]) <= tol && absDiff(got[i+2], want[i+2]) <= tol {
			n++
		}
	}
	return float64(n) / float64(len(want)/4)
}

// TestNativeViewers: viewers nobody here wrote get a correct frame over
// the loopback VNC port: vncsnapshot (TightVNC's decoder) with Raw and
// with Tight, and TigerVNC's vncviewer with ZRLE.
func TestNativeViewers(t *testing.T) {
	snapshot := testenv.LookPath(t, "vncsnapshot")
	viewer := testenv.LookPath(t, "xtigervncviewer", "vncviewer")
	vncAddr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	e := newInstall(t, "--vnc-listen", vncAddr, "--url", testPage)
	out, code := e.run("start")
	if code != 0 {
		t.Fatalf("start: %v", out)
	}
	e.useDisplay(t)
	scr, err := x11.OpenScreen(out["display"].(string), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scr.Close()
	w, h := scr.Size()
	want := settled(t, scr)
	port := strings.TrimPrefix(vncAddr, "127.0.0.1:")

	for _, enc := range []string{"raw", "tight"} {
		file := filepath.Join(t.TempDir(), enc+".jpg")
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		b, err := exec.CommandContext(ctx, snapshot, "-quiet", "-encodings", enc, "-nojpeg", "-quality", "100", "127.0.0.1::"+port, file).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("vncsnapshot %s: %v\n%s", enc, err, b)
		}
		f, _ := os.ReadFile(file)
		img, err := jpeg.Decode(bytes.NewReader(f))
		if err != nil {
			t.Fatalf("vncsnapshot %s wrote %d bytes: %v", enc, len(f), err)
		}
		if img.Bounds().Dx() != w || img.Bounds().Dy() != h {
			t.Fatalf("snapshot %v, screen %dx%d", img.Bounds(), w, h)
		}
		got := make([]byte, w*h*4)
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				i := 4 * (y*w + x)
				got[i], got[i+1], got[i+2] = byte(bl>>8), byte(g>>8), byte(r>>8)
			}
		}
		// The snapshot file is a JPEG at quality 100: small errors only.
		want = settled(t, scr)
		if dir := os.Getenv("DESKD_TEST_DUMP"); dir != "" {
			dumpBGRX(filepath.Join(dir, "want-"+enc+".png"), want, w, h)
			dumpBGRX(filepath.Join(dir, "snap-"+enc+".png"), got, w, h)
		}
		if m := match(got, want, 16); m < 0.99 {
			t.Fatalf("vncsnapshot %s: %.2f%% of pixels match", enc, 100*m)
		} else {
			t.Logf("vncsnapshot %s: %.2f%% of pixels match the screen", enc, 100*m)
		}
	}

	// TigerVNC's viewer, full screen on a second X server, asked for ZRLE.
	sp := proc.NewSpawner()
	defer sp.Close()
	x2, err := x11.StartXvfb(t.Context(), sp, x11.XvfbConfig{Path: testenv.LookPath(t, "Xvfb"), Resolution: x11.Resolution{Width: w, Height: h, Depth: 24}})
	if err != nil {
		t.Fatal(err)
	}
	defer x2.Stop(context.Background(), 5*time.Second)
	v, err := sp.Start(proc.Spec{Name: "vncviewer", Path: viewer, Env: []string{"DISPLAY=" + x2.Display, "HOME=" + t.TempDir()},
		Args: []string{"-PreferredEncoding=ZRLE", "-AutoSelect=0", "-FullColor=1", "-FullScreen=1", "-Shared=1", "127.0.0.1::" + port}})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Stop(context.Background(), 5*time.Second)
	scr2, err := x11.OpenScreen(x2.Display, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scr2.Close()
	got := make([]byte, w*h*4)
	var m float64
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// Against the screen as it is now: Chromium repaints, and a frame
		// captured at the start may differ from it by a few levels.
		scr.Capture(image.Rect(0, 0, w, h), want, w*4)
		scr2.Capture(image.Rect(0, 0, w, h), got, w*4)
		if m = match(got, want, 0); m > 0.995 {
			break
		}
		time.Sleep(100 * time.Millisecond) // the viewer draws when it gets the frame
	}
	if m <= 0.995 {
		if dir := os.Getenv("DESKD_TEST_DUMP"); dir != "" {
			dumpBGRX(filepath.Join(dir, "tigervnc.png"), got, w, h)
		}
		t.Fatalf("TigerVNC (ZRLE) shows %.2f%% of the screen exactly (within 32: %.2f%%); viewer output: %s", 100*m, 100*match(got, want, 32), v.Tail())
	}
	t.Logf("TigerVNC vncviewer (ZRLE): %.2f%% of pixels exact", 100*m)

	logs, _ := os.ReadFile(filepath.Join(e.runDir, "logs", "deskd.log"))
	sent := map[string]bool{}
	for _, l := range strings.Split(string(logs), "\n") {
		if _, rest, ok := strings.Cut(l, `msg="viewer encoding"`); ok {
			for _, f := range strings.Fields(rest) {
				if v, ok := strings.CutPrefix(f, "encoding="); ok {
					sent[v] = true
				}
			}
		}
	}
	for _, enc := range []string{"raw", "tight", "zrle"} {
		if !sent[enc] {
			t.Errorf("deskd never sent %s to a viewer (sent %v)", enc, sent)
		}
	}
}
