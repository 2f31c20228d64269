//go:build !purego

package h264enc

import "golang.org/x/sys/cpu"

// haveAVX2 selects the assembly kernel; tests turn it off to compare.
var haveAVX2 = cpu.X86.HasAVX2

// i420RowsAVX2 is i420RowsGo for groups of eight columns.
//
//go:noescape
func i420RowsAVX2(y0, y1, cb, cr, r0, r1 *byte, groups int)

// i420Rows converts what it can of two rows in the kernel and returns how
// many columns that was.
func i420Rows(y0, y1, cbRow, crRow, r0, r1 []byte) int {
	g := len(y0) / 8
	if !haveAVX2 || g == 0 {
		return 0
	}
	_, _, _, _ = y1[8*g-1], cbRow[4*g-1], crRow[4*g-1], r0[32*g-1]
	_ = r1[32*g-1]
	i420RowsAVX2(&y0[0], &y1[0], &cbRow[0], &crRow[0], &r0[0], &r1[0], g)
	return 8 * g
}
