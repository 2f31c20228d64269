package bridge

import (
	"errors"
	"image"
	"math/rand/v2"
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

// TestSampleBox: a box is compared on the rows of each tile a phase
// picks; a tile differs when one of those rows does (the X byte aside),
// and rows unchanged across the whole box are counted.
func TestSampleBox(t *testing.T) {
	a, b := NewFrame(192, 69), NewFrame(192, 69)
	box := Rect{0, 0, 192, 69} // 3x2 tiles, the second row of tiles 5 rows high
	for _, tc := range []struct {
		name    string
		changed []int // rows changed in b, at x = 10 (tile 0 of its band) and x = 140 (tile 2)
		xByte   bool
		phase   int
		want    []int // tiles (of the box, row by row) found to differ
		same    int   // rows unchanged of the 4+1 sampled
	}{
		{"unchanged", nil, false, 0, nil, 5},
		{"sampled row", []int{16}, false, 0, []int{0, 2}, 4},
		{"row of another phase", []int{17}, false, 0, nil, 5},
		{"that phase", []int{17}, false, 1, []int{0, 2}, 4},
		{"last row, phase 15", []int{63}, false, 15, []int{0, 2}, 4},
		{"only the X byte", []int{16}, true, 0, nil, 5},
		{"two rows, one tile each", []int{0, 16}, false, 0, []int{0, 2}, 3},
		{"short tile: phase mod height", []int{66}, false, 7, []int{3, 5}, 4},
		{"short tile, other row", []int{67}, false, 7, nil, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copy(b.Pix, a.Pix)
			for _, y := range tc.changed {
				for _, x := range []int{10, 140} {
					i := y*b.Stride + 4*x
					if tc.xByte {
						b.Pix[i+3] ^= 0xff
					} else {
						b.Pix[i+1] ^= 0xff
					}
				}
			}
			differs := make([]bool, 6)
			for i := range differs {
				differs[i] = true // left from an earlier box: cleared
			}
			same, rows := sampleBox(a, b, box, tc.phase, differs, nil)
			var got []int
			for i, d := range differs {
				if d {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tc.want) || same != tc.same || rows != 5 {
				t.Fatalf("sampleBox: tiles %v, %d of %d rows unchanged; want %v, %d of 5", got, same, rows, tc.want, tc.same)
			}
		})
	}
}

// TestSampleBoxSums: sampled rows found unchanged leave their hash in
// sums; a later sample of the same span compares the capture's row with
// that hash, not with the old picture, and finds any pixel changed; a
// row of another span, or one forgotten, is compared again.
func TestSampleBoxSums(t *testing.T) {
	const w, h = 320, 128 // 5x2 tiles
	box := Rect{0, 0, w, h}
	for _, tc := range []struct {
		name  string
		edit  func(old, cur *Frame, sums rowSums) // after the rows' hashes were learnt at phase 0
		box   Rect
		want  []int // tiles found to differ
		known bool  // row 16's hash is known afterwards
	}{
		{"unchanged: known", func(old, cur *Frame, sums rowSums) {}, box, nil, true},
		{"one pixel of the capture", func(old, cur *Frame, sums rowSums) { cur.Pix[16*cur.Stride+4*200] ^= 1 }, box, []int{3}, true},
		{"X byte only", func(old, cur *Frame, sums rowSums) { cur.Pix[16*cur.Stride+4*200+3] ^= 0xff }, box, nil, true},
		{"old row unread once hashed", func(old, cur *Frame, sums rowSums) { old.Pix[16*old.Stride+4*10] ^= 1 }, box, nil, true},
		{"another span: compared", func(old, cur *Frame, sums rowSums) { old.Pix[16*old.Stride+4*10] ^= 1 }, Rect{0, 0, 256, h}, []int{0}, false},
		{"forgotten: compared", func(old, cur *Frame, sums rowSums) {
			old.Pix[16*old.Stride+4*10] ^= 1
			sums.forget(0, 64)
		}, box, []int{0}, false},
		{"forgotten, then equal again: known", func(old, cur *Frame, sums rowSums) {
			old.Pix[16*old.Stride+4*10] ^= 1
			cur.Pix[16*cur.Stride+4*10] ^= 1
			sums.forget(16, 17)
		}, box, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, cur := NewFrame(w, h), NewFrame(w, h)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range old.Pix {
				old.Pix[i] = byte(rng.Uint32())
			}
			copy(cur.Pix, old.Pix)
			var sums rowSums
			sums.reset(h)
			differs := make([]bool, 10)
			if same, rows := sampleBox(old, cur, box, 0, differs, sums); same != rows || !sums[16].ok || !sums[80].ok || sums[17].ok {
				t.Fatalf("first sample: %d of %d rows unchanged, rows 16/80/17 known %v/%v/%v; want all, true/true/false", same, rows, sums[16].ok, sums[80].ok, sums[17].ok)
			}
			tc.edit(old, cur, sums)
			sampleBox(old, cur, tc.box, 0, differs, sums)
			var got []int
			for i, d := range differs[:(tc.box.W/tile)*2] {
				if d {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("tiles found to differ %v, want %v", got, tc.want)
			}
			if k := sums[16].ok && sums[16].w == int32(tc.box.W); k != tc.known {
				t.Errorf("row 16's hash for this span known: %v, want %v", k, tc.known)
			}
		})
	}
}

// TestSamplerVerify: once big damage is quiet every suspect is compared
// in full; at verifyMax while it goes on, only those not sampled at
// every phase since the last time, and the others start again.
func TestSamplerVerify(t *testing.T) {
	const w, h = 192, 64 // 3 tiles
	t0 := time.Now()
	var p sampler
	p.reset(3)
	for phase := range sampleStep {
		p.mark(0, t0, phase) // tile 0: the damage covered it at every phase
	}
	p.mark(1, t0, 0) // tile 1: at some phases only
	p.mark(1, t0, 2)
	p.last = t0
	tiles := func(rs []Rect) []int {
		var out []int
		for _, r := range rs {
			out = append(out, r.X/tile)
		}
		return out
	}
	if d, ok := p.due(t0); !ok || d != verifyQuiet {
		t.Fatalf("due %v %v, want %v", d, ok, verifyQuiet)
	}
	// Damage goes on (last is recent), verifyMax is reached.
	now := t0.Add(verifyMax)
	p.last = now.Add(-verifyQuiet / 2)
	if got := tiles(p.verify(w, h, now)); !slices.Equal(got, []int{1}) {
		t.Fatalf("at verifyMax under damage: compared %v, want [1]", got)
	}
	if !p.suspect[0] || p.phases[0] != 0 || !p.first.Equal(now) {
		t.Fatalf("tile 0 after verifyMax: suspect %v, phases %b, period from %v; want true, 0, %v", p.suspect[0], p.phases[0], p.first, now)
	}
	p.clear(1) // as the full compare does
	// The next period: tile 0 is sampled at half the phases only.
	for _, phase := range []int{1, 3, 5, 7} {
		p.mark(0, now, phase)
	}
	later := now.Add(verifyMax)
	p.last = later.Add(-verifyQuiet / 2)
	if got := tiles(p.verify(w, h, later)); !slices.Equal(got, []int{0}) {
		t.Fatalf("a period with some phases: compared %v, want [0]", got)
	}
	// Quiet: everything, whatever its phases.
	p.reset(3)
	for phase := range sampleStep {
		p.mark(2, later, phase)
	}
	p.last = later
	if got := tiles(p.verify(w, h, later.Add(verifyQuiet))); !slices.Equal(got, []int{2}) {
		t.Fatalf("quiet: compared %v, want [2]", got)
	}
}

// TestSamplerRefire: the verify timer, firing, compares the suspects
// when due and else is put off by at least verifyRearm.
func TestSamplerRefire(t *testing.T) {
	t0 := time.Now()
	tests := []struct {
		name     string
		suspects bool
		first    time.Duration // period began, before now
		last     time.Duration // last sampled capture, before now
		want     time.Duration
		wantOK   bool
	}{
		{name: "no suspects", last: time.Second},
		{name: "quiet", suspects: true, first: 300 * time.Millisecond, last: verifyQuiet, wantOK: true},
		{name: "quiet long since", suspects: true, first: time.Hour, last: time.Hour, wantOK: true},
		{name: "damage just now", suspects: true, first: 300 * time.Millisecond, want: verifyRearm, wantOK: true},
		{name: "damage 90 ms ago", suspects: true, first: 300 * time.Millisecond, last: 90 * time.Millisecond, want: verifyRearm, wantOK: true},
		{name: "verifyMax reached", suspects: true, first: verifyMax, wantOK: true},
		{name: "verifyMax near", suspects: true, first: verifyMax - 10*time.Millisecond, want: verifyRearm, wantOK: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p sampler
			p.reset(2)
			if tc.suspects {
				p.mark(1, t0.Add(-tc.first), 0)
			}
			p.last = t0.Add(-tc.last)
			got, ok := p.refire(t0)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("refire = %v, %v; want %v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestVerifyTimerNotPostponed: under continuous big damage the capture
// loop arms the verify timer when it fires, a few times a second, not
// at every capture (each move of an armed timer woke the process for
// nothing), and the suspects are still compared once the damage stops.
func TestVerifyTimerNotPostponed(t *testing.T) {
	scr := newSharedScreen(512, 384)
	s := newTestServer(t, scr, "")
	noVNCViewer(t, s, EncTight) // with no viewer, damage is not captured
	scr.captured(t, 0)
	whole := image.Rect(0, 0, 512, 384)
	scr.mu.Lock()
	n := scr.shared
	scr.mu.Unlock()
	arms := s.verify.arms.Load()
	const captures, every = 60, 10 * time.Millisecond
	for range captures {
		scr.damage <- whole // unchanged, sampled: suspects at each capture
		time.Sleep(every)
	}
	// Damage may coalesce (how much depends on the machine's load: under
	// make test's parallel packages the capture loop once ran fewer than
	// 16 times for 60 damages), never vanish: one capture after it at least. The limit
	// below is by elapsed time, whatever the number of captures.
	scr.captured(t, n)
	armed := s.verify.arms.Load() - arms
	scr.mu.Lock()
	t.Logf("%d captures for %d damages, the verify timer armed %d times", scr.shared-n, captures, armed)
	scr.mu.Unlock()
	if limit := int32(captures*every/verifyRearm) + 2; armed > limit {
		t.Fatalf("verify timer armed %d times in %d captures, want at most %d", armed, captures, limit)
	}
	waitUntil(t, "suspects were never compared after the damage stopped", func() bool {
		_, _, k := sampling(s, 0)
		return k == 0
	})
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

// inkGlyph paints text-like ink, 16 rows by 10 pixels, in tile (tx, ty)
// of f: rows enough that every phase's sampled rows hit it.
func inkGlyph(f *Frame, tx, ty int) {
	for y := ty*tile + 20; y < ty*tile+36; y++ {
		for x := tx*tile + 5; x < tx*tile+15; x++ {
			p := f.at(x, y)
			p[0], p[1], p[2] = 0x30, 0x30, 0x30
		}
	}
}

// TestSamplerHot: a tile is compared in full for hotSpan captures after
// one found it changed, and so is the tile right of it.
func TestSamplerHot(t *testing.T) {
	const cols = 4
	var p sampler
	p.reset(2 * cols)
	p.seq = 10
	p.changedNow(5) // row 1, column 1
	for _, tc := range []struct {
		seq  uint32
		tile int
		col  int
		want bool
	}{
		{10, 5, 1, false}, // the capture that found it: not before it
		{11, 5, 1, true},
		{11, 6, 2, true},  // right of it
		{11, 4, 0, false}, // left of it
		{11, 7, 3, false},
		{11, 1, 1, false}, // above it
		{14, 5, 1, true},
		{14, 6, 2, true},
		{15, 5, 1, false}, // hotSpan later
		{15, 6, 2, false},
	} {
		p.seq = tc.seq
		if got := p.hot(tc.tile, tc.col); got != tc.want {
			t.Errorf("capture %d: tile %d hot %v, want %v", tc.seq, tc.tile, got, tc.want)
		}
	}
	var fresh sampler
	fresh.reset(cols)
	fresh.seq = 3
	if fresh.hot(0, 0) || fresh.hot(1, 1) {
		t.Error("a tile never changed is hot")
	}
}

// TestHotTileGoesAtOnce: a one-pixel line between the sampled rows goes
// at once where the last captures found changes (the tile, the one right
// of it), and waits as a suspect elsewhere.
func TestHotTileGoesAtOnce(t *testing.T) {
	scr := newSharedScreen(512, 384)
	s := newTestServer(t, scr, "")
	c := noVNCViewer(t, s, EncTight)
	scr.captured(t, 0)
	whole := image.Rect(0, 0, 512, 384)
	cols := 512 / tile
	change := func(paint func()) {
		t.Helper()
		scr.mu.Lock()
		n := scr.shared
		paint()
		scr.mu.Unlock()
		scr.damage <- whole
		scr.captured(t, n)
	}
	line := func(tx, ty int) func() { // between the rows sampled next
		phase, _, _ := sampling(s, 0)
		y := ty*tile + (phase+4)%sampleStep + 8
		return func() {
			for x := tx*tile + 3; x < tx*tile+40; x++ {
				p := scr.f.at(x, y)
				p[0], p[1], p[2] = 0, 0, 0xff
			}
		}
	}
	// A glyph (16 rows: the sampled rows find it) makes tile (3, 1) hot.
	change(func() { inkGlyph(scr.f, 3, 1) })
	c.request(true)
	c.update()
	change(line(4, 1)) // right of the hot tile
	if _, suspect, _ := sampling(s, cols+4); suspect {
		t.Fatal("a line right of a hot tile was left a suspect")
	}
	c.request(true)
	c.update()
	if !c.matches(scr.memScreen) {
		t.Fatal("the line right of the hot tile did not go at once")
	}
	change(line(1, 4)) // far from any change
	if _, suspect, _ := sampling(s, 4*cols+1); !suspect {
		t.Fatal("a line in a cold tile between the sampled rows was not left a suspect")
	}
}

// TestSampledCapture: a big damaged box is compared on a row in 8 of
// each tile. A change those rows hit goes at once; one between them (a
// one-pixel line) leaves its tile a suspect, compared in full once the
// damage stops: the viewer still ends up with the exact screen.
func TestSampledCapture(t *testing.T) {
	scr := newSharedScreen(512, 384)
	s := newTestServer(t, scr, "")
	scr.recordSuspects(s)
	c := noVNCViewer(t, s, EncTight)
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
	inkGlyph(scr.f, 3, 1)
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
	c := noVNCViewer(t, s, EncTight)
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

// TestSampledCaptureSearchesOnlyMoves: a big box repainted with most of
// its sampled rows where they were (a typed glyph in a repainted
// window) is not searched for a scroll, which would hash its rows; the
// same box scrolled is searched, and the move goes as CopyRect.
func TestSampledCaptureSearchesOnlyMoves(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	scr := newSharedScreen(512, 384)
	fillRows(scr.f, 0, 384, rng)
	s := newTestServer(t, scr, "")
	c := noVNCViewer(t, s, EncCopyRect, EncTight)
	scr.captured(t, 0)
	// Per capture, noted by the capture goroutine: whether it searched,
	// the failed searches in a row and the suspects it left.
	var searched []bool
	fails, suspects := 0, 0
	scr.mu.Lock()
	base := scr.shared
	scr.after = func() {
		_, _, k := sampling(s, 0)
		scr.mu.Lock()
		searched, fails, suspects = append(searched, s.scrollSc.fresh), s.scrollSc.fails, k
		scr.mu.Unlock()
	}
	scr.mu.Unlock()
	whole := image.Rect(0, 0, 512, 384)
	step := func(name string, change func(f *Frame), wantSearch bool) {
		t.Helper()
		// The suspects of the step before are compared in full first
		// (a capture of their own, which searches nothing).
		waitUntil(t, "suspects were never compared", func() bool {
			scr.mu.Lock()
			defer scr.mu.Unlock()
			return len(searched) == scr.shared-base && suspects == 0
		})
		scr.mu.Lock()
		n, from := scr.shared, len(searched)
		change(scr.f)
		scr.mu.Unlock()
		scr.damage <- whole
		scr.captured(t, n)
		scr.mu.Lock()
		got, failed := slices.Contains(searched[from:], true), fails
		scr.mu.Unlock()
		if got != wantSearch || failed != 0 {
			t.Fatalf("%s: searched for a scroll %v, %d failures in a row; want %v, 0", name, got, failed, wantSearch)
		}
		for range 20 {
			if c.matches(scr.memScreen) {
				return
			}
			c.request(true)
			c.update()
		}
		t.Fatalf("%s: the viewer never caught up", name)
	}
	step("a typed glyph", func(f *Frame) {
		for y := 100; y < 116; y++ {
			for x := 200; x < 210; x++ {
				p := f.at(x, y)
				p[0], p[1], p[2] = 0, 0, 0
			}
		}
	}, false)
	step("scrolled by 40", func(f *Frame) {
		copy(f.Pix, scrolled(f, 0, 384, 40, rng).Pix)
	}, true)
	if c.copies == 0 {
		t.Fatal("the scroll went without CopyRect")
	}
}

// TestRowSumsFollowFramebuffer: whatever the captures copy into the
// framebuffer (a glyph on sampled rows, the glyph gone again, a line
// between them, a scroll), every row hash the sampled compare keeps is
// the hash of the framebuffer's row as it is after the capture, checked
// in the capture goroutine after each one.
func TestRowSumsFollowFramebuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	scr := newSharedScreen(512, 384)
	fillRows(scr.f, 0, 384, rng)
	s := newTestServer(t, scr, "")
	c := noVNCViewer(t, s, EncCopyRect, EncTight)
	scr.captured(t, 0)
	var stale []int
	known := 0
	scr.mu.Lock()
	scr.after = func() {
		s.mu.RLock()
		defer s.mu.RUnlock()
		for y, sum := range s.sums {
			if !sum.ok {
				continue
			}
			known++
			i := y*s.fb.Stride + 4*int(sum.x)
			if rowHash(s.fb.Pix[i:i+4*int(sum.w)]) != sum.h {
				stale = append(stale, y)
			}
		}
	}
	scr.mu.Unlock()
	whole := image.Rect(0, 0, 512, 384)
	for i, change := range []func(f *Frame){
		func(f *Frame) {},
		func(f *Frame) { inkGlyph(f, 3, 1) },
		func(f *Frame) { fillRows(f, tile+20, tile+36, rng) }, // the glyph's rows anew
		func(f *Frame) {},                                     // hot tiles compared in full
		func(f *Frame) { inkGlyph(f, 1, 4) },
		func(f *Frame) { copy(f.Pix, f.Pix[97*f.Stride:]); fillRows(f, 384-97, 384, rng) }, // a scroll
		func(f *Frame) {},
	} {
		scr.mu.Lock()
		n := scr.shared
		change(scr.f)
		scr.mu.Unlock()
		scr.damage <- whole
		scr.captured(t, n)
		scr.mu.Lock()
		bad, k := slices.Clone(stale), known
		scr.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("change %d: rows %v keep the hash of pixels the framebuffer no longer has", i, bad)
		}
		if k == 0 {
			t.Fatalf("change %d: no row hash known: the sampled compare never learnt one", i)
		}
	}
	// The viewer ends with the screen, once the suspects are compared.
	waitUntil(t, "suspects were never compared", func() bool { _, _, n := sampling(s, 0); return n == 0 })
	c.request(true)
	if rects := c.update(); !c.matches(scr.memScreen) {
		t.Fatalf("the viewer differs from the screen after %v", rects)
	}
}
