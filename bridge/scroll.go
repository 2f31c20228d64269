package bridge

import "encoding/binary"

// Scrolling repaints a whole viewport, but almost all of it is the old
// picture moved up or down. The capture loop looks for such a move
// between the old framebuffer and the new capture; viewers that take
// CopyRect (RFC 6143 §7.7.2: u16 src-x, src-y) are told to move their own
// pixels, and only what the move does not explain is encoded.

// scroll says rows dst.Y .. dst.Y+dst.H-1 of the new picture are rows
// dst.Y+dy .. of the old one, over columns dst.X .. dst.X+dst.W-1.
type scroll struct {
	dst  Rect
	dy   int
	rest []Rect // changed tiles the move does not explain
}

func (sc scroll) src() Rect { return Rect{sc.dst.X, sc.dst.Y + sc.dy, sc.dst.W, sc.dst.H} }

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
	old, new []uint64
	index    map[uint64]int32
	votes    map[int]int
	// fails counts searches in a row that found nothing; skip is how
	// many more captures go without one. Typing or an animation damages
	// big boxes that never scroll: hashing their rows was a third of
	// deskd's CPU. A scroll that starts then is found a few frames late
	// (those go as pixels).
	fails, skip int
}

// maxScrollSkip bounds the backoff: at most this many captures in a row
// go without a search.
const maxScrollSkip = 4

// rowHash hashes a row's pixels, ignoring the undefined X byte.
func rowHash(row []byte) uint64 {
	h := uint64(14695981039346656037)
	i := 0
	for ; i+8 <= len(row); i += 8 {
		h = (h ^ binary.LittleEndian.Uint64(row[i:])&0x00ffffff00ffffff) * 1099511628211
	}
	for ; i+4 <= len(row); i += 4 {
		h = (h ^ uint64(binary.LittleEndian.Uint32(row[i:])&0x00ffffff)) * 1099511628211
	}
	return h
}

// rowsEqual compares two rows of equal length, ignoring the X byte,
// two pixels a step.
func rowsEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
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

// detectScroll looks for a vertical move of box from old to new.
func detectScroll(old, new *Frame, box Rect, sc *scrollScratch) (scroll, bool) {
	if box.W < scrollMinW || box.H < scrollMinH {
		return scroll{}, false
	}
	if sc.skip > 0 {
		sc.skip--
		return scroll{}, false
	}
	found, ok := searchScroll(old, new, box, sc)
	if ok {
		sc.fails = 0
	} else {
		sc.fails++
		sc.skip = min(sc.fails-1, maxScrollSkip) // 0, 1, 2, ... 4 captures skipped
	}
	return found, ok
}

// searchScroll hashes the box's rows in both pictures and looks for the
// move most rows agree on.
func searchScroll(old, new *Frame, box Rect, sc *scrollScratch) (scroll, bool) {
	row := func(f *Frame, y int) []byte {
		i := y*f.Stride + 4*box.X
		return f.Pix[i : i+4*box.W]
	}
	sc.old, sc.new = sc.old[:0], sc.new[:0]
	for y := box.Y; y < box.Y+box.H; y++ {
		sc.old = append(sc.old, rowHash(row(old, y)))
		sc.new = append(sc.new, rowHash(row(new, y)))
	}
	if sc.index == nil {
		sc.index, sc.votes = map[uint64]int32{}, map[int]int{}
	}
	clear(sc.index)
	clear(sc.votes)
	// Index old rows that differ from the row above (a blank stretch
	// would match anywhere), and vote with new rows.
	for i, h := range sc.old {
		if i > 0 && h == sc.old[i-1] {
			continue
		}
		if _, dup := sc.index[h]; dup {
			sc.index[h] = -1 // seen twice: ambiguous
			continue
		}
		sc.index[h] = int32(i)
	}
	for i := 0; i < len(sc.new); i += 3 {
		h := sc.new[i]
		if i > 0 && h == sc.new[i-1] {
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
	// The longest run of rows the move explains, each checked byte by byte.
	runStart, runLen, start := 0, 0, -1
	for i := 0; i <= len(sc.new); i++ {
		ok := i < len(sc.new) && i+dy >= 0 && i+dy < len(sc.old) && sc.new[i] == sc.old[i+dy] &&
			rowsEqual(row(new, box.Y+i), row(old, box.Y+i+dy))
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
	return scroll{dst: Rect{box.X, box.Y + runStart, box.W, runLen}, dy: dy}, true
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// explains reports whether the move accounts for all of tile t's change:
// t lies within the move's columns, and its rows outside the moved rows
// did not change (old is the picture before, new after).
func (sc scroll) explains(old, new *Frame, t Rect) bool {
	d := sc.dst
	if t.X < d.X || t.X+t.W > d.X+d.W || t.Intersect(d).Empty() {
		return false
	}
	for y := t.Y; y < t.Y+t.H; y++ {
		if y >= d.Y && y < d.Y+d.H {
			continue
		}
		i := y*old.Stride + 4*t.X
		if !rowsEqual(old.Pix[i:i+4*t.W], new.Pix[i:i+4*t.W]) {
			return false
		}
	}
	return true
}

// markScrolled records a scroll for a viewer that takes CopyRect and has
// no move pending: it gets the move, its own stale tiles in the source
// follow the move into the destination, and of the changed tiles only
// those the move does not explain (sc.rest) are dirty. Anyone else gets the
// changed tiles. Callers hold s.mu; the capture loop calls it.
func (c *client) markScrolled(changed []Rect, sc scroll) {
	c.mu.Lock()
	if !c.copyRect || c.copy != nil || c.size != nil {
		for _, r := range changed {
			c.dirty.mark(r)
		}
		c.mu.Unlock()
		c.poke()
		return
	}
	src, dst := sc.src(), sc.dst
	var stale []Rect
	c.dirty.each(src, func(t Rect) { stale = append(stale, t) })
	for _, t := range stale {
		d := t.Intersect(src)
		c.dirty.mark(Rect{d.X, d.Y - sc.dy, d.W, d.H})
	}
	for _, t := range sc.rest {
		c.dirty.mark(t)
	}
	// JPEG pixels move with the rest: the tiles they land on are lossy
	// now, and every moved tile has changed (for refinement's clock).
	var lossy []Rect
	c.lossy.each(src, func(t Rect) { lossy = append(lossy, t) })
	for _, t := range lossy {
		d := t.Intersect(src)
		c.lossy.mark(Rect{d.X, d.Y - sc.dy, d.W, d.H})
	}
	c.dirty.touch(dst)
	c.copy = &scroll{dst: dst, dy: sc.dy}
	c.mu.Unlock()
	c.poke()
}

// appendCopyRect appends the move as a CopyRect rectangle.
func appendCopyRect(dst []byte, sc scroll) []byte {
	be := binary.BigEndian
	for _, v := range []int{sc.dst.X, sc.dst.Y, sc.dst.W, sc.dst.H} {
		dst = be.AppendUint16(dst, uint16(v))
	}
	dst = be.AppendUint32(dst, EncCopyRect)
	dst = be.AppendUint16(dst, uint16(sc.dst.X))
	return be.AppendUint16(dst, uint16(sc.dst.Y+sc.dy))
}
