// Package jpegenc encodes baseline JPEG (YCbCr 4:2:0) straight
// from a BGRX framebuffer, for the JPEG sub-encoding of RFB Tight.
//
// It is built for that one job: no image.Image in between (pixels are
// read where the framebuffer holds them), an integer AAN forward DCT
// with the quantisation a multiply by a reciprocal, the standard
// Huffman tables of ITU T.81 Annex K.3 compiled once, and a 64-bit bit
// writer appending to a []byte. Colour conversion and the transform
// run in AVX2 assembly where the CPU has it (no cgo: Go's own
// assembler), in portable Go elsewhere or with the purego build tag;
// both give the same bytes.
package jpegenc

import (
	"fmt"
	"math"
)

// Markers and segment layouts (ITU T.81 Annex B).
const (
	markerSOI  = 0xd8 // start of image
	markerEOI  = 0xd9 // end of image
	markerDQT  = 0xdb // u16 length, per table: u8 precision<<4|id, 64 u8 in zigzag order
	markerSOF0 = 0xc0 // u16 length, u8 precision, u16 height, u16 width, u8 n, per component: id, h<<4|v, table
	markerDHT  = 0xc4 // u16 length, per table: u8 class<<4|id, 16 u8 counts, the values
	markerSOS  = 0xda // u16 length, u8 n, per component: id, dc<<4|ac; u8 Ss, Se, Ah<<4|Al
)

// MaxSize is the largest width or height Encode takes (Tight sends at
// most 2048 pixels a side; JPEG itself allows 65535).
const MaxSize = 65535

// zigzag[k] is the natural (row-major) index of the k-th coefficient in
// zigzag order (T.81 Figure 5).
var zigzag = [64]uint8{
	0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
}

// baseQuant are the example tables of T.81 Annex K.1 (luminance,
// chrominance), row-major, scaled by quality as the IJG library does.
var baseQuant = [2][64]uint8{{
	16, 11, 10, 16, 24, 40, 51, 61,
	12, 12, 14, 19, 26, 58, 60, 55,
	14, 13, 16, 24, 40, 57, 69, 56,
	14, 17, 22, 29, 51, 87, 80, 62,
	18, 22, 37, 56, 68, 109, 103, 77,
	24, 35, 55, 64, 81, 104, 113, 92,
	49, 64, 78, 87, 103, 121, 120, 101,
	72, 92, 95, 98, 112, 100, 103, 99,
}, {
	17, 18, 24, 47, 99, 99, 99, 99,
	18, 21, 26, 66, 99, 99, 99, 99,
	24, 26, 56, 99, 99, 99, 99, 99,
	47, 66, 99, 99, 99, 99, 99, 99,
	99, 99, 99, 99, 99, 99, 99, 99,
	99, 99, 99, 99, 99, 99, 99, 99,
	99, 99, 99, 99, 99, 99, 99, 99,
	99, 99, 99, 99, 99, 99, 99, 99,
}}

// huffSpec is a Huffman table as T.81 sends it: how many codes of each
// length 1..16, then the values in code order.
type huffSpec struct {
	counts [16]uint8
	values []uint8
}

// The typical tables of T.81 Annex K.3: luminance DC, luminance AC,
// chrominance DC, chrominance AC. An AC value is run<<4 | size.
var huffSpecs = [4]huffSpec{
	{[16]uint8{0, 1, 5, 1, 1, 1, 1, 1, 1}, []uint8{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
	{[16]uint8{0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 125}, acLuma},
	{[16]uint8{0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []uint8{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
	{[16]uint8{0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 119}, acChroma},
}

// acLuma and acChroma: the frequent run/size pairs first (as listed in
// Annex K.3), then every other pair in ascending order.
var (
	acLuma = acValues([]uint8{
		0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
		0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0,
		0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28,
		0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
		0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
		0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
		0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
		0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5,
		0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2,
		0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
		0xf9, 0xfa,
	})
	acChroma = acValues([]uint8{
		0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71,
		0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0,
		0x15, 0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26,
		0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
		0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
		0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
		0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5,
		0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3,
		0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
		0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
		0xf9, 0xfa,
	})
)

// acValues checks a table's value list: 162 distinct run/size pairs.
func acValues(v []uint8) []uint8 {
	if len(v) != 162 {
		panic(fmt.Sprintf("jpegenc: AC table of %d values", len(v))) // a typo in the tables above
	}
	return v
}

// code is a Huffman code: the bits in the low len bits.
type code struct {
	bits uint32
	len  uint8
}

// huffTables are the compiled codes, indexed by value: [DC luma, AC
// luma, DC chroma, AC chroma].
var huffTables = func() (t [4][256]code) {
	for i, s := range huffSpecs {
		c, k := uint32(0), 0
		for l, n := range s.counts {
			for range n {
				t[i][s.values[k]] = code{c, uint8(l + 1)}
				c++
				k++
			}
			c <<= 1
		}
	}
	return t
}()

// aanScale[k] is the factor the AAN DCT leaves on output k:
// cos(k·π/16)·√2 (1 for k = 0).
var aanScale = func() (s [8]float64) {
	s[0] = 1
	for k := 1; k < 8; k++ {
		s[k] = math.Cos(float64(k)*math.Pi/16) * math.Sqrt2
	}
	return s
}()

const (
	pass1Bits = 2  // extra precision bits of the samples through the DCT
	constBits = 13 // fractional bits of the DCT's multipliers
)

// Encoder encodes at one quality. It is not safe for concurrent use:
// each goroutine keeps its own.
type Encoder struct {
	quality int
	quant   [2][64]uint8   // row-major, for DQT
	recip   [2][64]float32 // transposed: 1 / (quant·aanScale²·8·2^pass1Bits)
	bw      bitWriter
	blocks  [6][64]int32  // an MCU: four luma blocks, Cb, Cr
	coef    [64]int32     // one block's quantised coefficients, transposed
	edge    [16 * 64]byte // an MCU past the picture's edge, edge pixels repeated
}

// New returns an Encoder for quality 1..100 (clamped), with the IJG
// scaling of the Annex K tables that Go's image/jpeg and libjpeg use.
func New(quality int) *Encoder {
	quality = min(max(quality, 1), 100)
	scale := 200 - 2*quality
	if quality < 50 {
		scale = 5000 / quality
	}
	e := &Encoder{quality: quality}
	for t := range 2 {
		for i, b := range baseQuant[t] {
			q := min(max((int(b)*scale+50)/100, 1), 255)
			e.quant[t][i] = uint8(q)
		}
		for u := range 8 {
			for v := range 8 {
				d := float64(e.quant[t][u*8+v]) * aanScale[u] * aanScale[v] * 8 * (1 << pass1Bits)
				e.recip[t][v*8+u] = float32(1 / d)
			}
		}
	}
	return e
}

// Quality is the quality the Encoder was made for.
func (e *Encoder) Quality() int { return e.quality }

// Encode appends a complete JPEG of the w×h pixels at pix to dst. pix
// holds rows of stride bytes, each pixel B, G, R, X (the order of a
// little-endian 24-bit X framebuffer); pix[0] is the top-left pixel.
func (e *Encoder) Encode(dst, pix []byte, stride, w, h int) ([]byte, error) {
	if w < 1 || h < 1 || w > MaxSize || h > MaxSize {
		return dst, fmt.Errorf("jpegenc: size %dx%d out of range", w, h)
	}
	if stride < 4*w || len(pix) < (h-1)*stride+4*w {
		return dst, fmt.Errorf("jpegenc: %d bytes at stride %d do not hold %dx%d pixels", len(pix), stride, w, h)
	}
	dst = e.header(dst, w, h)
	e.bw = bitWriter{buf: dst}
	var prevY, prevCb, prevCr int32
	for my := 0; my < h; my += 16 {
		for mx := 0; mx < w; mx += 16 {
			if mx+16 <= w && my+16 <= h {
				loadMCU(&e.blocks, pix[my*stride+4*mx:], stride)
			} else {
				e.loadEdge(pix, stride, w, h, mx, my)
			}
			for i := range 4 {
				prevY = e.block(&e.blocks[i], 0, prevY)
			}
			prevCb = e.block(&e.blocks[4], 1, prevCb)
			prevCr = e.block(&e.blocks[5], 1, prevCr)
		}
	}
	dst = e.bw.finish()
	e.bw = bitWriter{}
	return append(dst, 0xff, markerEOI), nil
}

// loadEdge loads an MCU that reaches past the right or bottom edge:
// the last column and row repeat, as T.81 suggests for padding.
func (e *Encoder) loadEdge(pix []byte, stride, w, h, mx, my int) {
	n := 4 * (min(mx+16, w) - mx) // bytes of a row inside the picture
	for r := range 16 {
		row := e.edge[r*64 : r*64+64]
		if r > 0 && my+r >= h {
			copy(row, e.edge[(r-1)*64:r*64])
			continue
		}
		i := (my+r)*stride + 4*mx
		copy(row, pix[i:i+n])
		for x := n; x < 64; x += 4 {
			copy(row[x:x+4], row[n-4:n])
		}
	}
	loadMCU(&e.blocks, e.edge[:], 64)
}

// header appends SOI, the quantisation tables, the frame header,
// the Huffman tables and the scan header.
func (e *Encoder) header(dst []byte, w, h int) []byte {
	// No JFIF segment: with three components and none, decoders take
	// YCbCr (as for Go's own encoder, which writes none either), and a
	// Tight rectangle is 18 bytes smaller.
	dst = append(dst, 0xff, markerSOI)
	dst = append(dst, 0xff, markerDQT, 0, 2+2*65)
	for t := range 2 {
		dst = append(dst, byte(t))
		for _, n := range zigzag {
			dst = append(dst, e.quant[t][n])
		}
	}
	dst = append(dst, 0xff, markerSOF0, 0, 17, 8, byte(h>>8), byte(h), byte(w>>8), byte(w), 3,
		1, 0x22, 0, // Y: 2×2 samples per MCU, table 0
		2, 0x11, 1, // Cb
		3, 0x11, 1) // Cr
	n := 2
	for _, s := range huffSpecs {
		n += 17 + len(s.values)
	}
	dst = append(dst, 0xff, markerDHT, byte(n>>8), byte(n))
	for i, s := range huffSpecs {
		dst = append(dst, byte(i%2)<<4|byte(i/2)) // class (DC 0, AC 1), id
		dst = append(dst, s.counts[:]...)
		dst = append(dst, s.values...)
	}
	return append(dst, 0xff, markerSOS, 0, 12, 3, 1, 0x00, 2, 0x11, 3, 0x11, 0, 63, 0)
}
