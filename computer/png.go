package computer

import (
	"bytes"
	"encoding/binary"
	"hash/adler32"
	"hash/crc32"
	"image"
	"sync"

	"github.com/klauspost/compress/flate"
)

// encodePNG writes img as an 8-bit RGB PNG, for screenshots: the alpha
// channel is dropped (the screen is opaque), every row but the first is
// filtered with Up (the first with Sub), which suits screens (flat areas,
// repeated rows) at a fraction of adaptive filtering's cost, and the data
// is deflated at level 1 by klauspost/compress in parts at once, as pigz
// does: each part a raw deflate run from a fresh dictionary ended by a
// sync flush, the last one final, all in one zlib stream. image/png at
// BestSpeed spends most of its time choosing filters.
func encodePNG(img *image.RGBA, parts int) []byte {
	w, h := img.Rect.Dx(), img.Rect.Dy()
	stride := 1 + 3*w
	raw := make([]byte, h*stride)
	var rowsWG sync.WaitGroup
	for p := range parts { // filtering, in the same parts
		y0, y1 := p*h/parts, (p+1)*h/parts
		rowsWG.Go(func() { filterRows(img, raw, y0, y1, w, stride) })
	}
	rowsWG.Wait()

	out := make([][]byte, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*h/parts*stride, (p+1)*h/parts*stride
		wg.Go(func() {
			var b bytes.Buffer
			b.Grow((hi - lo) / 8)
			fw, _ := flate.NewWriter(&b, 1) // level 1 is valid: no error
			fw.Write(raw[lo:hi])
			if p < parts-1 {
				fw.Flush() // sync flush: byte-aligned, not final
			} else {
				fw.Close()
			}
			out[p] = b.Bytes()
		})
	}
	sum := adler32.Checksum(raw)
	wg.Wait()

	n := 0
	for _, o := range out {
		n += len(o)
	}
	idat := make([]byte, 0, 2+n+4)
	idat = append(idat, 0x78, 0x01) // zlib: deflate, 32K window, fastest
	for _, o := range out {
		idat = append(idat, o...)
	}
	idat = binary.BigEndian.AppendUint32(idat, sum)

	var ihdr [13]byte
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = 8, 2 // 8 bits, truecolour (RGB)
	dst := make([]byte, 0, 8+25+12+len(idat)+12)
	dst = append(dst, "\x89PNG\r\n\x1a\n"...)
	dst = appendChunk(dst, "IHDR", ihdr[:])
	dst = appendChunk(dst, "IDAT", idat)
	return appendChunk(dst, "IEND", nil)
}

// filterRows writes rows y0..y1 of img as filtered RGB scanlines.
func filterRows(img *image.RGBA, raw []byte, y0, y1, w, stride int) {
	for y := y0; y < y1; y++ {
		src := img.Pix[y*img.Stride : y*img.Stride+4*w]
		row := raw[y*stride : (y+1)*stride]
		if y == 0 {
			row[0] = 1 // Sub
			var pr, pg, pb byte
			for x := 0; x < w; x++ {
				r, g, b := src[4*x], src[4*x+1], src[4*x+2]
				row[1+3*x], row[2+3*x], row[3+3*x] = r-pr, g-pg, b-pb
				pr, pg, pb = r, g, b
			}
			continue
		}
		up := img.Pix[(y-1)*img.Stride:]
		row[0] = 2 // Up
		for x := 0; x < w; x++ {
			row[1+3*x] = src[4*x] - up[4*x]
			row[2+3*x] = src[4*x+1] - up[4*x+1]
			row[3+3*x] = src[4*x+2] - up[4*x+2]
		}
	}
}

func appendChunk(dst []byte, typ string, data []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(data)))
	start := len(dst)
	dst = append(dst, typ...)
	dst = append(dst, data...)
	return binary.BigEndian.AppendUint32(dst, crc32.ChecksumIEEE(dst[start:]))
}
