package bridge

import (
	"sync/atomic"
	"time"
)

// Sampled change detection. Applications repaint far more than changes:
// Chromium puts its whole 1271x708 textarea on the screen at every
// keystroke, 20 times a second for a fast typist, and comparing all of
// it with the framebuffer was 45% of deskd's CPU while typing (x11vnc
// compares one scanline in 32 and never the rest). Here a big damaged
// box is compared first on every sampleStep-th row of each tile, a
// different row each capture: a tile whose sampled rows differ changed,
// and is taken whole at once. Tiles that changed in the last hotSpan
// captures, and their right neighbours, are compared in full: where a
// typist types, the next glyph is there, however thin (a full stop, an
// underscore), and goes at once. The others are suspects: they are
// compared in full once big damage has stopped for verifyQuiet (seen
// within verifyRearm more, see verifyTimer). While it goes on, the rows
// compared turn with each capture (the phase steps by 3 of 16), so a
// change between the rows of one capture, a one-pixel line, is found by
// a later one within sampleStep captures, in any tile the damage keeps
// covering; every verifyMax the suspects that were not sampled at every
// phase since the last time (the damage left them, or came at some
// phases only) are compared in full. So the viewers always end up with
// the exact screen, and a typed character goes at once.
const (
	sampleStep    = 16        // a row in 16 of each tile is compared first (8: 11% more CPU a keystroke)
	hotSpan       = 4         // captures a changed tile stays compared in full
	sampleMinArea = 256 * 256 // smaller boxes are compared in full
	verifyQuiet   = 100 * time.Millisecond
	verifyMax     = time.Second
	verifyRearm   = 250 * time.Millisecond
	allPhases     = 1<<sampleStep - 1
)

// sampler is the capture loop's (its fields under s.mu where the
// compare runs, which is all the tests need to read them).
type sampler struct {
	phase   int       // the row of each sampleStep compared this capture
	suspect []bool    // per tile: damaged, sampled rows unchanged, not compared in full since
	phases  []uint16  // per suspect: bit p set when its rows at phase p were found unchanged this period
	changed []uint32  // per tile: the capture (seq) whose sampled compare last found it changed, 0 none
	seq     uint32    // captures so far, this one included
	n       int       // suspects
	first   time.Time // when this period began: the oldest suspect was noted, or the last verifyMax
	last    time.Time // the last capture that sampled
}

// reset forgets every suspect, for a framebuffer of tiles tiles (a new
// size: it is captured in full).
func (p *sampler) reset(tiles int) {
	if len(p.suspect) != tiles {
		p.suspect, p.phases, p.changed = make([]bool, tiles), make([]uint16, tiles), make([]uint32, tiles)
	} else {
		clear(p.suspect)
		clear(p.phases)
		clear(p.changed)
	}
	p.n = 0
}

// mark notes that tile i's rows at phase were found unchanged.
func (p *sampler) mark(i int, now time.Time, phase int) {
	p.phases[i] |= 1 << phase
	if p.suspect[i] {
		return
	}
	if p.n == 0 {
		p.first = now
	}
	p.suspect[i] = true
	p.n++
}

// hot reports whether tile i, in column col, is compared in full in a
// sampled capture: it, or the tile left of it, changed in one of the
// hotSpan captures before this one.
func (p *sampler) hot(i, col int) bool {
	recent := func(j int) bool { return p.changed[j] != 0 && p.seq-p.changed[j]-1 < hotSpan }
	return recent(i) || col > 0 && recent(i-1)
}

// changedNow notes that a sampled capture found tile i changed.
func (p *sampler) changedNow(i int) { p.changed[i] = p.seq }

func (p *sampler) clear(i int) {
	if p.suspect[i] {
		p.suspect[i] = false
		p.phases[i] = 0
		p.n--
	}
}

// due returns how long until the suspects are to be compared in full
// (0: now); ok is false when there are none.
func (p *sampler) due(now time.Time) (time.Duration, bool) {
	if p.n == 0 {
		return 0, false
	}
	at := p.last.Add(verifyQuiet)
	if latest := p.first.Add(verifyMax); latest.Before(at) {
		at = latest
	}
	return max(at.Sub(now), 0), true
}

// refire returns, for the verify timer firing at now, how long until it
// is to fire again (0: compare the suspects now); ok is false when there
// are none. Damage that came since it was armed puts it off by at least
// verifyRearm: while a typist goes on it fires 4 times a second at most.
func (p *sampler) refire(now time.Time) (time.Duration, bool) {
	wait, ok := p.due(now)
	if ok && wait > 0 {
		wait = max(wait, verifyRearm)
	}
	return wait, ok
}

// verifyTimer wakes the capture loop when the suspects may be due. It is
// moved only when it fires (sampler.refire), never by a capture. Moved
// at every capture (20 keystrokes a second), each move to later left a
// stale entry at the head of the runtime's timer heap, and each such
// entry woke the process twice (the poller's wait is whole
// milliseconds, rounded down) and the runtime's monitor thread for
// nothing: 11% of deskd's CPU a frame while typing with noVNC.
type verifyTimer struct {
	t     *time.Timer
	armed bool
	arms  atomic.Int32 // times armed, for tests
}

func newVerifyTimer() *verifyTimer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &verifyTimer{t: t}
}

// arm makes the timer fire after d unless it is armed already.
func (v *verifyTimer) arm(d time.Duration) {
	if v.armed {
		return
	}
	v.t.Reset(d)
	v.armed = true
	v.arms.Add(1)
}

// fired notes that the timer's channel was read.
func (v *verifyTimer) fired() { v.armed = false }

func (v *verifyTimer) stop() {
	if v.armed {
		v.t.Stop()
		v.armed = false
	}
}

// verify returns, as rectangles of a w×h framebuffer, the suspect tiles
// to compare in full now: all of them once big damage has been quiet
// for verifyQuiet; else (verifyMax has passed) those not sampled at
// every phase this period. The others begin a new period: each of their
// rows was compared after any change made before it began, or will be
// within it.
func (p *sampler) verify(w, h int, now time.Time) []Rect {
	quiet := !now.Before(p.last.Add(verifyQuiet))
	cols := (w + tile - 1) / tile
	var out []Rect
	for i, b := range p.suspect {
		if !b {
			continue
		}
		if !quiet && p.phases[i] == allPhases {
			p.phases[i] = 0
			continue
		}
		tx, ty := i%cols*tile, i/cols*tile
		out = append(out, Rect{tx, ty, min(tile, w-tx), min(tile, h-ty)})
	}
	if !quiet {
		p.first = now
	}
	return out
}

// rowSums holds, per row of the framebuffer, the hash (rowHash) of its
// pixels over the span of the box that last sampled it, while they stay
// as they were: a sampled row of a capture that hashes the same is
// unchanged, and the framebuffer's row is not read at all. Those rows
// are cold (a capture samples other rows than the one before, and the
// same ones again sampleStep captures later): comparing them with the
// capture was 11% of deskd's CPU while typing with noVNC, three times
// hashing the capture's row alone on a cold cache. A row's hash is
// forgotten whenever its pixels in the framebuffer change (compareBox
// copies a tile in), and all of them when the framebuffer is replaced.
// Equal hashes of unequal rows could only make their tiles suspects,
// compared in full later (verify); a row that differs in one pixel
// always hashes differently.
type rowSums []rowSum

type rowSum struct {
	h    uint64
	x, w int32 // the span hashed
	ok   bool
}

// reset forgets every row, for a framebuffer h rows high.
func (r *rowSums) reset(h int) {
	if len(*r) != h {
		*r = make(rowSums, h)
	}
	clear(*r)
}

// forget notes that rows y0..y1-1 of the framebuffer changed.
func (r rowSums) forget(y0, y1 int) {
	for y := max(y0, 0); y < min(y1, len(r)); y++ {
		r[y].ok = false
	}
}

// sampleBox compares box (tile-aligned) of cur with old on the rows a
// capture at phase samples, t.Y+phase, t.Y+phase+sampleStep, ... of each
// tile t (phase mod its height for the screen's last row of tiles, when
// shorter), the X byte ignored, and sets differs[j] for
// each tile j of the box (row by row, box.W/tile a row) where they
// differ; it returns how many of those rows were unchanged across the
// whole box, of how many. An unchanged row is one compare at memory
// speed, or with sums (old's row hashes, nil: none) one hash of cur's
// row where old's is known; a tile found to differ is not compared
// again.
func sampleBox(old, cur *Frame, box Rect, phase int, differs []bool, sums rowSums) (same, rows int) {
	cols := (box.W + tile - 1) / tile
	clear(differs)
	for ty := box.Y; ty < box.Y+box.H; ty += tile {
		th := min(tile, box.Y+box.H-ty)
		band := differs[(ty-box.Y)/tile*cols:][:cols]
		for y := ty + phase%th; y < ty+th; y += sampleStep {
			rows++
			i, j := y*old.Stride+4*box.X, y*cur.Stride+4*box.X
			if sameRow(old.Pix[i:i+4*box.W], cur.Pix[j:j+4*box.W], sums, y, box) {
				same++
				continue
			}
			for k := range band {
				if band[k] {
					continue
				}
				x0, x1 := 4*k*tile, 4*min((k+1)*tile, box.W)
				band[k] = !rowsEqual(old.Pix[i+x0:i+x1], cur.Pix[j+x0:j+x1])
			}
		}
	}
	return same, rows
}

// sameRow reports whether row y of box is the same in old and cur (a
// and b), through its hash in sums when old's is known there, and
// notes old's hash when it was not and the rows are the same.
func sameRow(a, b []byte, sums rowSums, y int, box Rect) bool {
	if y >= len(sums) {
		return rowsEqual(a, b)
	}
	s := &sums[y]
	if s.ok && s.x == int32(box.X) && s.w == int32(box.W) {
		return rowHash(b) == s.h
	}
	if !rowsEqual(a, b) {
		return false
	}
	*s = rowSum{h: rowHash(b), x: int32(box.X), w: int32(box.W), ok: true}
	return true
}

// copyTile copies tile t from src to dst.
func copyTile(dst, src *Frame, t Rect) {
	for y := t.Y; y < t.Y+t.H; y++ {
		i, j := y*dst.Stride+4*t.X, y*src.Stride+4*t.X
		copy(dst.Pix[i:i+4*t.W], src.Pix[j:j+4*t.W])
	}
}
