package bridge

import (
	"io"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/cubepod/deskd/record"
)

// teeConn hands what the server sends to a second reader too.
type teeConn struct {
	net.Conn
	to io.Writer
}

func (c teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.to.Write(p[:n])
	return n, err
}

// screenDiff is the largest difference of a channel between what a
// record.Screen shows and the test viewer's picture.
func screenDiff(t *testing.T, s *record.Screen, c *rfbClient) int {
	t.Helper()
	if s.W != c.w || s.H != c.h {
		t.Fatalf("the recording's screen is %dx%d, the viewer's %dx%d", s.W, s.H, c.w, c.h)
	}
	worst := 0
	for i, p := range c.fb {
		q := s.Pix[4*i:]
		worst = max(worst, diff(p, uint32(q[2])<<16|uint32(q[1])<<8|uint32(q[0])))
	}
	return worst
}

// A recording's decoder (record.Screen, what MP4 export draws from)
// shows what a viewer decodes from the same bytes: text-like and noisy
// tiles (palettes, zlib streams and their resets), photo-like ones
// (JPEG), scrolls (CopyRect), and a tap's priming and keyframe.
func TestRecordScreenDecodesServer(t *testing.T) {
	scr := newMemScreen(320, 400)
	rng := rand.New(rand.NewPCG(7, 8))
	scribble(scr, rng, 40)
	s := newTestServer(t, scr, "")
	conn, done := serve(t, s, ConnOptions{})
	var rec record.Screen
	v := handshakeRFB(t, teeConn{conn, &rec}, done, version38, "")
	v.setPixelFormat(noVNCFormat)
	v.setEncodings(EncTight, EncCopyRect, encJPEGQuality0+6, EncExtendedDesktopSize)
	v.request(false)
	v.update()
	check := func(what string) {
		t.Helper()
		if d := screenDiff(t, &rec, v); d > 1 { // JPEG: Go's two YCbCr conversions round apart
			t.Fatalf("%s: the recording's screen differs from the viewer's by %d", what, d)
		}
	}
	check("first update")
	for range 5 {
		step(t, scr, rng, v)
		check("text-like tiles")
	}
	// Two colours, as text: a palette of a bit a pixel.
	scr.mu.Lock()
	for y := 20; y < 60; y++ {
		for x := 10; x < 250; x++ {
			p := scr.f.at(x, y)
			c := byte(255 * ((x*x + y) % 3 / 2))
			p[0], p[1], p[2] = c, c, c
		}
	}
	scr.mu.Unlock()
	scr.damage <- toImage(Rect{10, 20, 240, 40})
	waitUntil(t, "the viewer's update", func() bool { v.request(true); v.update(); return v.matches(scr) })
	check("two colours")
	// Photo-like noise: JPEG.
	scr.mu.Lock()
	for y := 100; y < 260; y++ {
		for x := 0; x < 320; x++ {
			p := scr.f.at(x, y)
			p[0], p[1], p[2] = byte(rng.IntN(256)), byte(x+y), byte(rng.IntN(64))
		}
	}
	scr.mu.Unlock()
	scr.damage <- toImage(Rect{0, 100, 320, 160})
	jpegs := v.jpegs
	waitUntil(t, "a JPEG update", func() bool {
		v.request(true)
		v.update()
		return v.jpegs > jpegs
	})
	check("JPEG tiles")
	// A scroll: CopyRect.
	f := scr.frame()
	fillRows(f, 0, 400, rng)
	scr.setFrame(f, 0, 400)
	waitUntil(t, "the viewer's update", func() bool { v.request(true); v.update(); return v.matches(scr) })
	copies := v.copies
	for i := range 4 {
		scr.setFrame(scrolled(scr.frame(), 0, 400, 24, rng), 0, 400)
		waitUntil(t, "the viewer's update", func() bool { v.request(true); v.update(); return v.matches(scr) })
		check("scroll " + string(rune('0'+i)))
	}
	if v.copies == copies {
		t.Fatal("no CopyRect in four scrolls")
	}
	// A tap of this viewer, decoded from its first byte: priming, the
	// keyframe, then the viewer's updates.
	var tapped record.Screen
	tc, err := s.Tap(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	step(t, scr, rng, v) // the update the keyframe comes with
	a := handshakeRFB(t, teeConn{tc, &tapped}, nil, version38, "")
	a.pf, a.tight.pf = noVNCFormat, noVNCFormat
	for range 4 {
		step(t, scr, rng, v)
	}
	waitUntil(t, "the tap's picture", func() bool {
		a.update()
		return tapped.W == v.w && screenDiff(t, &tapped, v) <= 1
	})
	if !rec.Started() || !tapped.Started() {
		t.Fatal("a decoder never saw the handshake")
	}
}
