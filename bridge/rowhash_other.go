//go:build !amd64 || purego

package bridge

// rowHash hashes a row's pixels, ignoring the undefined X byte.
func rowHash(row []byte) uint64 { return rowHashGo(row) }
