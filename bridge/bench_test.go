package bridge

import (
	"image/png"
	"os"
	"testing"
)

// textFrame loads testdata/textpage.png, a capture of Chromium showing a
// page of text on the desktop (1280x800), as a BGRX frame.
func textFrame(tb testing.TB) *Frame {
	tb.Helper()
	f, err := os.Open("testdata/textpage.png")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		tb.Fatal(err)
	}
	b := img.Bounds()
	fr := NewFrame(b.Dx(), b.Dy())
	for y := range b.Dy() {
		for x := range b.Dx() {
			r, g, bl, _ := img.At(x, y).RGBA()
			p := fr.at(x, y)
			p[0], p[1], p[2] = byte(bl>>8), byte(g>>8), byte(r>>8)
		}
	}
	return fr
}

// BenchmarkEncodeFrame encodes a whole text frame in 64x64 tiles as an
// update to a noVNC-like viewer does.
func BenchmarkEncodeFrame(b *testing.B) {
	f := textFrame(b)
	var rects []Rect
	for y := 0; y < f.H; y += tile {
		for x := 0; x < f.W; x += tile {
			rects = append(rects, Rect{x, y, min(tile, f.W-x), min(tile, f.H-y)})
		}
	}
	for _, bc := range []struct {
		name    string
		enc     int32
		quality int
	}{{"tight-jpeg6", EncTight, 6}, {"tight-lossless", EncTight, -1}, {"zrle", EncZRLE, -1}, {"zlib", EncZlib, -1}} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEncoder(noVNCFormat)
			e.quality = bc.quality
			var out []byte
			for b.Loop() {
				out = e.appendRects(out[:0], f, rects, bc.enc, nil)
			}
			b.ReportMetric(float64(len(out))/1000, "KB/frame")
		})
	}
}
