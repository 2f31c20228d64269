package bridge

import "encoding/binary"

// What a viewer has on its screen. Each viewer's snap frame holds the
// pixels it was last sent, moved as it moved them (CopyRect), so it is
// the viewer's picture: a dirty tile is sent as the box in which the
// screen differs from it, not whole (a typed glyph, a blinking caret),
// and a tile that changed and changed back is not sent at all. This is
// per viewer and decided when sending, so it cannot disagree with the
// marks the capture loop makes.
//
// The X byte of a snap pixel says whether it is known: 0 when the viewer
// has exactly these pixels, unknownX when it has not been sent them (a
// new connection, a resize) or has them only approximately (JPEG): such
// pixels always count as changed.
const unknownX = 0xff

// newSnap is a w×h picture of which nothing is known yet.
func newSnap(w, h int) *Frame {
	f := NewFrame(w, h)
	for i := 3; i < len(f.Pix); i += 4 {
		f.Pix[i] = unknownX
	}
	return f
}

// changedBox returns the smallest box of r in which the screen fb
// differs from the viewer's picture snap, or false when it does not. It
// finds the first and the last row that differ, then looks in the rows
// between only outside the columns found so far: a rectangle that
// changed throughout (a photo scrolled in, JPEG sent before) costs two
// rows, not every pixel.
func changedBox(snap, fb *Frame, r Rect) (Rect, bool) {
	rows := func(y, x0, x1 int) ([]byte, []byte) {
		i, j := y*snap.Stride+4*x0, y*snap.Stride+4*x1
		return snap.Pix[i:j], fb.Pix[i:j]
	}
	y0, y1, x0, x1 := -1, -1, 0, 0 // x1, y1 inclusive
	for y := r.Y; y < r.Y+r.H; y++ {
		a, b := rows(y, r.X, r.X+r.W)
		if f := firstDiff(a, b); f >= 0 {
			y0, y1, x0, x1 = y, y, r.X+f, r.X+lastDiff(a, b)
			break
		}
	}
	if y0 < 0 {
		return Rect{}, false
	}
	for y := r.Y + r.H - 1; y > y0; y-- {
		a, b := rows(y, r.X, r.X+r.W)
		if f := firstDiff(a, b); f >= 0 {
			y1, x0, x1 = y, min(x0, r.X+f), max(x1, r.X+lastDiff(a, b))
			break
		}
	}
	for y := y0 + 1; y < y1 && (x0 > r.X || x1 < r.X+r.W-1); y++ {
		if x0 > r.X {
			if f := firstDiff(rows(y, r.X, x0)); f >= 0 {
				x0 = r.X + f
			}
		}
		if x1 < r.X+r.W-1 {
			if l := lastDiff(rows(y, x1+1, r.X+r.W)); l >= 0 {
				x1 += 1 + l
			}
		}
	}
	return Rect{x0, y0, x1 - x0 + 1, y1 - y0 + 1}, true
}

// Two pixels at a time: the colour bytes that differ, and the X byte of
// the snap pixel (unknown when set).
const rgbMask2, xMask2 = 0x00ffffff00ffffff, 0xff000000ff000000

func diff2(a, b []byte) uint64 {
	va, vb := binary.LittleEndian.Uint64(a), binary.LittleEndian.Uint64(b)
	return (va^vb)&rgbMask2 | va&xMask2
}

func diff1(a, b []byte) bool {
	va, vb := binary.LittleEndian.Uint32(a), binary.LittleEndian.Uint32(b)
	return (va^vb)&0x00ffffff != 0 || va&0xff000000 != 0
}

// firstDiff returns the first pixel of the snap row a that differs from
// the screen's row b, or -1.
func firstDiff(a, b []byte) int {
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

// copyKnown copies r of fb into snap: its pixels are known now (the
// screen's X bytes are 0, see copyRGB).
func copyKnown(snap, fb *Frame, r Rect) {
	for y := r.Y; y < r.Y+r.H; y++ {
		i := y*snap.Stride + 4*r.X
		copy(snap.Pix[i:i+4*r.W], fb.Pix[i:i+4*r.W])
	}
}

// forget marks r of snap unknown: the viewer has it only approximately.
func forget(snap *Frame, r Rect) {
	for y := r.Y; y < r.Y+r.H; y++ {
		row := snap.Pix[y*snap.Stride+4*r.X : y*snap.Stride+4*(r.X+r.W)]
		p := 0
		for ; p+32 <= len(row); p += 32 {
			b := (*[32]byte)(row[p : p+32])
			b[3], b[7], b[11], b[15], b[19], b[23], b[27], b[31] = unknownX, unknownX, unknownX, unknownX, unknownX, unknownX, unknownX, unknownX
		}
		for ; p < len(row); p += 4 {
			row[p+3] = unknownX
		}
	}
}

// copyRGB copies the whole pixels of src to dst with their X bytes 0.
// The shared framebuffer is kept so (the X server leaves the byte
// undefined): a viewer's picture is then known where it is a plain copy.
func copyRGB(dst, src []byte) {
	le := binary.LittleEndian
	p := 0
	for ; p+32 <= len(src) && p+32 <= len(dst); p += 32 {
		d, s := (*[32]byte)(dst[p:p+32]), (*[32]byte)(src[p:p+32])
		le.PutUint64(d[0:], le.Uint64(s[0:])&rgbMask2)
		le.PutUint64(d[8:], le.Uint64(s[8:])&rgbMask2)
		le.PutUint64(d[16:], le.Uint64(s[16:])&rgbMask2)
		le.PutUint64(d[24:], le.Uint64(s[24:])&rgbMask2)
	}
	for ; p+4 <= len(src) && p+4 <= len(dst); p += 4 {
		le.PutUint32(dst[p:], le.Uint32(src[p:])&0x00ffffff)
	}
}

// moveRows does to snap what a CopyRect of sc does to the viewer's
// picture: rows dst come from dy rows away.
func moveRows(snap *Frame, sc scroll) {
	d := sc.dst
	row := func(y int) []byte { i := y*snap.Stride + 4*d.X; return snap.Pix[i : i+4*d.W] }
	if sc.dy > 0 { // from below: top down, so no source is overwritten first
		for y := d.Y; y < d.Y+d.H; y++ {
			copy(row(y), row(y+sc.dy))
		}
		return
	}
	for y := d.Y + d.H - 1; y >= d.Y; y-- {
		copy(row(y), row(y+sc.dy))
	}
}
