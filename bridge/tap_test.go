package bridge

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// tapReader reads a tap as a recorder's decoder would: the handshake
// (which comes with the keyframe: after the viewer's next update, which
// keyframe makes), then updates.
func tapReader(t *testing.T, s *Server, keyframe func()) *rfbClient {
	t.Helper()
	conn, err := s.Tap(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	keyframe()
	r := handshakeRFB(t, conn, nil, version38, "")
	r.pf, r.tight.pf = noVNCFormat, noVNCFormat // what the viewer asked for
	return r
}

// scribble paints n rectangles of text-like and noisy content.
func scribble(scr *memScreen, rng *rand.Rand, n int) {
	w, h := scr.f.W, scr.f.H
	for range n {
		r := Rect{rng.IntN(w - 40), rng.IntN(h - 30), 8 + rng.IntN(32), 4 + rng.IntN(26)}
		scr.mu.Lock()
		for y := r.Y; y < r.Y+r.H; y++ {
			for x := r.X; x < r.X+r.W; x++ {
				p := scr.f.at(x, y)
				c := []uint32{0xffffff, 0x202020, 0x3366cc, 0xcc3333}[(x^y)&3]
				if rng.IntN(4) == 0 {
					c = rng.Uint32() & 0xffffff
				}
				p[0], p[1], p[2] = byte(c), byte(c>>8), byte(c>>16)
			}
		}
		scr.mu.Unlock()
		scr.damage <- toImage(r)
	}
}

// tapEnds reads the tap to its end, which must come within 5 s of why.
func tapEnds(t *testing.T, r *rfbClient, why string) {
	t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(r.br); err != nil {
		t.Fatalf("the tap after %s: %v (want its end)", why, err)
	}
}

// catchUp reads the tap's updates until it shows what the viewer does.
func catchUp(t *testing.T, r, v *rfbClient) {
	t.Helper()
	waitUntil(t, "the tap's updates", func() bool {
		r.update()
		return slices.Equal(r.fb, v.fb)
	})
}

// step changes the screen and has the viewer take it; the tap must
// bring the same update.
func step(t *testing.T, scr *memScreen, rng *rand.Rand, v *rfbClient, taps ...*rfbClient) {
	t.Helper()
	scribble(scr, rng, 3)
	waitUntil(t, "the viewer's update", func() bool {
		v.request(true)
		v.update()
		return v.matches(scr)
	})
	for i, r := range taps {
		catchUp(t, r, v)
		if !r.matches(scr) {
			t.Fatalf("tap %d does not show the screen", i)
		}
	}
}

// A tap decodes from the middle of a viewer's stream: its Tight zlib
// streams primed with what the viewer's inflaters hold, then the
// keyframe, then every update the viewer gets; a second tap starts
// later while the first goes on; taps end with the viewer.
func TestTapFollowsViewer(t *testing.T) {
	scr := newMemScreen(320, 200)
	rng := rand.New(rand.NewPCG(1, 2))
	scribble(scr, rng, 40)
	s := newTestServer(t, scr, "")
	v := noVNCViewer(t, s, EncTight) // lossless: exact comparisons
	for range 5 {
		step(t, scr, rng, v) // the streams' history grows
	}
	a := tapReader(t, s, func() { step(t, scr, rng, v) })
	// Its first update primes the decoder (pixels the keyframe covers),
	// then come the keyframe and what the viewer got after it.
	a.update()
	catchUp(t, a, v)
	for range 5 {
		step(t, scr, rng, v, a)
	}
	b := tapReader(t, s, func() { step(t, scr, rng, v, a) })
	b.update()
	catchUp(t, b, v)
	for range 5 {
		step(t, scr, rng, v, a, b)
	}
	if a.jpegs+b.jpegs != 0 {
		t.Fatal("JPEG in a lossless stream")
	}
	// The viewer leaves: the taps end; no one else to follow.
	v.c.Close()
	for _, r := range []*rfbClient{a, b} {
		tapEnds(t, r, "the viewer left")
	}
	if _, err := s.Tap(t.Context()); !errors.Is(err, ErrNoSource) {
		t.Fatalf("tap with no viewer: %v", err)
	}
}

// Viewers that cannot be followed: the server's own pixel format, a
// recorder, Raw only; two viewers sharing tiles (independent streams:
// no priming) can.
func TestTapSources(t *testing.T) {
	scr := newMemScreen(256, 128)
	rng := rand.New(rand.NewPCG(3, 4))
	scribble(scr, rng, 20)
	s := newTestServer(t, scr, "")
	other := dialRFB(t, s, version38, "", ConnOptions{})
	other.tight.pf = other.pf
	other.setEncodings(EncTight)
	other.request(false)
	other.update()
	rec := dialRFB(t, s, version38, "", ConnOptions{Recorder: true})
	rec.setPixelFormat(noVNCFormat)
	rec.setEncodings(EncTight)
	rec.request(false)
	rec.update()
	noVNCViewer(t, s, EncRaw)
	if _, err := s.Tap(t.Context()); !errors.Is(err, ErrNoSource) {
		t.Fatalf("tap of a recorder, the server's format or Raw: %v", err)
	}
	v1 := noVNCViewer(t, s, EncTight, encJPEGQuality0+8)
	v2 := noVNCViewer(t, s, EncTight, encJPEGQuality0+8)
	v2.request(true)
	a := tapReader(t, s, func() {
		scribble(scr, rng, 3)
		v1.request(true)
		v1.update()
	})
	catchUp(t, a, v1) // no priming: independent streams
	for range 5 {
		scribble(scr, rng, 3)
		v1.request(true)
		v1.update()
		catchUp(t, a, v1)
	}
}

// A keyframe with JPEG: what the viewer holds exactly goes lossless (its
// picture does not change: no blip), what it holds as JPEG goes as JPEG
// again; the tap shows the viewer's picture either way.
func TestTapKeyframeKeepsExactTiles(t *testing.T) {
	scr := newMemScreen(256, 128)
	rng := rand.New(rand.NewPCG(7, 8))
	scr.mu.Lock()
	for i := range scr.f.Pix { // noise: JPEG at quality 6
		scr.f.Pix[i] = byte(rng.IntN(256))
	}
	scr.mu.Unlock()
	s := newTestServer(t, scr, "")
	v := noVNCViewer(t, s, EncTight, encJPEGQuality0+6)
	if v.jpegs == 0 {
		t.Fatal("noise did not go as JPEG")
	}
	// Still: the tiles are sent again lossless; the viewer is exact.
	waitUntil(t, "the refinement", func() bool {
		v.request(true)
		v.update()
		return v.matches(scr)
	})
	jpegs := v.jpegs
	a := tapReader(t, s, func() {
		v.request(true)
		v.update()
	})
	if v.jpegs != jpegs || !v.matches(scr) {
		t.Fatalf("the keyframe changed the viewer's exact picture (%d JPEG rectangles)", v.jpegs-jpegs)
	}
	a.update() // priming
	catchUp(t, a, v)
	// Motion: noise again in a corner, sent as JPEG; a keyframe now sends
	// that corner as JPEG, the rest lossless.
	scr.mu.Lock()
	for y := range 64 {
		for x := range 64 {
			p := scr.f.at(x, y)
			p[0], p[1], p[2] = byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256))
		}
	}
	scr.mu.Unlock()
	scr.damage <- toImage(Rect{0, 0, 64, 64})
	waitUntil(t, "the corner", func() bool {
		v.request(true)
		v.update()
		return v.jpegs > jpegs
	})
	catchUp(t, a, v)
	before := slices.Clone(v.fb)
	b := tapReader(t, s, func() {
		v.request(true)
		v.update()
	})
	b.update()
	catchUp(t, b, v)
	catchUp(t, a, v)
	for y := range 128 {
		for x := 64; x < 256; x++ {
			if v.fb[y*256+x] != before[y*256+x] {
				t.Fatalf("the keyframe changed the viewer's exact pixel at %d,%d", x, y)
			}
		}
	}
}

// A viewer that changes its encoding mid-stream cannot be followed: the
// tap ends (its recorder connects again, from a keyframe).
func TestTapEndsOnNewEncoding(t *testing.T) {
	scr := newMemScreen(256, 128)
	rng := rand.New(rand.NewPCG(9, 10))
	scribble(scr, rng, 20)
	s := newTestServer(t, scr, "")
	v := noVNCViewer(t, s, EncTight)
	a := tapReader(t, s, func() { step(t, scr, rng, v) })
	a.update()
	catchUp(t, a, v)
	v.setEncodings(EncZlib)
	scribble(scr, rng, 3)
	v.request(true)
	v.update()
	tapEnds(t, a, "the viewer took Zlib")
}

// TapConn reads what is pushed, in order and in pieces; honours read
// deadlines, set before or during a read; drops writes; and ends with
// io.EOF when closed, when its context ends, or when its recorder fell
// too far behind.
func TestTapConn(t *testing.T) {
	newConn := func() (TapConn, *tap) {
		tp := &tap{wake: make(chan struct{}, 1)}
		return TapConn{tp}, tp
	}
	c, tp := newConn()
	tp.push([]byte("hello "), []byte("world"))
	buf := make([]byte, 4)
	var got []byte
	for len(got) < 11 {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "hello world" || tp.off != 0 || len(tp.queue) != 0 {
		t.Fatalf("read %q; queue %d/%d", got, tp.off, len(tp.queue))
	}
	if n, err := c.Write([]byte("request")); n != 7 || err != nil {
		t.Fatalf("write: %d %v", n, err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past the deadline: %v", err)
	}
	c.SetDeadline(time.Time{})
	read := make(chan error, 1)
	go func() { _, err := c.Read(buf); read <- err }()
	time.Sleep(20 * time.Millisecond)
	c.SetReadDeadline(time.Now().Add(-time.Second)) // moved while it waits
	if err := <-read; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a deadline set during a read: %v", err)
	}
	c.SetDeadline(time.Time{})
	go func() { _, err := c.Read(buf); read <- err }()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	if err := <-read; err != io.EOF {
		t.Fatalf("closed during a read: %v", err)
	}
	if _, err := c.Write(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}

	c, tp = newConn()
	tp.push(make([]byte, maxTapQueue/2))
	tp.push(make([]byte, maxTapQueue/2+1)) // the recorder fell behind
	if _, err := c.Read(buf); err != io.EOF || tp.queue != nil {
		t.Fatalf("over the bound: %v, %d bytes kept", err, len(tp.queue))
	}

	scr := newMemScreen(64, 48)
	s := newTestServer(t, scr, "")
	noVNCViewer(t, s, EncTight)
	ctx, cancel := context.WithCancel(t.Context())
	conn, err := s.Tap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("the tap after its context ended: %v (want its end)", err)
	}
}
