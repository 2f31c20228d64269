//go:build !amd64 || purego

package h264enc

func i420Rows(y0, y1, cbRow, crRow, r0, r1 []byte) int { return 0 }
