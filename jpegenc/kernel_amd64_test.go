//go:build !purego

package jpegenc

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func needAVX2(t testing.TB) {
	if !haveAVX2 {
		t.Skip("no AVX2 on this CPU: the portable kernels are the only ones")
	}
}

// mcuSources are 16 rows of pixels at a stride: the content that
// stresses each part of the arithmetic.
func mcuSources(rng *rand.Rand) []struct {
	name   string
	stride int
	pix    []byte
} {
	mk := func(stride int, px func(i int) byte) []byte {
		b := make([]byte, 15*stride+64)
		for i := range b {
			b[i] = px(i)
		}
		return b
	}
	return []struct {
		name   string
		stride int
		pix    []byte
	}{
		{"zero", 64, mk(64, func(int) byte { return 0 })},
		{"white", 64, mk(64, func(int) byte { return 255 })},
		{"noise", 64, mk(64, func(int) byte { return byte(rng.Uint32()) })},
		{"noise, wide stride", 4 * 1280, mk(4*1280, func(int) byte { return byte(rng.Uint32()) })},
		{"noise, odd stride", 67, mk(67, func(int) byte { return byte(rng.Uint32()) })},
		{"checker 255/0", 64, mk(64, func(i int) byte { return byte(255 * ((i/4 + i/64) % 2)) })},
		{"red/blue stripes", 64, mk(64, func(i int) byte {
			if i%4 == (i/8%2)*2 {
				return 255
			}
			return 0
		})},
		{"gradient", 256, mk(256, func(i int) byte { return byte(i%256/4 + i/256*8) })},
	}
}

// matchKernels fails t unless the AVX2 kernels give exactly the
// portable kernels' values for the MCU at pix, at each encoder's tables.
func matchKernels(t *testing.T, name string, pix []byte, stride int, encs []*Encoder) {
	t.Helper()
	var want, got [6][64]int32
	loadMCUGo(&want, pix, stride)
	loadAVX2(&got, &pix[0], stride)
	if got != want {
		t.Fatalf("%s: load differs\n got %v\nwant %v", name, got, want)
	}
	for _, e := range encs {
		for i := range want {
			tab := min(i/4, 1)
			b1, b2 := want[i], want[i]
			var o1, o2 [64]int32
			m1 := fdctQuantGo(&b1, &e.recip[tab], &o1)
			m2 := fdctQuantAVX2(&b2, &e.recip[tab], &o2)
			if o1 != o2 || m1 != m2 {
				t.Fatalf("%s q%d block %d: transform differs\n got %v %x\nwant %v %x", name, e.quality, i, o2, m2, o1, m1)
			}
		}
	}
}

// The AVX2 kernels give exactly the portable kernels' values.
func TestKernelsMatch(t *testing.T) {
	needAVX2(t)
	rng := rand.New(rand.NewPCG(5, 6))
	encs := []*Encoder{New(1), New(15), New(79), New(100)}
	for _, src := range mcuSources(rng) {
		matchKernels(t, src.name, src.pix, src.stride, encs)
	}
}

// The extremes of the transform's input range, not only what colour
// conversion gives: every block of ±512 and random values in it.
func TestTransformRange(t *testing.T) {
	needAVX2(t)
	rng := rand.New(rand.NewPCG(7, 8))
	e := New(100)
	for n := range 2000 {
		var b [64]int32
		for i := range b {
			switch n % 4 {
			case 0:
				b[i] = int32(rng.IntN(1024)) - 512
			case 1:
				b[i] = 511 * int32(1-2*((i+i/8)%2)) // checkerboard at full scale
			case 2:
				b[i] = int32(n%1024) - 512 // flat
			default:
				b[i] = int32(rng.IntN(3)) - 1 // near zero: ties in the rounding
			}
		}
		b1, b2 := b, b
		var o1, o2 [64]int32
		m1 := fdctQuantGo(&b1, &e.recip[n%2], &o1)
		m2 := fdctQuantAVX2(&b2, &e.recip[n%2], &o2)
		if o1 != o2 || m1 != m2 {
			t.Fatalf("input %v: got %v %x, want %v %x", b, o2, m2, o1, m1)
		}
	}
}

// Whole pictures encode to the same bytes on either path.
func TestEncodersMatch(t *testing.T) {
	needAVX2(t)
	defer func() { haveAVX2 = true }()
	for _, p := range pictures() {
		for _, q := range qualities {
			haveAVX2 = true
			a, _ := New(q).Encode(nil, p.bgrx, 4*p.w, p.w, p.h)
			haveAVX2 = false
			b, _ := New(q).Encode(nil, p.bgrx, 4*p.w, p.w, p.h)
			if !bytes.Equal(a, b) {
				t.Fatalf("%s q%d: AVX2 and portable encodings differ", p.name, q)
			}
		}
	}
}

func FuzzKernels(f *testing.F) {
	f.Add([]byte{0, 255, 0, 255}, uint8(100), uint8(0))
	f.Add([]byte("a photo, say"), uint8(79), uint8(3))
	f.Fuzz(func(t *testing.T, seed []byte, q, pad uint8) {
		if !haveAVX2 || len(seed) == 0 {
			return
		}
		stride := 64 + int(pad)
		pix := make([]byte, 15*stride+64)
		for i := range pix {
			pix[i] = seed[i%len(seed)] ^ byte(i/len(seed))
		}
		matchKernels(t, "fuzz", pix, stride, []*Encoder{New(int(q))})
	})
}
