package bridge

import (
	"bytes"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// fillRows gives rows y0..y1 of f distinct, text-like content.
func fillRows(f *Frame, y0, y1 int, rng *rand.Rand) {
	for y := y0; y < y1; y++ {
		blank := rng.IntN(4) == 0 // blank rows, as between lines of text
		for x := 0; x < f.W; x++ {
			c := uint32(0xffffff)
			if !blank && rng.IntN(3) == 0 {
				c = rng.Uint32() & 0xffffff
			}
			p := f.at(x, y)
			p[0], p[1], p[2], p[3] = byte(c), byte(c>>8), byte(c>>16), byte(rng.Uint32()) // X byte: garbage
		}
	}
}

// scrolled returns a copy of f whose rows y0..y1 moved by dy (new row y
// is old row y+dy), the revealed rows filled anew.
func scrolled(f *Frame, y0, y1, dy int, rng *rand.Rand) *Frame {
	g := NewFrame(f.W, f.H)
	copy(g.Pix, f.Pix)
	for y := y0; y < y1; y++ {
		if sy := y + dy; sy >= y0 && sy < y1 {
			copy(g.Pix[y*g.Stride:(y+1)*g.Stride], f.Pix[sy*f.Stride:(sy+1)*f.Stride])
		} else {
			fillRows(g, y, y+1, rng)
		}
	}
	return g
}

func TestDetectScroll(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	old := NewFrame(320, 400)
	fillRows(old, 0, 400, rng)
	box := Rect{0, 0, 320, 400}
	for _, tc := range []struct {
		name    string
		dy      int
		y0, y1  int
		wantOK  bool
		wantDst Rect
	}{
		{"down 4", 4, 0, 400, true, Rect{0, 0, 320, 396}},
		{"up 7", -7, 0, 400, true, Rect{0, 7, 320, 393}},
		{"a viewport 100..300 by 30", 30, 100, 300, true, Rect{0, 100, 320, 170}},
		{"too far to keep enough rows", 380, 0, 400, false, Rect{}},
		{"no move", 0, 0, 400, false, Rect{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			new := scrolled(old, tc.y0, tc.y1, tc.dy, rng)
			var sc scrollScratch
			got, ok := detectScroll(old, new, box, &sc, true)
			if ok != tc.wantOK || (ok && (got.dy != tc.dy || got.dst != tc.wantDst)) {
				t.Fatalf("detectScroll = %+v, %v; want dy %d dst %+v, %v", got, ok, tc.dy, tc.wantDst, tc.wantOK)
			}
		})
	}
	// Unrelated content is no scroll.
	other := NewFrame(320, 400)
	fillRows(other, 0, 400, rng)
	var sc scrollScratch
	if got, ok := detectScroll(old, other, box, &sc, true); ok {
		t.Fatalf("found %+v between unrelated pictures", got)
	}
}

// TestDetectScrollBesideAScrollBar: the page moves by 4 rows while a
// scroll bar's thumb at the right edge moves 12 rows its own way; the
// move found covers every row, and only the thumb's tiles are bad.
func TestDetectScrollBesideAScrollBar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const w, h, thumbX = 320, 400, 308
	page := NewFrame(w, h)
	fillRows(page, 0, h, rng)
	thumb := func(f *Frame, y0 int) {
		for y := y0; y < y0+60; y++ {
			for x := thumbX; x < thumbX+10; x++ {
				p := f.at(x, y)
				p[0], p[1], p[2] = 0x80, 0x80, 0x80
			}
		}
	}
	before := NewFrame(w, h)
	copy(before.Pix, page.Pix)
	thumb(before, 100)
	after := scrolled(page, 0, h, 4, rng) // the page moved...
	thumb(after, 112)                     // ...and the thumb its own way
	var sc scrollScratch
	got, ok := detectScroll(before, after, Rect{0, 0, w, h}, &sc, true)
	// The move covers every row and column; the tiles of the right
	// column where the thumbs were or are (rows 96-171) do not follow it.
	if want := (Rect{0, 0, w, 396}); !ok || got.dy != 4 || got.dst != want || !slices.Equal(got.bad, []int{9, 14}) {
		t.Fatalf("detectScroll = %+v, %v; want dy 4 over %+v, bad tiles 9 and 14", got, ok, want)
	}
	for _, tc := range []struct {
		t    Rect
		want bool
	}{
		{Rect{256, 64, 64, 64}, false}, // the thumbs' tiles
		{Rect{256, 128, 64, 64}, false},
		{Rect{256, 192, 64, 64}, true}, // the rest of the column moved
		{Rect{0, 64, 64, 64}, true},
	} {
		if got := got.explains(before, after, tc.t); got != tc.want {
			t.Errorf("explains(%v) = %v, want %v", tc.t, got, tc.want)
		}
	}
}

// A fixed element over a scrolling page (a 32-px button at the bottom
// left): the move still covers every row it can, and only the button's
// tiles are bad, where it was and where it is.
func TestDetectScrollUnderAFixedElement(t *testing.T) {
	const w, h = 640, 480
	rng := rand.New(rand.NewPCG(11, 12))
	page := NewFrame(w, h)
	fillRows(page, 0, h, rng)
	button := func(f *Frame) {
		for y := h - 40; y < h-8; y++ {
			for x := 8; x < 40; x++ {
				p := f.at(x, y)
				p[0], p[1], p[2] = 0xff, 0, 0xff
			}
		}
	}
	before := NewFrame(w, h)
	copy(before.Pix, page.Pix)
	button(before)
	after := scrolled(page, 0, h, 120, rng)
	button(after)
	var sc scrollScratch
	got, ok := detectScroll(before, after, Rect{0, 0, w, h}, &sc, true)
	// New rows 0..359 are old rows 120..479; the button was on old rows
	// 440-471 (new 320-351, tile row 5) and is on new rows 440-471
	// (tile rows 6 and 7, outside the move).
	if want := (Rect{0, 0, w, 360}); !ok || got.dy != 120 || got.dst != want || !slices.Equal(got.bad, []int{5 * 10}) {
		t.Fatalf("detectScroll = %+v, %v; want dy 120 over %+v, bad tile 50", got, ok, want)
	}
}

// setFrame replaces the screen's picture and reports damage over rows
// y0..y1.
func (m *memScreen) setFrame(f *Frame, y0, y1 int) {
	m.mu.Lock()
	copy(m.f.Pix, f.Pix)
	m.mu.Unlock()
	m.damage <- toImage(Rect{0, y0, f.W, y1 - y0})
}

// settle waits until the capture loop has captured since n captures,
// then a moment for it to mark the viewers.
func (m *memScreen) settle(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, "the capture loop did not take the change in", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.captures > n
	})
	time.Sleep(5 * time.Millisecond)
}

func (m *memScreen) captureCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.captures
}

func (m *memScreen) frame() *Frame {
	m.mu.Lock()
	defer m.mu.Unlock()
	g := NewFrame(m.f.W, m.f.H)
	copy(g.Pix, m.f.Pix)
	return g
}

// countingConn counts what the server sends a test viewer.
type countingConn struct {
	io.Reader
	n int
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Reader.Read(p)
	c.n += n
	return n, err
}

// noiseScreen is a 320x400 screen of random rows, its damage taken.
func noiseScreen(rng *rand.Rand) *memScreen {
	scr := newMemScreen(320, 400)
	f := NewFrame(320, 400)
	fillRows(f, 0, 400, rng)
	scr.setFrame(f, 0, 400)
	<-scr.damage
	return scr
}

// TestScrollConverges scrolls and paints the screen at random while two
// viewers, one taking CopyRect and one not, ask for updates at random
// moments; whenever they catch up, each picture equals the screen, and
// the CopyRect viewer has used moves and fewer bytes.
func TestScrollConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	scr := noiseScreen(rng)
	s := newTestServer(t, scr, "")
	viewers := make([]*rfbClient, 2)
	counts := make([]*countingConn, 2)
	for i, encs := range [][]int32{{EncCopyRect, EncZlib}, {EncZlib}} {
		v := dialRFB(t, s, version38, "", ConnOptions{})
		counts[i] = &countingConn{Reader: v.c} // nothing is buffered after the handshake
		v.br.Reset(counts[i])
		v.setEncodings(encs...)
		v.request(false)
		v.update()
		viewers[i] = v
	}
	catchUp := func(v *rfbClient) {
		t.Helper()
		for range 20 {
			if v.matches(scr) {
				return
			}
			v.request(true)
			v.update()
		}
		t.Fatalf("viewer (%d moves) never caught up with the screen", v.copies)
	}
	// A fixed element over the page, a whole tile: the page moves under
	// it, so a move brings the viewer other pixels there, which must be
	// sent again though the screen did not change there.
	button := func(f *Frame) *Frame {
		for y := 256; y < 320; y++ {
			for x := 64; x < 128; x++ {
				p := f.at(x, y)
				p[0], p[1], p[2] = 0xff, 0, 0xff
			}
		}
		return f
	}
	for step := range 60 {
		f := scr.frame()
		n := scr.captureCount()
		switch rng.IntN(4) {
		case 0: // paint a band
			y := rng.IntN(380)
			fillRows(f, y, y+20, rng)
			scr.setFrame(button(f), y, y+20)
		default: // scroll the viewport 40..360
			dy := rng.IntN(31) - 15
			if dy == 0 {
				dy = 9
			}
			scr.setFrame(button(scrolled(f, 40, 360, dy, rng)), 40, 360)
		}
		scr.settle(t, n) // the capture loop takes it in before anyone asks
		for _, v := range viewers {
			if rng.IntN(3) == 0 || step == 59 {
				catchUp(v) // sometimes a viewer lets changes pile up first
			}
		}
	}
	if viewers[0].copies == 0 || viewers[1].copies != 0 {
		t.Fatalf("moves used: CopyRect viewer %d, other %d", viewers[0].copies, viewers[1].copies)
	}
	t.Logf("CopyRect viewer: %d moves, %d bytes; the other: %d bytes", viewers[0].copies, counts[0].n, counts[1].n)
	// Noise content and viewers that let moves pile up make this a hard
	// case: 16% saved when written, 42% once moves a viewer has not
	// had yet are composed into one (0 without CopyRect).
	if counts[0].n*10 > counts[1].n*7 {
		t.Fatalf("CopyRect saved less than 30%%: %d bytes vs %d", counts[0].n, counts[1].n)
	}
}

func TestRowsEqual(t *testing.T) {
	base := make([]byte, 4*7) // an odd number of pixels: the 4-byte tail too
	for i := range base {
		base[i] = byte(i * 13)
	}
	tests := []struct {
		name string
		at   int // byte to change, -1 none
		want bool
	}{
		{"same", -1, true},
		{"X byte of the first pixel", 3, true},
		{"X byte of the last pixel", 27, true},
		{"blue of pixel 0", 0, false},
		{"green of pixel 1", 5, false},
		{"red of pixel 3", 14, false},
		{"red of the last (tail) pixel", 26, false},
	}
	for _, tt := range tests {
		b := bytes.Clone(base)
		if tt.at >= 0 {
			b[tt.at] ^= 0x40
		}
		if got := rowsEqual(base, b); got != tt.want {
			t.Errorf("%s: rowsEqual = %v", tt.name, got)
		}
	}
	if rowsEqual(base, base[:24]) {
		t.Error("rows of different lengths equal")
	}
}

func BenchmarkRowsEqual(b *testing.B) {
	a := make([]byte, 4*1280)
	c := bytes.Clone(a)
	b.SetBytes(int64(len(a)))
	for b.Loop() {
		rowsEqual(a, c)
	}
}

// A search that keeps failing backs off (at most maxScrollSkip captures
// skipped in a row), and a scroll that comes is still found soon.
func TestScrollSearchBackoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	old := NewFrame(320, 400)
	fillRows(old, 0, 400, rng)
	box := Rect{0, 0, 320, 400}
	other := NewFrame(320, 400)
	fillRows(other, 0, 400, rng)
	var sc scrollScratch
	searched := 0
	for range 40 {
		sc0 := sc.skip
		detectScroll(old, other, box, &sc, true)
		if sc0 == 0 {
			searched++
		}
	}
	if searched >= 40 || searched < 40/(maxScrollSkip+1) {
		t.Fatalf("%d of 40 failing captures searched", searched)
	}
	moved := scrolled(old, 0, 400, 12, rng)
	for i := 0; ; i++ {
		if _, ok := detectScroll(old, moved, box, &sc, true); ok {
			if sc.fails != 0 || sc.skip != 0 {
				t.Fatalf("after a find: fails %d skip %d", sc.fails, sc.skip)
			}
			break
		}
		if i > maxScrollSkip {
			t.Fatalf("a scroll after failures not found in %d captures", i+1)
		}
	}
}

// A box repainted with most rows where they were (a typed line in a
// repainted window) is not searched: no row is hashed, and it is no
// failure that backs the search off. Scrolled, it is searched.
func TestScrollSearchSkipsRowsInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	old := NewFrame(320, 400)
	fillRows(old, 0, 400, rng)
	box := Rect{0, 0, 320, 400}
	for _, tc := range []struct {
		name   string
		new    *Frame
		search bool
	}{
		{"a typed line", func() *Frame { f := scrolled(old, 0, 400, 0, rng); fillRows(f, 200, 220, rng); return f }(), false},
		{"half the rows rewritten", func() *Frame { f := scrolled(old, 0, 400, 0, rng); fillRows(f, 0, 200, rng); return f }(), true},
		{"scrolled by 40", scrolled(old, 0, 400, 40, rng), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sc scrollScratch
			detectScroll(old, tc.new, box, &sc, true)
			if searched := len(sc.old) > 0; searched != tc.search {
				t.Fatalf("searched %v, want %v", searched, tc.search)
			}
			if !tc.search && sc.fails != 0 {
				t.Fatalf("an unsearched box counted as %d failures", sc.fails)
			}
		})
	}
}

func TestComposeScroll(t *testing.T) {
	band := func(y, h int) Rect { return Rect{0, y, 320, h} }
	tests := []struct {
		name          string
		first, second scroll
		want          scroll
		ok            bool
	}{
		{"two steps down", scroll{dst: band(40, 300), dy: 20}, scroll{dst: band(40, 300), dy: 30},
			scroll{dst: band(40, 270), dy: 50}, true},
		{"down then up", scroll{dst: band(40, 300), dy: 20}, scroll{dst: band(50, 290), dy: -10},
			scroll{dst: band(50, 290), dy: 10}, true},
		{"back where it was", scroll{dst: band(40, 300), dy: 20}, scroll{dst: band(40, 300), dy: -20}, scroll{}, false},
		{"other columns", scroll{dst: band(40, 300), dy: 20}, scroll{dst: Rect{8, 40, 300, 300}, dy: 5},
			scroll{dst: Rect{8, 40, 300, 295}, dy: 25}, true},
		{"a window dragged twice", scroll{dst: Rect{100, 100, 200, 150}, dx: 5, dy: 3}, scroll{dst: Rect{96, 98, 200, 150}, dx: 4, dy: 2},
			scroll{dst: Rect{96, 98, 200, 150}, dx: 9, dy: 5}, true},
		{"dragged back", scroll{dst: Rect{100, 100, 200, 150}, dx: 5, dy: 3}, scroll{dst: Rect{105, 103, 200, 150}, dx: -5, dy: -3}, scroll{}, false},
		{"too few columns left", scroll{dst: Rect{100, 100, 200, 150}, dx: 5, dy: 3}, scroll{dst: Rect{0, 100, 200, 150}, dx: 260, dy: 0}, scroll{}, false},
		{"too few rows left", scroll{dst: band(40, 100), dy: 20}, scroll{dst: band(40, 100), dy: 60}, scroll{}, false},
	}
	for _, tt := range tests {
		got, ok := composeScroll(tt.first, tt.second)
		if ok != tt.ok || (ok && (got.dst != tt.want.dst || got.dx != tt.want.dx || got.dy != tt.want.dy)) {
			t.Errorf("%s: %+v %v, want %+v %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
	if got := cutOut([]Rect{band(40, 300), band(40, 300)}, band(40, 270)); len(got) != 2 || got[0] != band(310, 30) || got[1] != band(310, 30) {
		t.Errorf("cutOut: %v", got)
	}
}

// A viewer asking for updates all the while the screen scrolls: a
// capture can land between the writer taking its tiles and copying
// their pixels. Once the screen is still, the viewer must catch up
// exactly (it did not always: pixels newer than the marks were moved
// by the next CopyRect and nothing marked them again).
func TestScrollWhileViewerReads(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	scr := noiseScreen(rng)
	s := newTestServer(t, scr, "")
	v := dialRFB(t, s, version38, "", ConnOptions{})
	v.setEncodings(EncCopyRect, EncZlib)
	v.request(false)
	v.update()
	for round := range 8 {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() { // the screen scrolls until stop; ends then
			defer close(done)
			r := rand.New(rand.NewPCG(uint64(round), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				dy := r.IntN(21) - 10
				if dy == 0 {
					dy = 5
				}
				scr.setFrame(scrolled(scr.frame(), 40, 360, dy, r), 40, 360)
				time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
			}
		}()
		for range 15 { // reads while it scrolls
			v.request(true)
			v.update()
		}
		close(stop)
		<-done
		n := scr.captureCount()
		scr.setFrame(scr.frame(), 0, 1) // one more capture: the last change is in
		scr.settle(t, n)
		for i := 0; !v.matches(scr); i++ {
			if i == 20 {
				t.Fatalf("round %d: the viewer does not catch up with a still screen", round)
			}
			v.request(true)
			v.update()
		}
	}
}

func BenchmarkRowHash(b *testing.B) {
	row := make([]byte, 4*1280)
	for i := range row {
		row[i] = byte(i * 7)
	}
	for _, path := range []struct {
		name string
		f    func([]byte) uint64
	}{{"rowHash", rowHash}, {"rowHashGo", rowHashGo}} {
		b.Run(path.name, func(b *testing.B) {
			b.SetBytes(int64(len(row)))
			for b.Loop() {
				path.f(row)
			}
		})
	}
}

// A row's hash ignores the X bytes and changes with any one pixel's
// colour, at every position and every length (the vector path's full
// steps, its 8-pixel steps, its tail, and the short rows of the scalar
// path).
func TestRowHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, px := range []int{1, 7, 63, 64, 65, 71, 72, 128, 321, 1280, 1283} {
		row := make([]byte, 4*px)
		for i := range row {
			row[i] = byte(rng.Uint32())
		}
		h := rowHash(row)
		x := slices.Clone(row)
		for i := 3; i < len(x); i += 4 {
			x[i] ^= 0xa5
		}
		if rowHash(x) != h {
			t.Fatalf("%d pixels: the X bytes change the hash", px)
		}
		for p := range px {
			for c := range 3 {
				y := slices.Clone(row)
				y[4*p+c] ^= 1 << (p % 8)
				if rowHash(y) == h {
					t.Fatalf("%d pixels: byte %d of pixel %d changed, the hash did not", px, c, p)
				}
			}
		}
	}
}

// Scrolled step after step, the old picture's row hashes are the last
// search's new ones when the framebuffer has not changed since; not when
// it has.
func TestScrollHashesReused(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	box := Rect{0, 0, 320, 400}
	f0 := NewFrame(320, 400)
	fillRows(f0, 0, 400, rng)
	f1 := scrolled(f0, 0, 400, 8, rng)
	f2 := scrolled(f1, 0, 400, 8, rng)
	for _, tc := range []struct {
		name       string
		gen, after uint64 // the generation the capture leaves, and the next one's
		reuse      bool
	}{
		{"framebuffer as hashed", 5, 5, true},
		{"changed since", 5, 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sc scrollScratch
			sc.fbGen = 4
			if _, ok := detectScroll(f0, f1, box, &sc, true); !ok || !sc.fresh {
				t.Fatal("first step not found")
			}
			sc.hashedGen = tc.gen // as the capture loop does, f1 now in the framebuffer
			prev := &sc.new[0]
			sc.fbGen, sc.fresh = tc.after, false
			got, ok := detectScroll(f1, f2, box, &sc, true)
			if !ok || got.dy != 8 {
				t.Fatalf("second step: %+v, %v", got, ok)
			}
			if reused := &sc.old[0] == prev; reused != tc.reuse {
				t.Fatalf("old hashes reused %v, want %v", reused, tc.reuse)
			}
			var fresh scrollScratch
			fresh.hashRows(f1, f2, box, box.W-64)
			if !slices.Equal(sc.old, fresh.old) || !slices.Equal(sc.oldLeft, fresh.oldLeft) || !slices.Equal(sc.new, fresh.new) {
				t.Fatal("the hashes differ from hashing afresh")
			}
		})
	}
}
