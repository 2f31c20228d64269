package bench

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestSSIM(t *testing.T) {
	const w, h = 64, 48
	rnd := rand.New(rand.NewPCG(1, 2))
	a := make([]byte, 4*w*h)
	for i := range a {
		a[i] = byte(rnd.IntN(256))
	}
	bgrx := make([]byte, len(a)) // the same picture in X's order
	for i := 0; i < len(a); i += 4 {
		bgrx[i], bgrx[i+1], bgrx[i+2] = a[i+2], a[i+1], a[i]
	}
	if s := ssim(a, orderRGBA, bgrx, orderBGRX, w, h); math.Abs(s-1) > 1e-9 {
		t.Fatalf("a picture against itself: %v, want 1", s)
	}
	noisy := append([]byte(nil), bgrx...)
	for i := range noisy {
		if i%4 != 3 {
			noisy[i] = byte(min(255, max(0, int(noisy[i])+rnd.IntN(41)-20)))
		}
	}
	flat := make([]byte, len(a))
	s1, s2 := ssim(a, orderRGBA, noisy, orderBGRX, w, h), ssim(a, orderRGBA, flat, orderBGRX, w, h)
	if !(s1 < 1 && s1 > s2 && s2 < 0.1) {
		t.Fatalf("noise: %v, a black picture: %v; want 1 > noise > black, black near 0", s1, s2)
	}
}

func TestBarNumber(t *testing.T) {
	const w, h = 200, 12
	for _, n := range []int{0, 1, 0x8001, 0xffff, 12345} {
		pix := make([]byte, 4*w*h)
		for i := range barBits {
			if n>>i&1 == 1 {
				for y := range barCell {
					for x := i * barCell; x < (i+1)*barCell; x++ {
						copy(pix[4*(y*w+x):], []byte{250, 240, 255, 0})
					}
				}
			}
		}
		if got := barNumber(pix, w, orderBGRX); got != n {
			t.Errorf("bar code of %d read as %d", n, got)
		}
	}
}
