package h264enc

import (
	"math"
	"testing"
)

// The conversion against BT.709's formulas in floating point, for the
// primaries, greys and a few mixes: within one step of each.
func TestToI420(t *testing.T) {
	colours := [][3]int{{0, 0, 0}, {255, 255, 255}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {128, 128, 64}, {20, 200, 140}, {1, 2, 3}}
	for _, c := range colours {
		const w, h = 4, 2
		pix := make([]byte, 4*w*h)
		for i := 0; i < w*h; i++ {
			pix[4*i], pix[4*i+1], pix[4*i+2], pix[4*i+3] = byte(c[2]), byte(c[1]), byte(c[0]), 0xaa
		}
		dst := make([]byte, w*h*3/2)
		toI420(dst, pix, 4*w, w, h)
		r, g, b := float64(c[0]), float64(c[1]), float64(c[2])
		const kr, kb = 0.2126, 0.0722
		luma := kr*r + (1-kr-kb)*g + kb*b
		wantY := 16 + 219*luma/255
		wantCb := 128 + 224*(b-luma)/(2*(1-kb))/255
		wantCr := 128 + 224*(r-luma)/(2*(1-kr))/255
		for name, got := range map[string][2]float64{"Y": {float64(dst[0]), wantY}, "Cb": {float64(dst[w*h]), wantCb}, "Cr": {float64(dst[w*h+w*h/4]), wantCr}} {
			if math.Abs(got[0]-got[1]) > 1 {
				t.Errorf("RGB %v: %s %v, want %.2f", c, name, got[0], got[1])
			}
		}
	}
}

// Chroma is the mean of each 2x2 block; luma is per pixel.
func TestToI420Subsampling(t *testing.T) {
	const w, h = 4, 4
	pix := make([]byte, 4*w*h)
	for y := range h {
		for x := range w {
			if (x+y)%2 == 0 { // a checkerboard of red and blue
				pix[4*(y*w+x)+2] = 255
			} else {
				pix[4*(y*w+x)] = 255
			}
		}
	}
	dst := make([]byte, w*h*3/2)
	toI420(dst, pix, 4*w, w, h)
	if dst[0] == dst[1] {
		t.Fatal("red and blue pixels got the same luma")
	}
	purple := make([]byte, 4*w*h)
	for i := 0; i < w*h; i++ {
		purple[4*i], purple[4*i+2] = 127, 128 // their mean, near enough
	}
	want := make([]byte, w*h*3/2)
	toI420(want, purple, 4*w, w, h)
	for i := w * h; i < len(dst); i++ {
		if d := int(dst[i]) - int(want[i]); d < -1 || d > 1 {
			t.Fatalf("chroma %d = %d, the blocks' mean colour gives %d", i, dst[i], want[i])
		}
	}
}

func BenchmarkToI420(b *testing.B) {
	const w, h = 960, 540
	pix := movingFrame(w, h, 4*w, 3)
	dst := make([]byte, w*h*3/2)
	b.SetBytes(4 * w * h)
	for b.Loop() {
		toI420(dst, pix, 4*w, w, h)
	}
}

// The AVX2 kernel gives the bytes the Go code gives, at every width's
// tail and any stride.
func TestToI420Kernel(t *testing.T) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU: the Go code is the only one")
	}
	for _, sz := range [][2]int{{16, 2}, {18, 4}, {30, 6}, {64, 16}, {962, 10}} {
		w, h := sz[0], sz[1]
		stride := 4*w + 12
		pix := make([]byte, stride*h)
		for i := range pix {
			pix[i] = byte(i*131 + i/7*29 + i*i)
		}
		asm, ref := make([]byte, w*h*3/2), make([]byte, w*h*3/2)
		toI420(asm, pix, stride, w, h)
		haveAVX2 = false
		toI420(ref, pix, stride, w, h)
		haveAVX2 = true
		for i := range ref {
			if asm[i] != ref[i] {
				t.Fatalf("%dx%d: byte %d (of %d) is %d in the kernel, %d in Go", w, h, i, len(ref), asm[i], ref[i])
			}
		}
	}
}
