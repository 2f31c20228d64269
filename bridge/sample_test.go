package bridge

import (
	"errors"
	"image"
	"slices"
	"testing"
	"time"
)

// sharedScreen is a memScreen that lends a capture buffer laid out as
// x11's shared memory is: a capture of r at offset r.Min.Y*stride +
// 4*r.Min.X with stride 4*r.Dx(). The rest of the buffer is garbage, so
// reading outside r shows.
type sharedScreen struct {
	*memScreen
	buf    []byte
	fail   error // returned before fn runs, when set
	shared int   // CaptureShared calls whose fn has returned
	// after, when set, runs once fn has returned and before the capture
	// is counted, in the capture goroutine: it sees what that capture
	// did before a later one (the suspects' full compare, verifyQuiet
	// on) changes it, however late the test gets to look.
	after func()
	seen  []suspectsSeen // the sampler after each capture, once recordSuspects is on
}

func newSharedScreen(w, h int) *sharedScreen {
	return &sharedScreen{memScreen: newMemScreen(w, h), buf: make([]byte, 4*w*h)}
}

func (s *sharedScreen) CaptureShared(r image.Rectangle, fn func(pix []byte, stride int)) error {
	s.mu.Lock()
	if s.fail != nil {
		s.mu.Unlock()
		return s.fail
	}
	for i := range s.buf {
		s.buf[i] = 0xa5
	}
	stride := 4 * r.Dx()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		i := y*s.f.Stride + 4*r.Min.X
		copy(s.buf[y*stride+4*r.Min.X:], s.f.Pix[i:i+4*r.Dx()])
	}
	after := s.after
	s.mu.Unlock()
	fn(s.buf[:r.Max.Y*stride+4*r.Min.X], stride) // as x11 does, the screen stays locked for captures only
	if after != nil {
		after()
	}
	s.mu.Lock()
	s.shared++ // counted once compared: tests then read what it found
	s.mu.Unlock()
	return nil
}

func TestSampledDiffer(t *testing.T) {
	a, b := NewFrame(128, 69), NewFrame(128, 69)
	for _, tc := range []struct {
		name    string
		tile    Rect
		changed int // row changed in b (-1: none)
		xByte   bool
		phase   int
		want    bool
	}{
		{"unchanged", Rect{0, 0, 64, 64}, -1, false, 0, false},
		{"sampled row", Rect{0, 0, 64, 64}, 16, false, 0, true},
		{"row of another phase", Rect{0, 0, 64, 64}, 17, false, 0, false},
		{"that phase", Rect{0, 0, 64, 64}, 17, false, 1, true},
		{"last row, phase 7", Rect{0, 0, 64, 64}, 63, false, 7, true},
		{"only the X byte", Rect{0, 0, 64, 64}, 16, true, 0, false},
		{"other tile", Rect{64, 0, 64, 64}, 16, false, 0, false},
		{"short tile: phase mod height", Rect{0, 64, 64, 5}, 66, false, 7, true},
		{"short tile, other row", Rect{0, 64, 64, 5}, 67, false, 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copy(b.Pix, a.Pix)
			if tc.changed >= 0 {
				i := tc.changed*b.Stride + 4*10
				if tc.xByte {
					b.Pix[i+3] ^= 0xff
				} else {
					b.Pix[i+1] ^= 0xff
				}
			}
			if got := sampledDiffer(a, b, tc.tile, tc.phase); got != tc.want {
				t.Fatalf("sampledDiffer = %v, want %v", got, tc.want)
			}
		})
	}
}

// sampling returns the capture loop's phase and whether tile i is a
// suspect.
func sampling(s *Server, i int) (phase int, suspect bool, n int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sample.phase, i < len(s.sample.suspect) && s.sample.suspect[i], s.sample.n
}

// suspectsSeen is the sampler as each shared capture left it.
type suspectsSeen struct {
	suspect []bool
	n       int
}

// recordSuspects notes the sampler's suspects in m.seen after every
// shared capture of m by s: the k-th capture (from 1) is m.seen[k-1].
func (m *sharedScreen) recordSuspects(s *Server) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.after = func() {
		s.mu.RLock()
		got := suspectsSeen{slices.Clone(s.sample.suspect), s.sample.n}
		s.mu.RUnlock()
		m.mu.Lock()
		m.seen = append(m.seen, got)
		m.mu.Unlock()
	}
}

// suspectAfter returns whether tile i was a suspect, and how many there
// were, after the (n+1)-th shared capture (the first after n of them).
func (m *sharedScreen) suspectAfter(n, i int) (bool, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	got := m.seen[n]
	return i < len(got.suspect) && got.suspect[i], got.n
}

// captured waits until the screen has been captured more than n times.
func (m *sharedScreen) captured(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, "the damage was never captured", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.shared > n
	})
}

// TestSampledCapture: a big damaged box is compared on a row in 8 of
// each tile. A change those rows hit goes at once; one between them (a
// one-pixel line) leaves its tile a suspect, compared in full once the
// damage stops: the viewer still ends up with the exact screen.
func TestSampledCapture(t *testing.T) {
	scr := newSharedScreen(512, 384)
	s := newTestServer(t, scr, "")
	scr.recordSuspects(s)
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setPixelFormat(noVNCFormat)
	c.setEncodings(EncTight)
	c.request(false)
	c.update()
	if !c.matches(scr.memScreen) {
		t.Fatal("first update differs from the screen")
	}
	// The first viewer's full capture (exact) is done before the changes
	// below: taken together with them, nothing would be sampled.
	scr.captured(t, 0)
	whole := image.Rect(0, 0, 512, 384)
	cols := 512 / tile

	// Between the sampled rows: a one-pixel line in tile (1, 2).
	phase, _, _ := sampling(s, 0)
	y := 2*tile + (phase+4)%sampleStep + 8
	scr.mu.Lock()
	n := scr.shared
	for x := 70; x < 120; x++ {
		p := scr.f.at(x, y)
		p[0], p[1], p[2] = 0, 0, 0xff
	}
	scr.mu.Unlock()
	t0 := time.Now()
	scr.damage <- whole // as Chromium: the whole window
	scr.captured(t, n)
	if suspect, k := scr.suspectAfter(n, 2*cols+1); !suspect || k != cols*6 {
		t.Fatalf("after a sampled capture: tile a suspect %v, %d suspects; want true, %d", suspect, k, cols*6)
	}
	c.request(true)
	c.update()
	if waited := time.Since(t0); waited < verifyQuiet {
		t.Fatalf("the line came after %v, before the suspects were due", waited)
	}
	if !c.matches(scr.memScreen) {
		t.Fatal("after the suspects were compared the viewer differs from the screen")
	}
	if _, _, k := sampling(s, 0); k != 0 {
		t.Fatalf("%d suspects left", k)
	}

	// On the sampled rows: a block of text-like ink in tile (3, 1) goes
	// at once, the rest of the box waits as suspects.
	scr.mu.Lock()
	n = scr.shared
	for y := tile + 20; y < tile+36; y++ {
		for x := 3*tile + 5; x < 3*tile+15; x++ {
			p := scr.f.at(x, y)
			p[0], p[1], p[2] = 0x30, 0x30, 0x30
		}
	}
	scr.mu.Unlock()
	scr.damage <- whole
	scr.captured(t, n)
	if suspect, k := scr.suspectAfter(n, cols+3); suspect || k != cols*6-1 {
		t.Fatalf("inked tile a suspect %v, %d suspects; want false, %d", suspect, k, cols*6-1)
	}
	c.request(true)
	if rects := c.update(); len(rects) != 1 || !c.matches(scr.memScreen) {
		t.Fatalf("ink: %v, exact %v", rects, c.matches(scr.memScreen))
	}

	// Under continuous big damage (a fast typist) a line between the
	// sampled rows still arrives: the next captures sample other rows,
	// and verifyMax bounds the wait.
	scr.mu.Lock()
	for x := 300; x < 400; x++ {
		p := scr.f.at(x, 3*tile+13)
		p[0], p[1], p[2] = 0xff, 0, 0
	}
	scr.mu.Unlock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the typist: ends with stop
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				scr.damage <- whole
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for deadline := time.Now().Add(2 * verifyMax); !c.matches(scr.memScreen); {
		if time.Now().After(deadline) {
			t.Fatal("under continuous damage the line never arrived")
		}
		c.request(true)
		c.update()
	}
}

// A screen whose shared capture fails is captured by copying.
func TestSharedCaptureFallsBack(t *testing.T) {
	scr := newSharedScreen(256, 128)
	scr.fail = errors.New("no shared memory here")
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setPixelFormat(noVNCFormat)
	c.setEncodings(EncTight)
	c.request(false)
	c.update()
	scr.paint(Rect{10, 10, 100, 50}, 0x336699)
	c.request(true)
	c.update()
	if !c.matches(scr.memScreen) {
		t.Fatal("the viewer differs from the screen")
	}
	s.mu.RLock()
	fellBack := s.noShared
	s.mu.RUnlock()
	if !fellBack {
		t.Fatal("the failed shared capture was not noted")
	}
}
