package bridge

import (
	"bufio"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
)

func TestRateControl(t *testing.T) {
	const big, small = 100 << 10, 1 << 10
	type step struct {
		bytes int
		took  time.Duration
		want  int // the level after the answer, asked for 6
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"quick answers keep the level", []step{{big, 10 * time.Millisecond, 6}, {big, 50 * time.Millisecond, 6}}},
		{"a slow big update lowers it a step", []step{{big, time.Second, 4}, {big, time.Second, 1}}},
		{"a slow small update is latency", []step{{small, time.Second, 6}, {small, time.Second, 6}}},
		{"in between holds", []step{{big, time.Second, 4}, {big, 150 * time.Millisecond, 4}, {big, 150 * time.Millisecond, 4}}},
		{"three quick answers in a row raise it", []step{
			{big, time.Second, 4}, {big, time.Second, 1},
			{big, 10 * time.Millisecond, 1}, {big, 10 * time.Millisecond, 1}, {big, 10 * time.Millisecond, 4},
			{big, 10 * time.Millisecond, 4}, {big, 10 * time.Millisecond, 4}, {big, 10 * time.Millisecond, 6},
			{big, 10 * time.Millisecond, 6}, {big, 10 * time.Millisecond, 6}, {big, 10 * time.Millisecond, 6},
		}},
		{"a middling answer breaks the run", []step{
			{big, time.Second, 4}, {big, 10 * time.Millisecond, 4}, {big, 10 * time.Millisecond, 4},
			{big, 150 * time.Millisecond, 4}, {big, 10 * time.Millisecond, 4},
		}},
		{"never below the floor", []step{
			{big, time.Second, 4}, {big, time.Second, 1}, {big, time.Second, 1}, {big, time.Second, 1},
			{big, 10 * time.Millisecond, 1}, {big, 10 * time.Millisecond, 1}, {big, 10 * time.Millisecond, 4},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r rateControl
			now := time.Now()
			for i, s := range tc.steps {
				r.sent(s.bytes, now)
				now = now.Add(s.took)
				r.answered(now)
				if got := r.quality(6); got != s.want {
					t.Fatalf("step %d: level %d, want %d", i, got, s.want)
				}
			}
		})
	}

	for _, tc := range []struct {
		asked int
		want  []int // the levels going down
	}{
		{9, []int{9, 7, 4, 1, 1}},
		{7, []int{7, 4, 1, 1}},
		{5, []int{5, 4, 1, 1}},
		{2, []int{2, 1, 1}},
		{1, []int{1, 1}},
		{0, []int{0, 0}},    // asked below the floor: left alone
		{-1, []int{-1, -1}}, // no JPEG
	} {
		var r rateControl
		for i, want := range tc.want {
			r.drop = i
			if got := r.quality(tc.asked); got != want {
				t.Fatalf("asked %d, %d steps down: level %d, want %d", tc.asked, i, got, want)
			}
		}
	}

	t.Run("answers without updates and updates without answers", func(t *testing.T) {
		var r rateControl
		now := time.Now()
		if r.answered(now) {
			t.Fatal("an answer with nothing sent changed the level")
		}
		for range 10 * rateMaxSent { // never answered: bounded
			r.sent(big, now)
		}
		if len(r.unanswered) != rateMaxSent {
			t.Fatalf("%d updates remembered", len(r.unanswered))
		}
	})
}

// slowReader passes at most rate bytes a second (0: no limit).
type slowReader struct {
	r     io.Reader
	rate  atomic.Int64
	start time.Time
	n     int64
	total int // bytes read
}

func (s *slowReader) Read(p []byte) (int, error) {
	rate := s.rate.Load()
	if rate == 0 {
		n, err := s.r.Read(p)
		s.total += n
		return n, err
	}
	if s.start.IsZero() {
		s.start = time.Now()
	}
	n, err := s.r.Read(p[:min(len(p), 4096)])
	s.n += int64(n)
	s.total += n
	if due := s.start.Add(time.Duration(s.n * int64(time.Second) / rate)); time.Until(due) > 0 {
		time.Sleep(time.Until(due))
	}
	return n, err
}

// onlyViewer calls fn with the server's one viewer, locked.
func onlyViewer(s *Server, fn func(*client)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for v := range s.clients {
		v.mu.Lock()
		defer v.mu.Unlock()
		fn(v)
		return
	}
}

// changeMarked makes change, which reports damage, and waits until the
// capture loop has marked it for the server's one viewer.
func changeMarked(t *testing.T, s *Server, change func()) {
	t.Helper()
	var before, now uint64
	onlyViewer(s, func(v *client) { before = v.markedGen })
	change()
	waitUntil(t, "the change was never captured", func() bool {
		onlyViewer(s, func(v *client) { now = v.markedGen })
		return now != before
	})
}

// TestSlowLinkLowersQuality: a viewer behind a 256 KB/s pipe asks for
// JPEG quality 9 while a photo-like picture keeps changing; its updates
// go at lower levels (smaller), and back at 9 when the pipe is fast.
func TestSlowLinkLowersQuality(t *testing.T) {
	scr := newMemScreen(256, 192)
	s := newTestServer(t, scr, "")
	c := noVNCViewer(t, s, EncTight, encJPEGQuality0+9)
	slow := &slowReader{r: c.br}
	slow.rate.Store(256 << 10)
	c.br = bufio.NewReader(slow)

	level := func() (l int) { // the level the server sends this viewer at
		onlyViewer(s, func(v *client) { l = v.rate.quality(v.quality) })
		return l
	}
	rng := rand.New(rand.NewPCG(5, 6))
	photo := func() { // noise over the whole screen: JPEG, and big
		// The viewer reads slowly: the screen is still for longer than
		// refineDelay between changes. Captured and marked before it
		// asks, a change is new motion, sent lossy, not the lossless
		// refinement that was due (a race CI lost once: 147 KB).
		changeMarked(t, s, func() {
			scr.mu.Lock()
			for i := 0; i < len(scr.f.Pix); i++ {
				scr.f.Pix[i] = byte(rng.Uint32())
			}
			scr.mu.Unlock()
			scr.damage <- toImage(Rect{0, 0, 256, 192})
		})
	}
	sizes := func(n int) (first, last int) {
		for i := range n {
			photo()
			c.request(true)
			b0 := slow.total
			c.update()
			if i == 0 {
				first = slow.total - b0
			}
			last = slow.total - b0
		}
		return first, last
	}
	first, last := sizes(6)
	if l := level(); l >= 9 {
		t.Fatalf("behind a slow pipe, still at level %d", l)
	}
	if last >= first*3/4 {
		t.Fatalf("updates did not shrink: first %d bytes, last %d", first, last)
	}
	t.Logf("slow pipe: level %d, updates %d -> %d bytes", level(), first, last)

	slow.rate.Store(0)
	for i := 0; i < 60 && level() < 9; i++ {
		sizes(1)
	}
	if l := level(); l != 9 {
		t.Fatalf("with a fast pipe again, level %d, want 9", l)
	}
}
