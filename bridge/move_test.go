package bridge

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// dragScene is a page under a window that can be drawn anywhere on it,
// with a shadow: a ring around the window darkening the page under it
// (it moves with the window but is not the window moved: the page under
// it differs).
type dragScene struct {
	page, win *Frame
	shadow    int
}

func newDragScene(w, h, ww, wh, shadow int, rng *rand.Rand) *dragScene {
	d := &dragScene{page: NewFrame(w, h), win: NewFrame(ww, wh), shadow: shadow}
	fillRows(d.page, 0, h, rng)
	fillRows(d.win, 0, wh, rng)
	for x := range ww { // a title bar: a window's top is rarely like the page
		for y := range min(wh, 12) {
			p := d.win.at(x, y)
			p[0], p[1], p[2] = byte(40+x), 0x80, byte(y)
		}
	}
	return d
}

// at draws the window with its top-left corner at x, y.
func (d *dragScene) at(x, y int) *Frame {
	f := NewFrame(d.page.W, d.page.H)
	copy(f.Pix, d.page.Pix)
	ring := Rect{x - d.shadow, y - d.shadow, d.win.W + 2*d.shadow, d.win.H + 2*d.shadow}.Intersect(Rect{0, 0, f.W, f.H})
	for yy := ring.Y; yy < ring.Y+ring.H; yy++ {
		for xx := ring.X; xx < ring.X+ring.W; xx++ {
			p := f.at(xx, yy)
			p[0], p[1], p[2] = p[0]/2, p[1]/2, p[2]/2
		}
	}
	for yy := range d.win.H {
		for xx := range d.win.W {
			if x+xx >= 0 && x+xx < f.W && y+yy >= 0 && y+yy < f.H {
				copy(f.at(x+xx, y+yy), d.win.at(xx, yy))
			}
		}
	}
	return f
}

// TestDetectMove: a window dragged over a page by all sorts of steps is
// found moved, exactly over the window; the shadow it casts, and what
// it uncovers, is left to pixels; what is not a move is not found.
func TestDetectMove(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const w, h = 640, 480
	sc := newDragScene(w, h, 260, 180, 6, rng)
	box := Rect{0, 0, w, h}
	for _, tc := range []struct {
		name     string
		from, to [2]int
		wantOK   bool
	}{
		{"right 5, down 3", [2]int{100, 90}, [2]int{105, 93}, true},
		{"left 1", [2]int{131, 70}, [2]int{130, 70}, true},
		{"up 7 only", [2]int{200, 200}, [2]int{200, 193}, true},
		{"far: 60, -40", [2]int{100, 200}, [2]int{160, 160}, true},
		{"partly off the screen", [2]int{420, 350}, [2]int{412, 346}, true},
		{"beyond reach", [2]int{40, 40}, [2]int{240, 240}, false},
		{"not moved", [2]int{100, 100}, [2]int{100, 100}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, new := sc.at(tc.from[0], tc.from[1]), sc.at(tc.to[0], tc.to[1])
			var ss scrollScratch
			got, ok := detectScroll(old, new, box, &ss, true)
			if ok != tc.wantOK {
				t.Fatalf("detectScroll = %+v, %v; want %v", got, ok, tc.wantOK)
			}
			if !ok {
				return
			}
			// What of the window was on the screen before and is now
			// must be in the move; it may take more of the shadow
			// where that looks the same moved (a blank line of the
			// page), nothing further; and it must hold.
			dx, dy := tc.from[0]-tc.to[0], tc.from[1]-tc.to[1]
			o := Rect{tc.from[0], tc.from[1], 260, 180}.Intersect(box)
			core := Rect{tc.to[0], tc.to[1], 260, 180}.Intersect(box).Intersect(Rect{o.X - dx, o.Y - dy, o.W, o.H})
			around := Rect{core.X - 6, core.Y - 6, core.W + 12, core.H + 12}
			if got.dx != dx || got.dy != dy || !contains(got.dst, core) || !contains(around, got.dst) || len(got.bad) != 0 {
				t.Fatalf("detectScroll = %+v; want %d,%d over %+v (within %+v), no bad tiles", got, dx, dy, core, around)
			}
			if !movedFrom(old, new, got.dst, dx, dy) {
				t.Fatalf("the move %+v does not hold", got)
			}
		})
	}
	t.Run("a clock over the window", func(t *testing.T) {
		old, new := sc.at(100, 100), sc.at(104, 98)
		for y := 200; y < 220; y++ { // fixed on the screen: the window moves under it
			for x := 200; x < 240; x++ {
				p, q := old.at(x, y), new.at(x, y)
				p[0], p[1], p[2] = 0, 0, 0xff
				copy(q, p)
			}
		}
		var ss scrollScratch
		got, ok := detectScroll(old, new, box, &ss, true)
		// Tile (3, 3) of the 10-wide grid: its pixels did not move.
		if !ok || got.dst != (Rect{104, 98, 260, 180}) || !slices.Equal(got.bad, []int{3*10 + 3}) {
			t.Fatalf("detectScroll = %+v, %v; want the window, tile 33 bad", got, ok)
		}
	})
	t.Run("unrelated pictures", func(t *testing.T) {
		other := NewFrame(w, h)
		fillRows(other, 0, h, rng)
		var ss scrollScratch
		if got, ok := detectScroll(sc.page, other, box, &ss, true); ok {
			t.Fatalf("found %+v between unrelated pictures", got)
		}
	})
	t.Run("the next step tried first", func(t *testing.T) {
		var ss scrollScratch
		for i, p := range [][2]int{{100, 100}, {106, 103}, {113, 105}, {121, 106}, {128, 106}} {
			if i == 0 {
				continue
			}
			q := [][2]int{{100, 100}, {106, 103}, {113, 105}, {121, 106}, {128, 106}}[i-1]
			got, ok := detectScroll(sc.at(q[0], q[1]), sc.at(p[0], p[1]), box, &ss, true)
			if !ok || got.dx != q[0]-p[0] || got.dy != q[1]-p[1] {
				t.Fatalf("step %d: %+v, %v", i, got, ok)
			}
		}
	})
}

// TestShiftBits: bits copied from dx away, between rows or within one,
// as a bit at a time would copy them.
func TestShiftBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const words = 5
	for range 2000 {
		src := make([]uint64, words)
		for i := range src {
			src[i] = rng.Uint64()
		}
		x0 := rng.IntN(64 * words)
		x1 := x0 + 1 + rng.IntN(64*words-x0)
		lo, hi := -x0, 64*words-x1 // dx keeps the source in the row
		dx := lo + rng.IntN(hi-lo+1)
		same := rng.IntN(2) == 0
		dst := slices.Clone(src)
		if !same {
			for i := range dst {
				dst[i] = rng.Uint64()
			}
		}
		want := slices.Clone(dst)
		bit := func(r []uint64, x int) uint64 { return r[x/64] >> (x % 64) & 1 }
		for x := x0; x < x1; x++ {
			want[x/64] = want[x/64]&^(1<<(x%64)) | bit(src, x+dx)<<(x%64)
		}
		if same {
			shiftBits(dst, dst, x0, x1, dx)
		} else {
			shiftBits(dst, src, x0, x1, dx)
		}
		if !slices.Equal(dst, want) {
			t.Fatalf("shiftBits [%d, %d) by %d (same row %v): %x, want %x", x0, x1, dx, same, dst, want)
		}
	}
}

// TestDragConverges: a window dragged over a page by random steps, two
// viewers, one taking CopyRect: whenever they catch up each picture is
// the screen, and the CopyRect viewer had the window moved for far
// fewer bytes.
const DEBUGX = false

func TestDragConverges(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	scene := newDragScene(320, 400, 200, 150, 4, rng)
	scr := newMemScreen(320, 400)
	x, y := 60, 100
	scr.setFrame(scene.at(x, y), 0, 400)
	<-scr.damage
	s := newTestServer(t, scr, "")
	viewers := make([]*rfbClient, 2)
	counts := make([]*countingConn, 2)
	for i, encs := range [][]int32{{EncCopyRect, EncZlib}, {EncZlib}} {
		v := dialRFB(t, s, version38, "", ConnOptions{})
		counts[i] = &countingConn{Reader: v.c}
		v.br.Reset(counts[i])
		v.setEncodings(encs...)
		v.request(false)
		v.update()
		viewers[i] = v
	}
	base := []int{counts[0].n, counts[1].n}
	catchUp := func(v *rfbClient) {
		t.Helper()
		for range 20 {
			if v.matches(scr) {
				return
			}
			if DEBUGX {
				var bb Rect
				for yy := 0; yy < 400; yy++ {
					for xx := 0; xx < 320; xx++ {
						if !v.matchesIn(scr, Rect{xx, yy, 1, 1}) {
							if bb.Empty() {
								bb = Rect{xx, yy, 1, 1}
							} else {
								bb = union(bb, Rect{xx, yy, 1, 1})
							}
						}
					}
				}
				t.Logf("mismatch %+v window at %d,%d copyrect viewer %v", bb, x, y, v == viewers[0])
			}
			v.request(true)
			v.update()
		}
		t.Fatalf("viewer (%d moves) never caught up with the screen", v.copies)
	}
	for step := range 40 {
		x = min(max(x+rng.IntN(17)-8, 0), 120)
		y = min(max(y+rng.IntN(13)-6, 0), 250)
		n := scr.captureCount()
		scr.setFrame(scene.at(x, y), 0, 400)
		scr.settle(t, n)
		for _, v := range viewers {
			if rng.IntN(3) == 0 || step == 39 {
				catchUp(v) // sometimes moves pile up first
			}
		}
	}
	if viewers[0].copies == 0 || viewers[1].copies != 0 {
		t.Fatalf("moves used: CopyRect viewer %d, other %d", viewers[0].copies, viewers[1].copies)
	}
	a, b := counts[0].n-base[0], counts[1].n-base[1]
	t.Logf("CopyRect viewer: %d moves, %d bytes; the other: %d bytes", viewers[0].copies, a, b)
	if a*2 > b {
		t.Fatalf("CopyRect saved less than half: %d bytes vs %d", a, b)
	}
}

// BenchmarkDetectMove: a search that finds a dragged window (the step
// after one found), and one that fails on a box of video (no two
// anchors agree).
func BenchmarkDetectMove(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	sc := newDragScene(1280, 800, 520, 360, 12, rng)
	box := Rect{128, 128, 640, 448}
	b.Run("drag", func(b *testing.B) {
		old, new := sc.at(200, 180), sc.at(205, 182)
		var ms moveScratch
		for b.Loop() {
			ms.last, ms.dx, ms.dy = true, -4, -2
			if _, ok := detectMove(old, new, box, &ms); !ok {
				b.Fatal("not found")
			}
		}
	})
	b.Run("video", func(b *testing.B) {
		old, new := NewFrame(1280, 800), NewFrame(1280, 800)
		fillRows(old, 0, 800, rng)
		fillRows(new, 0, 800, rng)
		var ms moveScratch
		for b.Loop() {
			if _, ok := detectMove(old, new, box, &ms); ok {
				b.Fatal("found")
			}
		}
	})
}

// TestDetectMoveTextUnderAWideShadow: a window of lines of text (15
// rows of glyphs, 6 blank, as Chromium sets 15 px type) moved up by 2
// under a 30 px shadow, placed so that rows of its tiles 21 px apart
// fall between lines: the move is found over the whole window. (On the
// bench's drag a capture in eight found none: the tiles' compared rows
// missed the text and every anchor lay in the shadow; this scene does
// not reproduce that exactly, the fix is in how tiles are sampled and
// anchors ordered: see search.)
func TestDetectMoveTextUnderAWideShadow(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	sc := newDragScene(1280, 800, 520, 360, 30, rng)
	for y := range 360 {
		if (y-28)%21 < 15 && y >= 28 {
			continue
		}
		for x := range 520 { // between lines, and the title bar's edge
			p := sc.win.at(x, y)
			p[0], p[1], p[2] = 0xff, 0xff, 0xff
		}
	}
	old, new := sc.at(100, 44), sc.at(100, 42)
	box := alignToTiles(Rect{70, 12, 580, 420}, 1280, 800)
	var ss scrollScratch
	got, ok := detectScroll(old, new, box, &ss, true)
	if !ok || got.dx != 0 || got.dy != 2 || !contains(got.dst, Rect{100, 42, 520, 358}) {
		t.Fatalf("detectScroll = %+v, %v; want 0,2 over the window", got, ok)
	}
}

// TestDetectMoveRandom: windows of random sizes dragged by random steps,
// near and over the screen's edges, with the last move remembered (its
// neighbourhood is searched first, which reached off the screen): the
// search never fails hard, and any move it finds holds over its
// destination but for its bad tiles.
func TestDetectMoveRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	const w, h = 448, 320
	var ss scrollScratch
	for i := range 300 {
		ww, wh := 64+rng.IntN(300), 64+rng.IntN(200)
		sc := newDragScene(w, h, ww, wh, rng.IntN(12), rng)
		x, y := rng.IntN(w+ww)-ww, rng.IntN(h+wh)-wh
		nx, ny := x+rng.IntN(81)-40, y+rng.IntN(81)-40
		old, new := sc.at(x, y), sc.at(nx, ny)
		box := Rect{0, 0, w, h}
		if rng.IntN(2) == 0 {
			box = alignToTiles(Rect{min(x, nx) - 12, min(y, ny) - 12, ww + abs(nx-x) + 24, wh + abs(ny-y) + 24}.Intersect(box), w, h)
		}
		if box.Empty() {
			continue
		}
		got, ok := detectScroll(old, new, box, &ss, true)
		if !ok {
			continue
		}
		if !contains(box, got.dst) || !contains(Rect{0, 0, w, h}, got.src()) {
			t.Fatalf("case %d: move %+v outside box %+v or the screen", i, got, box)
		}
		cols := (w + tile - 1) / tile
		for ty := got.dst.Y / tile * tile; ty < got.dst.Y+got.dst.H; ty += tile {
			for tx := got.dst.X / tile * tile; tx < got.dst.X+got.dst.W; tx += tile {
				part := got.dst.Intersect(Rect{tx, ty, tile, tile})
				bad := slices.Contains(got.bad, ty/tile*cols+tx/tile)
				if !bad && !movedFrom(old, new, part, got.dx, got.dy) {
					t.Fatalf("case %d: move %+v does not hold over %+v", i, got, part)
				}
			}
		}
	}
}
