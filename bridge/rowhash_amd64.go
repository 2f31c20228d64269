//go:build !purego

package bridge

import (
	"encoding/binary"

	"golang.org/x/sys/cpu"
)

// haveAVX2 selects hashLanesAVX2 for row hashes; tests turn it off.
var haveAVX2 = cpu.X86.HasAVX2

// hashLanesAVX2 hashes the first n bytes at p (n a multiple of 32),
// ignoring each pixel's X byte, into eight 32-bit lanes: lane l of
// eight accumulators takes pixel l of each 8-pixel group in turn
// ((h ^ pixel) · FNV prime), 256 bytes a step; the accumulators are
// then folded in order. Each step is a bijection of the state, so a
// row that differs from another of its length in one pixel hashes
// differently.
//
//go:noescape
func hashLanesAVX2(p *byte, n int, lanes *[8]uint32)

// rowHash hashes a row's pixels, ignoring the undefined X byte: eight
// pixels a vector where AVX2 is there (scrolled pages and photos:
// hashing rows was 7% of deskd's CPU with rowHashGo, a 64-bit multiply
// chain per 8 bytes). Rows of one length always take the same path, so
// equal rows hash equal.
func rowHash(row []byte) uint64 {
	if !haveAVX2 || len(row) < 256 {
		return rowHashGo(row)
	}
	const prime = 1099511628211
	var lanes [8]uint32
	n := len(row) &^ 31
	hashLanesAVX2(&row[0], n, &lanes)
	h := uint64(14695981039346656037)
	for _, l := range lanes {
		h = (h ^ uint64(l)) * prime
	}
	for i := n; i+4 <= len(row); i += 4 {
		h = (h ^ uint64(binary.LittleEndian.Uint32(row[i:])&0x00ffffff)) * prime
	}
	return h
}
