package jpegenc

import (
	"encoding/binary"
	"math/bits"
)

// DCT multipliers with constBits fractional bits.
const (
	fix0382 = 3135  // 0.382683433 · 2^13
	fix0541 = 4433  // 0.541196100 · 2^13
	fix0707 = 5793  // 0.707106781 · 2^13
	fix1306 = 10703 // 1.306562965 · 2^13
)

func mul(v, c int32) int32 { return (v*c + 1<<(constBits-1)) >> constBits }

// aan is the AAN (Arai, Agui, Nakajima) forward DCT of 8 points: five
// multiplies. Output k is 8·DCT(k)·aanScale[k]; the quantisation
// reciprocals take that scale out. Both passes of the portable
// transform call it: too big to inline, and the calls measured within
// the noise (under 1% of the portable encoder).
func aan(x0, x1, x2, x3, x4, x5, x6, x7 int32) (c0, c1, c2, c3, c4, c5, c6, c7 int32) {
	t0, t7 := x0+x7, x0-x7
	t1, t6 := x1+x6, x1-x6
	t2, t5 := x2+x5, x2-x5
	t3, t4 := x3+x4, x3-x4
	t10, t13 := t0+t3, t0-t3
	t11, t12 := t1+t2, t1-t2
	z1 := mul(t12+t13, fix0707)
	c0, c4 = t10+t11, t10-t11
	c2, c6 = t13+z1, t13-z1
	t10, t11, t12 = t4+t5, t5+t6, t6+t7
	z5 := mul(t10-t12, fix0382)
	z2 := mul(t10, fix0541) + z5
	z4 := mul(t12, fix1306) + z5
	z3 := mul(t11, fix0707)
	z11, z13 := t7+z3, t7-z3
	c5, c3 = z13+z2, z13-z2
	c1, c7 = z11+z4, z11-z4
	return
}

// fdctCols is the column pass of the 8×8 transform, in place. The row
// pass is fused with quantisation (fdctQuantGo; the AVX2 kernel does
// both passes in registers).
func fdctCols(b *[64]int32) {
	for i := range 8 {
		c := (*[57]int32)(b[i:])
		c[0], c[8], c[16], c[24], c[32], c[40], c[48], c[56] = aan(c[0], c[8], c[16], c[24], c[32], c[40], c[48], c[56])
	}
}

// block transforms, quantises and entropy-codes one block with table t
// (0 luma, 1 chroma) after the previous DC value prev; it returns this
// block's DC value.
func (e *Encoder) block(b *[64]int32, t int, prev int32) int32 {
	q := &e.coef // transposed
	nonzero := toZigzag(fdctQuant(b, &e.recip[t], q))
	dc, ac := &huffTables[2*t], &huffTables[2*t+1]
	// The pending bits live in locals through the block (through the
	// writer's fields, each code waited on a store and a load).
	w := &e.bw
	acc, n := w.acc, w.n
	put := func(v uint32, l uint) {
		acc = acc<<l | uint64(v)
		n += l
		if n >= 32 {
			n -= 32
			w.word(uint32(acc >> n))
		}
	}
	size, extra := magnitude(q[0] - prev)
	put(dc[size].bits<<size|extra, uint(dc[size].len)+size)
	// Walk the non-zero AC values only: the zeros between them are runs.
	k := 0
	for rest := nonzero >> 1 << 1; rest != 0; rest &= rest - 1 {
		next := bits.TrailingZeros64(rest)
		run := next - k - 1
		k = next
		for run > 15 {
			put(ac[0xf0].bits, uint(ac[0xf0].len)) // ZRL: sixteen zeros
			run -= 16
		}
		c := min(max(q[zigzagL[k&63]&63], -1023), 1023) // baseline AC values have at most 10 bits
		size, extra := magnitude(c)
		h := ac[(run<<4|int(size))&0xff]
		put(h.bits<<size|extra, uint(h.len)+size)
	}
	if k < 63 {
		put(ac[0x00].bits, uint(ac[0x00].len)) // EOB
	}
	w.acc, w.n = acc, n
	return q[0]
}

// magnitude returns the size category of v and its extra bits (T.81
// F.1.2.1: negative values as v-1 in size bits). Without a branch: the
// sign of an AC value is a coin toss, and mispredicting it was a tenth
// of the encoder's time on grainy pictures.
func magnitude(v int32) (uint, uint32) {
	m := v >> 31 // -1 when negative
	size := uint(bits.Len32(uint32((v ^ m) - m)))
	return size, uint32(v+m) & (1<<size - 1)
}

// bitWriter packs codes MSB first, stuffing a zero after each 0xFF.
type bitWriter struct {
	buf []byte
	acc uint64 // the pending bits, in the low n
	n   uint
}

// word appends x's four bytes: at once unless one of them is 0xFF
// (stuffed with a zero).
func (w *bitWriter) word(x uint32) {
	if (^x-0x01010101)&x&0x80808080 == 0 { // no byte of x is 0xFF
		w.buf = binary.BigEndian.AppendUint32(w.buf, x)
		return
	}
	for s := 24; s >= 0; s -= 8 {
		if b := byte(x >> s); b == 0xff {
			w.buf = append(w.buf, 0xff, 0)
		} else {
			w.buf = append(w.buf, b)
		}
	}
}

// finish pads the last byte with ones and returns the buffer.
func (w *bitWriter) finish() []byte {
	if pad := (8 - w.n%8) % 8; pad > 0 {
		w.acc = w.acc<<pad | (1<<pad - 1)
		w.n += pad
	}
	for w.n >= 8 {
		w.n -= 8
		b := byte(w.acc >> w.n)
		w.buf = append(w.buf, b)
		if b == 0xff {
			w.buf = append(w.buf, 0)
		}
	}
	return w.buf
}
