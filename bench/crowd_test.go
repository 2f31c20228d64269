package bench

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"testing"
)

// TestIJGQuality: the quality read back from a JPEG's luminance table is
// the one it was made at; anything that is not a JPEG with an 8-bit
// table says so.
func TestIJGQuality(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 16, 16))
	for i := range img.Pix {
		img.Pix[i] = byte(i * 7)
	}
	img.Set(0, 0, color.RGBA{1, 2, 3, 255})
	for _, q := range []int{15, 29, 42, 62, 79, 92, 100} {
		var b bytes.Buffer
		if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: q}); err != nil {
			t.Fatal(err)
		}
		if got, ok := ijgQuality(b.Bytes()); !ok || got != q {
			t.Errorf("quality %d read as %d (%v)", q, got, ok)
		}
	}
	for _, bad := range [][]byte{nil, {0xff, 0xdb}, {0xff, 0xdb, 0, 67, 0x10}, bytes.Repeat([]byte{0xff}, 100)} {
		if q, ok := ijgQuality(bad); ok {
			t.Errorf("%x read as quality %d", bad, q)
		}
	}
}

// FuzzIJGQuality: any bytes give a quality in 1..100 or none, never a
// panic.
func FuzzIJGQuality(f *testing.F) {
	var b bytes.Buffer
	jpeg.Encode(&b, image.NewGray(image.Rect(0, 0, 8, 8)), &jpeg.Options{Quality: 50})
	f.Add(b.Bytes())
	f.Add([]byte{0xff, 0xdb, 0, 67, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, ok := ijgQuality(b); ok && (q < 1 || q > 100) {
			t.Fatalf("quality %d", q)
		}
	})
}
