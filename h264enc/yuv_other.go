//go:build !amd64 || purego

package h264enc

// haveAVX2 is false: the Go code is the only one here.
var haveAVX2 = false

func i420Rows(y0, y1, cbRow, crRow, r0, r1 []byte) int { return 0 }
