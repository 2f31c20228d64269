//go:build !amd64 || purego

package jpegenc

func loadMCU(dst *[6][64]int32, pix []byte, stride int) { loadMCUGo(dst, pix, stride) }

func fdctQuant(b *[64]int32, recip *[64]float32, out *[64]int32) uint64 {
	return fdctQuantGo(b, recip, out)
}
