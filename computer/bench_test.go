package computer

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"testing"
)

// pageDisplay is a fakeDisplay showing a captured text page (1280x800).
func pageDisplay(tb testing.TB) *fakeDisplay {
	b, err := os.ReadFile("testdata/textpage.png")
	if err != nil {
		tb.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	r := img.Bounds()
	f := newFake(r.Dx(), r.Dy())
	for y := 0; y < r.Dy(); y++ {
		for x := 0; x < r.Dx(); x++ {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			i := (y*r.Dx() + x) * 4
			f.pix[i], f.pix[i+1], f.pix[i+2] = byte(cb>>8), byte(cg>>8), byte(cr>>8)
		}
	}
	return f
}

// BenchmarkScreenshot: a 1280x800 text page, captured and encoded.
func BenchmarkScreenshot(b *testing.B) {
	for _, format := range []string{"png", "jpeg"} {
		b.Run(format, func(b *testing.B) {
			c := New(pageDisplay(b), Config{})
			defer c.Close()
			var n int
			for b.Loop() {
				s, err := c.Screenshot(ShotOptions{Format: format})
				if err != nil {
					b.Fatal(err)
				}
				n = len(s.Data)
			}
			b.ReportMetric(float64(n)/1024, "KiB")
		})
	}
}

// BenchmarkStdlibPNG is the reference: image/png at BestSpeed.
func BenchmarkStdlibPNG(b *testing.B) {
	c := New(pageDisplay(b), Config{})
	defer c.Close()
	img, _ := c.capture(image.Rect(0, 0, 1280, 800), 1280, 800, false)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		(&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img)
	}
	b.ReportMetric(float64(buf.Len())/1024, "KiB")
}

// encodePNG's output decodes to the same pixels, for any size and number
// of parts.
func TestEncodePNG(t *testing.T) {
	c := New(pageDisplay(t), Config{})
	defer c.Close()
	full, _ := c.capture(image.Rect(0, 0, 1280, 800), 1280, 800, false)
	for _, tt := range []struct {
		r     image.Rectangle
		parts int
	}{{image.Rect(0, 0, 1280, 800), 1}, {image.Rect(0, 0, 1280, 800), 2}, {image.Rect(0, 0, 1280, 800), 7}, {image.Rect(3, 5, 4, 6), 1}, {image.Rect(100, 100, 357, 133), 3}} {
		img := full.SubImage(tt.r).(*image.RGBA)
		img = resample(img, tt.r.Dx(), tt.r.Dy()) // a copy at the origin
		got, err := png.Decode(bytes.NewReader(encodePNG(img, tt.parts)))
		if err != nil {
			t.Fatalf("%v in %d parts: %v", tt.r, tt.parts, err)
		}
		for y := 0; y < tt.r.Dy(); y++ {
			for x := 0; x < tt.r.Dx(); x++ {
				r, g, b, a := got.At(x, y).RGBA()
				i := img.PixOffset(x, y)
				if uint8(r>>8) != img.Pix[i] || uint8(g>>8) != img.Pix[i+1] || uint8(b>>8) != img.Pix[i+2] || a != 0xffff {
					t.Fatalf("%v in %d parts: pixel (%d,%d) differs", tt.r, tt.parts, x, y)
				}
			}
		}
	}
}
