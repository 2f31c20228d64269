package bridge

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
)

// Scrolling repaints a whole viewport, but almost all of it is the old
// picture moved up or down. The capture loop looks for such a move
// between the old framebuffer and the new capture; viewers that take
// CopyRect (RFC 6143 §7.7.2: u16 src-x, src-y) are told to move their own
// pixels, and only what the move does not explain is encoded.

// scroll says the pixels dst of the new picture are those of the old
// one dx columns and dy rows away: a scroll (dx 0, dst the box's
// columns) or a move sideways as well (a window dragged: move.go).
type scroll struct {
	dst    Rect
	dx, dy int
	rest   []Rect // changed tiles the move does not explain
	// bad are the tiles (indices in the frame) of dst where the move
	// does not hold: a fixed element over the page (a chat button, a
	// clock, a sticky bar) stays while the page moves under it. They
	// go as pixels after the move, changed or not.
	bad []int
}

func (sc scroll) src() Rect { return Rect{sc.dst.X + sc.dx, sc.dst.Y + sc.dy, sc.dst.W, sc.dst.H} }

// Scroll detection bounds: a box smaller than this is cheaper to encode
// than to analyse, and a move must cover enough rows to be worth a
// CopyRect.
const (
	scrollMinW, scrollMinH = 128, 96
	scrollMinRun           = 48
)

// scrollScratch holds row hashes between calls, and the backoff of a
// search that keeps failing.
type scrollScratch struct {
	old, new         []uint64 // row hashes of the box
	oldLeft, newLeft []uint64 // of the box without its right column of tiles
	index            map[uint64]int32
	votes            map[int]int
	masks            []uint64 // per row of a run: tile columns where it differs
	// The new rows' hashes of the last search are the old rows' of the
	// next one over the same box, if the framebuffer then holds exactly
	// those rows and has not changed since: the capture loop sets
	// hashedGen to the frame generation (s.gen) after such a capture
	// and fbGen to the current one before searching (wheel steps and
	// photos scrolled: hashing was 9% of deskd's CPU, half of it the
	// old picture again). A wrong reuse could only cost a find: every
	// move found is checked byte by byte.
	hashed           Rect
	hashedGen, fbGen uint64
	fresh            bool // hashed by this capture's search
	// fails counts searches in a row that found nothing; skip is how
	// many more captures go without one. Typing or an animation damages
	// big boxes that never scroll: hashing their rows was a third of
	// deskd's CPU. A scroll that starts then is found a few frames late
	// (those go as pixels).
	fails, skip int
	moves       moveScratch // the search for moves sideways (move.go)
}

// maxScrollSkip bounds the backoff: at most this many captures in a row
// go without a search.
const maxScrollSkip = 4

// rowHashGo hashes a row's pixels, ignoring the undefined X byte. Four
// independent lanes of 8 bytes: one chain of multiplies waited on its
// own latency (hashing was 15% of deskd's CPU with a text page scrolled
// in wheel steps); equal rows still hash equal, and a match is always
// confirmed by comparing the rows. rowHash (rowhash_amd64.go) uses it
// where AVX2 is missing.
func rowHashGo(row []byte) uint64 {
	const prime, mask = 1099511628211, 0x00ffffff00ffffff
	h0, h1, h2, h3 := uint64(14695981039346656037), uint64(1), uint64(2), uint64(3)
	i := 0
	for ; i+32 <= len(row); i += 32 {
		b := row[i : i+32]
		h0 = (h0 ^ binary.LittleEndian.Uint64(b)&mask) * prime
		h1 = (h1 ^ binary.LittleEndian.Uint64(b[8:])&mask) * prime
		h2 = (h2 ^ binary.LittleEndian.Uint64(b[16:])&mask) * prime
		h3 = (h3 ^ binary.LittleEndian.Uint64(b[24:])&mask) * prime
	}
	h := ((h0*prime^h1)*prime^h2)*prime ^ h3
	for ; i+4 <= len(row); i += 4 {
		h = (h ^ uint64(binary.LittleEndian.Uint32(row[i:])&0x00ffffff)) * prime
	}
	return h
}

// rowsEqual compares two rows of equal length, ignoring the X byte,
// two pixels a step.
func rowsEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	// Most rows compared are unchanged, X bytes included (both copies
	// come from the same server's memory): the runtime's vectorised
	// compare settles those at memory speed. Only rows that differ
	// somewhere are looked at pixel by pixel.
	if bytes.Equal(a, b) {
		return true
	}
	i := 0
	for ; i+8 <= len(a); i += 8 {
		if (binary.LittleEndian.Uint64(a[i:])^binary.LittleEndian.Uint64(b[i:]))&0x00ffffff00ffffff != 0 {
			return false
		}
	}
	for ; i+4 <= len(a); i += 4 {
		if (binary.LittleEndian.Uint32(a[i:])^binary.LittleEndian.Uint32(b[i:]))&0x00ffffff != 0 {
			return false
		}
	}
	return true
}

// detectScroll looks for a move of box from old to new: vertical (the
// rows' hashes), else sideways too (detectMove). With
// inPlace it first checks whether most of the box is where it was (the
// capture's sampled compare, when it ran, has told already).
func detectScroll(old, new *Frame, box Rect, sc *scrollScratch, inPlace bool) (scroll, bool) {
	if box.W < scrollMinW || box.H < scrollMinH {
		return scroll{}, false
	}
	if sc.skip > 0 {
		sc.skip--
		return scroll{}, false
	}
	if inPlace && mostlyInPlace(old, new, box) {
		return scroll{}, false // not counted as a failure: nothing moved
	}
	// A drag under way moves again by about as much: that first.
	triedMove := sc.moves.last
	if triedMove {
		if found, ok := detectMove(old, new, box, &sc.moves); ok {
			sc.fails = 0
			return found, true
		}
	}
	// A scroll bar's thumb moves with the page: the rows it is on differ
	// at the right edge. A run of rows tolerates a few tile columns that
	// differ (search), which covers it; but its rows' hashes differ, so
	// a short box could lack the votes. So each row is hashed in two
	// parts, all but the right column of tiles and that column: the
	// whole rows are searched first, then, if that explains less than
	// three quarters of the box, the rows without the right column
	// (whose tiles then go as pixels).
	right := (box.X+box.W-1)/tile*tile - box.X
	if right < scrollMinW {
		right = box.W
	}
	sc.hashRows(old, new, box, right)
	found, ok := sc.search(old, new, box, sc.old, sc.new)
	if right < box.W && (!ok || 4*found.dst.H < 3*box.H) {
		narrow := Rect{box.X, box.Y, right, box.H}
		if f, k := sc.search(old, new, narrow, sc.oldLeft, sc.newLeft); k && (!ok || f.dst.W*f.dst.H > found.dst.W*found.dst.H) {
			found, ok = f, true
		}
	}
	if !ok && !triedMove {
		found, ok = detectMove(old, new, box, &sc.moves)
	}
	if ok {
		sc.fails = 0
	} else {
		sc.fails++
		sc.skip = min(sc.fails-1, maxScrollSkip) // 0, 1, 2, ... 4 captures skipped
	}
	return found, ok
}

// inPlaceSamples rows spread over a box are compared where they are
// before its rows are hashed.
const inPlaceSamples = 32

// mostlyInPlace reports whether at least three in four of a sample of
// box's rows are unchanged where they are: then nothing of it moved
// (typing: Chromium repaints its whole window at each keystroke, and
// hashing its rows for a search was 16% of deskd's CPU), or what moved
// is a mostly blank page, cheap to send as pixels.
func mostlyInPlace(old, new *Frame, box Rect) bool {
	same, n := 0, min(inPlaceSamples, box.H)
	for k := range n {
		y := box.Y + k*box.H/n
		i, j := y*old.Stride+4*box.X, y*new.Stride+4*box.X
		if rowsEqual(old.Pix[i:i+4*box.W], new.Pix[j:j+4*box.W]) {
			same++
		}
	}
	return 4*same >= 3*n
}

// hashRows hashes the rows of box in both pictures: sc.oldLeft and
// sc.newLeft the first left pixels of each row, sc.old and sc.new the
// whole row (the left part's hash and the rest's, combined).
func (sc *scrollScratch) hashRows(old, new *Frame, box Rect, left int) {
	row := func(f *Frame, y, x0, x1 int) []byte {
		i := y*f.Stride + 4*x0
		return f.Pix[i : i+4*(x1-x0)]
	}
	reuse := sc.hashedGen != 0 && sc.hashedGen == sc.fbGen && sc.hashed == box && len(sc.new) == box.H
	if reuse { // the old picture's rows are the last search's new ones
		sc.old, sc.new, sc.oldLeft, sc.newLeft = sc.new, sc.old[:0], sc.newLeft, sc.oldLeft[:0]
	} else {
		sc.old, sc.new, sc.oldLeft, sc.newLeft = sc.old[:0], sc.new[:0], sc.oldLeft[:0], sc.newLeft[:0]
	}
	sc.hashed, sc.hashedGen, sc.fresh = box, 0, true // valid once the capture has put these rows in the framebuffer
	split := box.X + left
	const prime = 1099511628211
	for y := box.Y; y < box.Y+box.H; y++ {
		ln := rowHash(row(new, y, box.X, split))
		sc.newLeft = append(sc.newLeft, ln)
		if left < box.W {
			ln = ln*prime ^ rowHash(row(new, y, split, box.X+box.W))
		}
		sc.new = append(sc.new, ln)
		if reuse {
			continue
		}
		lo := rowHash(row(old, y, box.X, split))
		sc.oldLeft = append(sc.oldLeft, lo)
		if left < box.W {
			lo = lo*prime ^ rowHash(row(old, y, split, box.X+box.W))
		}
		sc.old = append(sc.old, lo)
	}
}

// search looks for the move most rows of box agree on, given their
// hashes in the old and the new picture.
func (sc *scrollScratch) search(old, new *Frame, box Rect, oldH, newH []uint64) (scroll, bool) {
	row := func(f *Frame, y int) []byte {
		i := y*f.Stride + 4*box.X
		return f.Pix[i : i+4*box.W]
	}
	if sc.index == nil {
		sc.index, sc.votes = map[uint64]int32{}, map[int]int{}
	}
	clear(sc.index)
	clear(sc.votes)
	// Index old rows that differ from the row above (a blank stretch
	// would match anywhere), and vote with new rows.
	for i, h := range oldH {
		if i > 0 && h == oldH[i-1] {
			continue
		}
		if _, dup := sc.index[h]; dup {
			sc.index[h] = -1 // seen twice: ambiguous
			continue
		}
		sc.index[h] = int32(i)
	}
	for i := 0; i < len(newH); i += 3 {
		h := newH[i]
		if i > 0 && h == newH[i-1] {
			continue
		}
		if j, ok := sc.index[h]; ok && j >= 0 && int(j) != i {
			sc.votes[int(j)-i]++
		}
	}
	dy, best := 0, 2 // at least 3 votes
	for d, v := range sc.votes {
		if v > best || (v == best && dy != 0 && abs(d) < abs(dy)) {
			dy, best = d, v
		}
	}
	if dy == 0 {
		return scroll{}, false
	}
	// The longest run of rows the move explains, each checked byte by
	// byte, but for a few tile columns (fixed elements over the page,
	// whose tiles then go as pixels): one 32-px button at the bottom
	// of a page ended the run there, and the full width of the rows
	// it had been on went as pixels at each step.
	sc.masks = slices.Grow(sc.masks[:0], len(newH))[:len(newH)]
	runStart, runLen, start := 0, 0, -1
	for i := 0; i <= len(newH); i++ {
		ok := false
		if i < len(newH) && i+dy >= 0 && i+dy < len(oldH) {
			a, b := row(new, box.Y+i), row(old, box.Y+i+dy)
			if newH[i] == oldH[i+dy] && rowsEqual(a, b) {
				sc.masks[i], ok = 0, true
			} else {
				sc.masks[i], ok = columnsDiffer(a, b)
			}
		}
		switch {
		case ok && start < 0:
			start = i
		case !ok && start >= 0:
			if i-start > runLen {
				runStart, runLen = start, i-start
			}
			start = -1
		}
	}
	if runLen < scrollMinRun {
		return scroll{}, false
	}
	found := scroll{dst: Rect{box.X, box.Y + runStart, box.W, runLen}, dy: dy}
	// The bad tiles, a row of tiles at a time: the columns any of its
	// rows differs in, in order (so sorted, each once).
	cols := (new.W + tile - 1) / tile
	var columns uint64
	for i := runStart; i < runStart+runLen; i++ {
		columns |= sc.masks[i]
		if y := box.Y + i; y%tile == tile-1 || i == runStart+runLen-1 {
			for m := columns; m != 0; m &= m - 1 {
				found.bad = append(found.bad, y/tile*cols+box.X/tile+bits.TrailingZeros64(m))
			}
			columns = 0
		}
	}
	return found, true
}

// columnsDiffer compares two rows of a box whose left edge is on a tile
// boundary, a tile column at a time: mask has a bit for each column
// that differs, and ok is whether few enough do for the row to count
// as moved (a quarter of them, at least one; boxes over 64 columns
// wide are compared whole).
func columnsDiffer(a, b []byte) (mask uint64, ok bool) {
	cols := (len(a)/4 + tile - 1) / tile
	if cols > 64 {
		return 0, false
	}
	allowed, n := max(1, cols/4), 0
	for k := range cols {
		lo, hi := 4*tile*k, min(4*tile*(k+1), len(a))
		if rowsEqual(a[lo:hi], b[lo:hi]) {
			continue
		}
		if n++; n > allowed {
			return 0, false
		}
		mask |= 1 << k
	}
	return mask, true
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// explains reports whether the move accounts for all of tile t's change:
// part of t is in the move's destination, where it holds (t is not
// one of its bad tiles), and the rest of t did not change (old is the
// picture before, new after).
func (sc scroll) explains(old, new *Frame, t Rect) bool {
	d := sc.dst
	in := t.Intersect(d)
	if in.Empty() || sc.isBad(t, old.W) {
		return false
	}
	same := func(y, x0, x1 int) bool {
		if x0 >= x1 {
			return true
		}
		i, j := y*old.Stride+4*x0, y*new.Stride+4*x0
		return rowsEqual(old.Pix[i:i+4*(x1-x0)], new.Pix[j:j+4*(x1-x0)])
	}
	for y := t.Y; y < t.Y+t.H; y++ {
		if y < in.Y || y >= in.Y+in.H {
			if !same(y, t.X, t.X+t.W) {
				return false
			}
			continue
		}
		if !same(y, t.X, in.X) || !same(y, in.X+in.W, t.X+t.W) {
			return false
		}
	}
	return true
}

// isBad reports whether tile t of a w-wide frame is one of the move's
// bad tiles.
func (sc scroll) isBad(t Rect, w int) bool {
	if len(sc.bad) == 0 {
		return false
	}
	_, ok := slices.BinarySearch(sc.bad, t.Y/tile*((w+tile-1)/tile)+t.X/tile)
	return ok
}

// markScrolled records a scroll for a viewer that takes CopyRect and has
// no move pending: it gets the move, its own stale tiles in the source
// follow the move into the destination, and of the changed tiles only
// those the move does not explain (sc.rest) are dirty. Anyone else gets the
// changed tiles. Callers hold s.mu; the capture loop calls it.
func (c *client) markScrolled(changed []Rect, sc scroll) {
	c.mu.Lock()
	defer c.poke()
	defer c.mu.Unlock()
	c.markedGen = c.s.gen // callers hold s.mu
	if c.copyRect && c.copy != nil && c.size == nil {
		// A move is still owed: a slow viewer that missed a step gets
		// both as one CopyRect, and pixels only where that does not
		// explain the picture (with 10 viewers of a gallery scrolled
		// every 100 ms, the second step went as the whole viewport).
		if both, ok := composeScroll(*c.copy, sc); ok {
			first := *c.copy
			c.moved(sc) // the tiles, as if it were the only move
			c.copy = &both
			for _, r := range cutOut([]Rect{first.dst, sc.dst}, both.dst) { // there it needs pixels
				c.dirty.mark(r)
			}
			return
		}
	}
	if !c.copyRect || c.copy != nil || c.size != nil {
		for _, r := range changed {
			c.dirty.mark(r)
		}
		return
	}
	c.moved(sc)
	c.copy = &scroll{dst: sc.dst, dx: sc.dx, dy: sc.dy}
}

// moved updates the tile sets for the move sc: dirty tiles in its source
// stay dirty where their content lands, what the move does not explain
// is dirty, and lossy tiles move along. Callers hold c.mu.
func (c *client) moved(sc scroll) {
	c.dirty.follow(sc)
	for _, t := range sc.rest {
		c.dirty.mark(t)
	}
	// JPEG pixels move with the rest: the tiles they land on are lossy
	// now, and every moved tile has changed (for refinement's clock).
	c.lossy.follow(sc)
	c.dirty.touch(sc.dst)
}

// follow marks, for every tile marked in the move's source, where its
// content lands.
func (t *tiles) follow(sc scroll) {
	var in []Rect
	t.each(sc.src(), func(r Rect) { in = append(in, r) })
	for _, r := range in {
		t.markMoved(r, sc)
	}
}

// markMoved marks where the part of r inside the move's source lands.
func (t *tiles) markMoved(r Rect, sc scroll) {
	if d := r.Intersect(sc.src()); !d.Empty() {
		t.mark(Rect{d.X - sc.dx, d.Y - sc.dy, d.W, d.H})
	}
}

// composeScroll makes one move of two in a row: the pixels of the
// second's destination whose source the first moved come from both
// moves away in the picture before both.
func composeScroll(first, second scroll) (scroll, bool) {
	a := first.dst
	d := second.dst.Intersect(Rect{a.X - second.dx, a.Y - second.dy, a.W, a.H})
	dx, dy := first.dx+second.dx, first.dy+second.dy
	if d.H < scrollMinRun || d.W < tile || (dx == 0 && dy == 0) {
		return scroll{}, false
	}
	return scroll{dst: d, dx: dx, dy: dy}, true
}

// appendCopyRect appends the move as a CopyRect rectangle.
func appendCopyRect(dst []byte, sc scroll) []byte {
	be := binary.BigEndian
	for _, v := range []int{sc.dst.X, sc.dst.Y, sc.dst.W, sc.dst.H} {
		dst = be.AppendUint16(dst, uint16(v))
	}
	dst = be.AppendUint32(dst, EncCopyRect)
	dst = be.AppendUint16(dst, uint16(sc.dst.X+sc.dx))
	return be.AppendUint16(dst, uint16(sc.dst.Y+sc.dy))
}
