package bridge

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// What a viewer has on its screen. Each viewer's seen picture holds the
// pixels it was last sent, moved as it moved them (CopyRect), so it is
// the viewer's picture: a dirty tile is sent as the box in which the
// screen differs from it, not whole (a typed glyph, a blinking caret),
// and a tile that changed and changed back is not sent at all. This is
// per viewer and decided when sending, so it cannot disagree with the
// marks the capture loop makes.
//
// A bit a pixel says what the viewer does not have at all: pixels it
// has not been sent (a new connection, a resize, a request in full);
// those always count as changed. Another says what it has only
// approximately (JPEG of the pixels held here): those count as changed
// for a lossless update (a refinement), not for a lossy one when they
// are still what the screen shows: the viewer has as good a picture of
// them as another JPEG would give (a photo scrolled on the page used to
// go as JPEG again wherever a fixed element or the scroll bar made its
// tile go). (The X byte cannot hold either: the shared framebuffer keeps
// X's pad byte as captured, so unchanged rows compare at memory speed,
// and X does not leave it 0.)
type seen struct {
	*Frame
	unknown []uint64 // bit x%64 of word y*words+x/64: pixel (x, y) unknown
	approx  []uint64 // the same for pixels the viewer has as JPEG
	words   int      // words a row
	either  []uint64 // scratch: a row of unknown|approx
}

// newSeen is a w×h picture of which nothing is known yet.
func newSeen(w, h int) *seen {
	p := &seen{Frame: NewFrame(w, h), words: (w + 63) / 64}
	p.unknown, p.approx, p.either = make([]uint64, p.words*h), make([]uint64, p.words*h), make([]uint64, p.words)
	p.forget(Rect{0, 0, w, h})
	return p
}

// bits returns row y of the unknown bitmap.
func (p *seen) bits(y int) []uint64 { return p.unknown[y*p.words : (y+1)*p.words] }

// approxBits returns row y of the approximate bitmap.
func (p *seen) approxBits(y int) []uint64 { return p.approx[y*p.words : (y+1)*p.words] }

// inexact returns row y's pixels the viewer does not have exactly
// (unknown or approximate), in scratch valid until the next call.
func (p *seen) inexact(y int) []uint64 {
	for i, u := range p.bits(y) {
		p.either[i] = u | p.approx[y*p.words+i]
	}
	return p.either
}

// changedBox returns the smallest box of r in which the screen fb
// differs from the viewer's picture, or false when it does not; for a
// lossy update, pixels the viewer has as JPEG of what fb holds do not
// differ. It finds
// the first and the last row that differ, then looks in the rows between
// only outside the columns found so far: a rectangle that changed
// throughout (a photo scrolled in, JPEG sent before) costs two rows, not
// every pixel.
func (p *seen) changedBox(fb *Frame, r Rect, lossy bool) (Rect, bool) {
	rowBits := p.inexact
	if lossy {
		rowBits = p.bits
	}
	first := func(y, x0, x1 int) int { // the first pixel of row y in [x0, x1) that differs, or -1
		i := y*p.Stride + 4*x0
		d := firstDiff(p.Pix[i:i+4*(x1-x0)], fb.Pix[i:i+4*(x1-x0)])
		if d >= 0 {
			x1 = x0 + d
		}
		if u := firstBit(rowBits(y), x0, x1); u >= 0 {
			return u
		}
		if d >= 0 {
			return x0 + d
		}
		return -1
	}
	last := func(y, x0, x1 int) int { // the last, or -1
		i := y*p.Stride + 4*x0
		d := lastDiff(p.Pix[i:i+4*(x1-x0)], fb.Pix[i:i+4*(x1-x0)])
		if d >= 0 {
			x0 += d + 1
		}
		if u := lastBit(rowBits(y), x0, x1); u >= 0 {
			return u
		}
		if d >= 0 {
			return x0 - 1
		}
		return -1
	}
	y0, y1, x0, x1 := -1, -1, 0, 0 // x1, y1 inclusive
	for y := r.Y; y < r.Y+r.H; y++ {
		if f := first(y, r.X, r.X+r.W); f >= 0 {
			y0, y1, x0, x1 = y, y, f, last(y, r.X, r.X+r.W)
			break
		}
	}
	if y0 < 0 {
		return Rect{}, false
	}
	for y := r.Y + r.H - 1; y > y0; y-- {
		if f := first(y, r.X, r.X+r.W); f >= 0 {
			y1, x0, x1 = y, min(x0, f), max(x1, last(y, r.X, r.X+r.W))
			break
		}
	}
	for y := y0 + 1; y < y1 && (x0 > r.X || x1 < r.X+r.W-1); y++ {
		if x0 > r.X {
			if f := first(y, r.X, x0); f >= 0 {
				x0 = f
			}
		}
		if x1 < r.X+r.W-1 {
			if l := last(y, x1+1, r.X+r.W); l >= 0 {
				x1 = l
			}
		}
	}
	return Rect{x0, y0, x1 - x0 + 1, y1 - y0 + 1}, true
}

// copyKnown copies r of fb into the picture: the viewer has it exactly.
func (p *seen) copyKnown(fb *Frame, r Rect) {
	for y := r.Y; y < r.Y+r.H; y++ {
		i := y*p.Stride + 4*r.X
		copy(p.Pix[i:i+4*r.W], fb.Pix[i:i+4*r.W])
		setBits(p.bits(y), r.X, r.X+r.W, false)
		setBits(p.approxBits(y), r.X, r.X+r.W, false)
	}
}

// forget marks r unknown: whatever the viewer has there is to be sent
// again.
func (p *seen) forget(r Rect) {
	for y := r.Y; y < r.Y+r.H; y++ {
		setBits(p.bits(y), r.X, r.X+r.W, true)
	}
}

// approximate marks r as sent as JPEG of the pixels held here.
func (p *seen) approximate(r Rect) {
	for y := r.Y; y < r.Y+r.H; y++ {
		setBits(p.approxBits(y), r.X, r.X+r.W, true)
	}
}

// anyApprox reports whether the viewer has any pixel of r as JPEG.
func (p *seen) anyApprox(r Rect) bool {
	for y := r.Y; y < r.Y+r.H; y++ {
		if firstBit(p.approxBits(y), r.X, r.X+r.W) >= 0 {
			return true
		}
	}
	return false
}

// move does to the picture what a CopyRect of sc does to the viewer's:
// pixels dst come from dx columns and dy rows away, pixels and what is
// known of them.
func (p *seen) move(sc scroll) {
	d := sc.dst
	row := func(y, x int) []byte { i := y*p.Stride + 4*x; return p.Pix[i : i+4*d.W] }
	one := func(y int) {
		copy(row(y, d.X), row(y+sc.dy, d.X+sc.dx)) // copy may overlap (dy 0)
		shiftBits(p.bits(y), p.bits(y+sc.dy), d.X, d.X+d.W, sc.dx)
		shiftBits(p.approxBits(y), p.approxBits(y+sc.dy), d.X, d.X+d.W, sc.dx)
	}
	if sc.dy >= 0 { // from below: top down, so no source is overwritten first
		for y := d.Y; y < d.Y+d.H; y++ {
			one(y)
		}
		return
	}
	for y := d.Y + d.H - 1; y >= d.Y; y-- {
		one(y)
	}
}

// shiftBits copies bits [x0+dx, x1+dx) of src to [x0, x1) of dst, which
// may be the same row: words are written in the order that reads every
// source bit before it is overwritten.
func shiftBits(dst, src []uint64, x0, x1, dx int) {
	if dx == 0 {
		copyBits(dst, src, x0, x1)
		return
	}
	// at returns src's 64 bits from bit pos on (pos may be below 0: the
	// bits under 0 are never used, the mask leaves them out).
	at := func(pos int) uint64 {
		if pos < 0 {
			return src[0] << -pos
		}
		w, s := pos/64, uint(pos%64)
		v := src[w] >> s
		if s != 0 && w+1 < len(src) {
			v |= src[w+1] << (64 - s)
		}
		return v
	}
	first, last := x0/64, (x1-1)/64
	if x0 >= x1 {
		return
	}
	for k := range last - first + 1 {
		w := first + k
		if dx < 0 { // the source is to the left: right to left
			w = last - k
		}
		m := span(w, x0, x1)
		dst[w] = dst[w]&^m | at(64*w+dx)&m
	}
}

// span returns the mask of bits [x0, x1) within word w (x0 < x1).
func span(w, x0, x1 int) uint64 {
	lo, hi := max(x0-64*w, 0), min(x1-64*w, 64)
	if hi <= lo {
		return 0
	}
	m := ^uint64(0) << lo
	if hi < 64 {
		m &= 1<<hi - 1
	}
	return m
}

// setBits sets (or clears) bits [x0, x1) of row.
func setBits(row []uint64, x0, x1 int, on bool) {
	for w := x0 / 64; w <= (x1-1)/64 && x0 < x1; w++ {
		if on {
			row[w] |= span(w, x0, x1)
		} else {
			row[w] &^= span(w, x0, x1)
		}
	}
}

// copyBits copies bits [x0, x1) of src to dst.
func copyBits(dst, src []uint64, x0, x1 int) {
	for w := x0 / 64; w <= (x1-1)/64 && x0 < x1; w++ {
		m := span(w, x0, x1)
		dst[w] = dst[w]&^m | src[w]&m
	}
}

// firstBit returns the first set bit of row in [x0, x1), or -1.
func firstBit(row []uint64, x0, x1 int) int {
	for w := x0 / 64; w <= (x1-1)/64 && x0 < x1; w++ {
		if v := row[w] & span(w, x0, x1); v != 0 {
			return 64*w + bits.TrailingZeros64(v)
		}
	}
	return -1
}

// lastBit returns the last set bit of row in [x0, x1), or -1.
func lastBit(row []uint64, x0, x1 int) int {
	for w := (x1 - 1) / 64; w >= x0/64 && x0 < x1; w-- {
		if v := row[w] & span(w, x0, x1); v != 0 {
			return 64*w + 63 - bits.LeadingZeros64(v)
		}
	}
	return -1
}

// diff2 is the colour bits that differ between two pixels of a and
// two of b (the X byte is left out: X does not define it).
func diff2(a, b []byte) uint64 {
	return (binary.LittleEndian.Uint64(a) ^ binary.LittleEndian.Uint64(b)) & 0x00ffffff00ffffff
}

func diff1(a, b []byte) bool {
	return (binary.LittleEndian.Uint32(a)^binary.LittleEndian.Uint32(b))&0x00ffffff != 0
}

// firstDiff returns the first pixel of row a that differs from row b,
// or -1.
func firstDiff(a, b []byte) int {
	// Most rows of a dirty tile are as the viewer has them, X bytes
	// included (its picture is copied from the framebuffer): the
	// runtime's vectorised compare settles those (a typed glyph is a few
	// rows of its tile; comparing all of them two pixels a step was 5%
	// of deskd's CPU while typing).
	if bytes.Equal(a, b) {
		return -1
	}
	p := 0
	for ; p+8 <= len(a); p += 8 {
		if d := diff2(a[p:], b[p:]); d != 0 {
			if d&0xffffffff == 0 {
				return p/4 + 1
			}
			return p / 4
		}
	}
	if p < len(a) && diff1(a[p:], b[p:]) {
		return p / 4
	}
	return -1
}

// lastDiff returns the last pixel of a that differs from b, or -1.
func lastDiff(a, b []byte) int {
	p := len(a) &^ 7
	if p < len(a) && diff1(a[p:], b[p:]) { // an odd width: the last pixel
		return p / 4
	}
	for p -= 8; p >= 0; p -= 8 {
		if d := diff2(a[p:], b[p:]); d != 0 {
			if d>>32 != 0 {
				return p/4 + 1
			}
			return p / 4
		}
	}
	return -1
}
