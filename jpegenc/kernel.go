package jpegenc

import "math"

// The two kernels, colour conversion of an MCU and the transform with
// quantisation of a block, come in portable Go (here) and in AVX2
// assembly (kernel_amd64.s). Both do the same integer arithmetic and
// round the same way, so they give the same bits; the tests hold them
// to it.

// Colour conversion constants, 16 fractional bits (ITU-R BT.601 as
// JFIF uses it). Luma keeps pass1Bits extra bits and is centred on 0;
// chroma is taken from the sum of a 2×2 square.
const (
	yR, yG, yB    = 19595, 38470, 7471
	yBias         = 1<<(15-pass1Bits) - 128<<16 // rounding, and -128·2^pass1Bits after the shift
	cbR, cbG, cbB = -11059, -21709, 32768
	crR, crG, crB = 32768, -27439, -5329
	cBias         = 1 << (17 - pass1Bits) // rounding of the chroma sums
)

// loadMCUGo converts the 16×16 pixels at pix (rows stride bytes apart)
// to four luma blocks (top left, top right, bottom left, bottom right)
// and Cb and Cr blocks of the 2×2 means.
func loadMCUGo(dst *[6][64]int32, pix []byte, stride int) {
	_ = pix[15*stride+63]
	luma := func(p *[64]byte, x int) (y, r, g, b int32) {
		b, g, r = int32(p[x]), int32(p[x+1]), int32(p[x+2])
		return (yR*r + yG*g + yB*b + yBias) >> (16 - pass1Bits), r, g, b
	}
	for r := 0; r < 16; r += 2 {
		a := (*[64]byte)(pix[r*stride : r*stride+64])
		b := (*[64]byte)(pix[(r+1)*stride : (r+1)*stride+64])
		cb, cr := (*[8]int32)(dst[4][r/2*8:]), (*[8]int32)(dst[5][r/2*8:])
		for c := range 8 { // a 2×2 square: columns 2c, 2c+1 of rows r, r+1
			// The four pixels written out, not looped over: the loop's
			// bookkeeping was most of the portable encoder's conversion
			// (9.6 -> 8.9 ms a 1280x800 photo, one core).
			blk := &dst[r/8*2+c/4]
			o := r%8*8 + 2*(c%4)
			x := 8 * c
			y0, r0, g0, b0 := luma(a, x)
			y1, r1, g1, b1 := luma(a, x+4)
			y2, r2, g2, b2 := luma(b, x)
			y3, r3, g3, b3 := luma(b, x+4)
			blk[o], blk[o+1], blk[o+8], blk[o+9] = y0, y1, y2, y3
			rr, gg, bb := r0+r1+r2+r3, g0+g1+g2+g3, b0+b1+b2+b3
			cb[c] = (cbR*rr + cbG*gg + cbB*bb + cBias) >> (18 - pass1Bits)
			cr[c] = (crR*rr + crG*gg + crB*bb + cBias) >> (18 - pass1Bits)
		}
	}
}

// fdctQuantGo transforms b (columns in place, then rows), quantises it
// with recip into out, transposed (out[v*8+u] holds vertical frequency
// u, horizontal v), and returns the mask of out's non-zero entries.
// Quantisation rounds float32(b)·recip to the nearest integer, ties to
// even: what the assembly's VCVTPS2DQ does.
//
// Each row's butterfly is quantised as it comes out, with constant
// indices (a row u is column u of out): storing the row pass into b
// and looping over it again for the quantisation, with a variable
// shift for each coefficient's mask bit, was a third of the portable
// encoder's time.
func fdctQuantGo(b *[64]int32, recip *[64]float32, out *[64]int32) uint64 {
	fdctCols(b)
	var nonzero uint64
	for u := range 8 {
		d := (*[8]int32)(b[u*8:])
		c0, c1, c2, c3, c4, c5, c6, c7 := aan(d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7])
		// Row u of b is column u of out and of recip.
		o, r := (*[57]int32)(out[u:]), (*[57]float32)(recip[u:])
		o[0], o[8], o[16], o[24] = quant(c0, r[0]), quant(c1, r[8]), quant(c2, r[16]), quant(c3, r[24])
		o[32], o[40], o[48], o[56] = quant(c4, r[32]), quant(c5, r[40]), quant(c6, r[48]), quant(c7, r[56])
		col := nz(o[0]) | nz(o[8])<<8 | nz(o[16])<<16 | nz(o[24])<<24 |
			nz(o[32])<<32 | nz(o[40])<<40 | nz(o[48])<<48 | nz(o[56])<<56
		nonzero |= col << u
	}
	return nonzero
}

// quant is x·r rounded to the nearest integer, ties to even. Adding
// 1.5·2^23 rounds a float32 of magnitude under 2^22 to an integer in
// the float's own rounding (ties to even; the constant is even), which
// its low mantissa bits then hold: no conversion to float64 and back.
// The conversion around the product keeps it from being fused with the
// addition.
func quant(x int32, r float32) int32 {
	const magic = 0x1.8p23
	return int32(math.Float32bits(float32(float32(x)*r)+magic)) - int32(math.Float32bits(magic))
}

// nz is 1 if c is not zero, else 0.
func nz(c int32) uint64 { return uint64(uint32(c|-c) >> 31) }

// zigzagL[k] is where the k-th coefficient in zigzag order sits in a
// transposed block.
var zigzagL = func() (z [64]uint8) {
	for k, n := range zigzag {
		z[k] = n%8*8 + n/8
	}
	return z
}()

// zigzagBits[i][m] spreads the bits of byte i of a transposed block's
// mask to zigzag positions: eight lookups reorder the whole mask.
var zigzagBits = func() (t [8][256]uint64) {
	var pos [64]uint // zigzag position of each transposed index
	for k, l := range zigzagL {
		pos[l] = uint(k)
	}
	for i := range 8 {
		for m := range 256 {
			for j := range 8 {
				if m>>j&1 != 0 {
					t[i][m] |= 1 << pos[8*i+j]
				}
			}
		}
	}
	return t
}()

// toZigzag reorders a transposed block's mask to zigzag order.
func toZigzag(m uint64) uint64 {
	return zigzagBits[0][m&0xff] | zigzagBits[1][m>>8&0xff] | zigzagBits[2][m>>16&0xff] | zigzagBits[3][m>>24&0xff] |
		zigzagBits[4][m>>32&0xff] | zigzagBits[5][m>>40&0xff] | zigzagBits[6][m>>48&0xff] | zigzagBits[7][m>>56]
}
