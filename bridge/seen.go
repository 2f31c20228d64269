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
// differs from the viewer's picture snap, or false when it does not.
func changedBox(snap, fb *Frame, r Rect) (Rect, bool) {
	const rgb, x = 0x00ffffff00ffffff, 0xff000000ff000000
	x0, x1, y0, y1 := r.X+r.W, r.X, -1, -1
	for y := r.Y; y < r.Y+r.H; y++ {
		i := y*snap.Stride + 4*r.X
		a, b := snap.Pix[i:i+4*r.W], fb.Pix[i:i+4*r.W]
		first, last := -1, -1
		p := 0
		for ; p+8 <= len(a); p += 8 {
			va, vb := binary.LittleEndian.Uint64(a[p:]), binary.LittleEndian.Uint64(b[p:])
			d := (va^vb)&rgb | va&x
			if d == 0 {
				continue
			}
			px := p / 4
			if d&0xffffffff == 0 {
				px++
			}
			if first < 0 {
				first = px
			}
			last = p/4 + 1
			if d>>32 == 0 {
				last = p / 4
			}
		}
		if p < len(a) { // an odd width: the last pixel
			va, vb := binary.LittleEndian.Uint32(a[p:]), binary.LittleEndian.Uint32(b[p:])
			if (va^vb)&0x00ffffff != 0 || va&0xff000000 != 0 {
				if first < 0 {
					first = p / 4
				}
				last = p / 4
			}
		}
		if first < 0 {
			continue
		}
		if y0 < 0 {
			y0 = y
		}
		y1 = y
		x0, x1 = min(x0, r.X+first), max(x1, r.X+last)
	}
	if y0 < 0 {
		return Rect{}, false
	}
	return Rect{x0, y0, x1 - x0 + 1, y1 - y0 + 1}, true
}

// copyKnown copies r of fb into snap, marking its pixels known.
func copyKnown(snap, fb *Frame, r Rect) {
	for y := r.Y; y < r.Y+r.H; y++ {
		i := y*snap.Stride + 4*r.X
		dst, src := snap.Pix[i:i+4*r.W], fb.Pix[i:i+4*r.W]
		copy(dst, src)
		for p := 3; p < len(dst); p += 4 {
			dst[p] = 0
		}
	}
}

// forget marks r of snap unknown: the viewer has it only approximately.
func forget(snap *Frame, r Rect) {
	for y := r.Y; y < r.Y+r.H; y++ {
		row := snap.Pix[y*snap.Stride+4*r.X : y*snap.Stride+4*(r.X+r.W)]
		for p := 3; p < len(row); p += 4 {
			row[p] = unknownX
		}
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
