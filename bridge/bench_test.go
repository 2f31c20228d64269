package bridge

import (
	"image/png"
	"math/rand/v2"
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

// photoFrame is a 1280x800 frame of gradients under grain, as the
// bench's gallery shows: every tile goes JPEG after its palette fails.
func photoFrame() *Frame {
	rng := rand.New(rand.NewPCG(9, 10))
	f := NewFrame(1280, 800)
	for y := range f.H {
		for x := range f.W {
			n := rng.IntN(41) - 20
			c := func(v int) byte { return byte(min(max(v+n, 0), 255)) }
			p := f.at(x, y)
			p[0], p[1], p[2] = c(200-(x+y)*120/2080), c(90+y*120/800), c(60+x*150/1280)
		}
	}
	return f
}

// BenchmarkEncodeFrame encodes a whole text frame in 64x64 tiles as an
// update to a noVNC-like viewer does.
func BenchmarkEncodeFrame(b *testing.B) {
	text, photo := textFrame(b), photoFrame()
	f := text
	var rects []Rect
	for y := 0; y < f.H; y += tile {
		for x := 0; x < f.W; x += tile {
			rects = append(rects, Rect{x, y, min(tile, f.W-x), min(tile, f.H-y)})
		}
	}
	for _, bc := range []struct {
		name    string
		f       *Frame
		enc     int32
		quality int
	}{
		{"tight-jpeg6", text, EncTight, 6}, {"tight-lossless", text, EncTight, -1}, {"zrle", text, EncZRLE, -1}, {"zlib", text, EncZlib, -1},
		{"photo/tight-jpeg6", photo, EncTight, 6},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEncoder(noVNCFormat)
			e.quality = bc.quality
			var out []byte
			for b.Loop() {
				out = e.appendRects(out[:0], bc.f, rects, bc.enc, nil)
			}
			b.ReportMetric(float64(len(out))/1000, "KB/frame")
		})
	}
}
