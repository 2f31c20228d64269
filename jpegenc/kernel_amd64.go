//go:build !purego

package jpegenc

import "golang.org/x/sys/cpu"

// haveAVX2 selects the assembly kernels; tests turn it off to compare.
var haveAVX2 = cpu.X86.HasAVX2

// loadAVX2 is loadMCUGo for 16 rows of 64 bytes at pix, stride apart.
//
//go:noescape
func loadAVX2(dst *[6][64]int32, pix *byte, stride int)

// fdctQuantAVX2 is fdctQuantGo; it leaves b undefined.
//
//go:noescape
func fdctQuantAVX2(b *[64]int32, recip *[64]float32, out *[64]int32) uint64

func loadMCU(dst *[6][64]int32, pix []byte, stride int) {
	if !haveAVX2 {
		loadMCUGo(dst, pix, stride)
		return
	}
	_ = pix[15*stride+63] // the 16 rows are there
	loadAVX2(dst, &pix[0], stride)
}

func fdctQuant(b *[64]int32, recip *[64]float32, out *[64]int32) uint64 {
	if !haveAVX2 {
		return fdctQuantGo(b, recip, out)
	}
	return fdctQuantAVX2(b, recip, out)
}
