package a11y

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"
)

// message builds a D-Bus message of the given lengths (contents zero).
func message(order byte, version byte, fields, body uint32) []byte {
	var bo binary.ByteOrder = binary.LittleEndian
	if order == 'B' {
		bo = binary.BigEndian
	}
	h := make([]byte, fixedHeader)
	h[0], h[1], h[3] = order, 2, version
	bo.PutUint32(h[4:], body)
	bo.PutUint32(h[8:], 1)
	bo.PutUint32(h[12:], fields)
	total := (fixedHeader+int(fields)+7)&^7 + int(body)
	if total > 1<<20 { // only the header matters past the bound
		return h
	}
	return append(h, make([]byte, total-fixedHeader)...)
}

// readAll passes b through an armed frameLimit in chunks of n bytes.
func readAll(b []byte, n int) error {
	f := &frameLimit{r: &chunked{b: b, n: n}}
	f.armed.Store(true)
	_, err := io.Copy(io.Discard, f)
	return err
}

type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

func TestFrameLimit(t *testing.T) {
	cat := func(ms ...[]byte) []byte { return bytes.Join(ms, nil) }
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"one little-endian message", message('l', 1, 40, 100), ""},
		{"big-endian messages back to back", cat(message('B', 1, 3, 5), message('B', 1, 0, 0), message('l', 1, 64, 7)), ""},
		{"body at the bound", message('l', 1, 8, MaxMessage), ""},
		{"body over the bound", message('l', 1, 8, MaxMessage+1), "body"},
		{"second message over the bound", cat(message('l', 1, 8, 8), message('l', 1, 8, 1<<30)), "body"},
		{"header fields over the bound", message('l', 1, maxFields+1, 0), "header fields"},
		{"bad endianness", message('x', 1, 8, 8), "endianness"},
		{"bad version", message('l', 2, 8, 8), "version"},
		{"huge declared lengths", message('B', 1, 0xffffffff, 0xffffffff), "body"},
	}
	for _, tt := range tests {
		for _, n := range []int{1, 3, 7, 16, 17, 4096} {
			err := readAll(tt.in, n)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("%s, chunks of %d: err %v, want %q", tt.name, n, err, tt.wantErr)
			}
		}
	}
	// Unarmed (authentication is text), anything passes.
	f := &frameLimit{r: bytes.NewReader([]byte("OK 1234\r\n" + strings.Repeat("x", 100)))}
	if _, err := io.Copy(io.Discard, f); err != nil {
		t.Fatalf("unarmed: %v", err)
	}
}

// FuzzFrameLimit: never panics, and the verdict does not depend on how
// the stream is cut into reads.
func FuzzFrameLimit(f *testing.F) {
	f.Add(message('l', 1, 40, 100), 3)
	f.Add(message('B', 1, maxFields+1, 0), 1)
	f.Add(append(message('l', 1, 0, 0), message('l', 1, 8, MaxMessage+1)...), 5)
	f.Add([]byte("garbage that is no message at all"), 2)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		if n <= 0 || n > 1<<16 {
			n = 1
		}
		whole, cut := readAll(b, len(b)+1), readAll(b, n)
		if (whole == nil) != (cut == nil) {
			t.Fatalf("whole: %v; in chunks of %d: %v", whole, n, cut)
		}
	})
}
