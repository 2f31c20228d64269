package a11y

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"
)

// A D-Bus message (D-Bus specification, "Message Format"):
//
//	byte    endianness ('l' little, 'B' big)
//	byte    message type
//	byte    flags
//	byte    major protocol version (1)
//	uint32  body length
//	uint32  serial
//	uint32  length of the header-field array that follows
//	...     header fields, padded to a multiple of 8 bytes
//	...     body (body length bytes)
//
// godbus reads a message whole, allocating what its header declares (up
// to 128 MiB), and an application on the bus (the agent's, say) answers
// deskd's questions: frameLimit cuts the connection at the first header
// that declares more than deskd takes.
const (
	fixedHeader = 16
	// MaxMessage bounds a message's body: a GetChildren answer of 50,000
	// children is about 3 MiB.
	MaxMessage = 4 << 20
	// maxFields bounds the header fields (names, paths, signature).
	maxFields = 64 << 10
)

// frameLimit passes a D-Bus byte stream through, checking each message's
// declared lengths; once armed (after authentication, which is text) it
// fails the stream at the first message over the bounds. armed is read
// when a read returns, not when it starts: godbus's reader is already
// waiting in Read when authentication ends, and the first message comes
// back through that very call.
type frameLimit struct {
	r     io.Reader
	armed atomic.Bool
	hdr   [fixedHeader]byte
	have  int   // bytes of hdr collected
	left  int64 // bytes of the current message still to pass after hdr
	err   error
}

func (f *frameLimit) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.r.Read(p)
	if f.armed.Load() {
		if ferr := f.scan(p[:n]); ferr != nil {
			f.err = ferr
			return 0, ferr
		}
	}
	return n, err
}

// scan follows message boundaries through b.
func (f *frameLimit) scan(b []byte) error {
	for len(b) > 0 {
		if f.left > 0 {
			k := min(int64(len(b)), f.left)
			f.left -= k
			b = b[k:]
			continue
		}
		k := copy(f.hdr[f.have:], b)
		f.have += k
		b = b[k:]
		if f.have < fixedHeader {
			return nil
		}
		f.have = 0
		total, err := messageLength(f.hdr[:])
		if err != nil {
			return err
		}
		f.left = total - fixedHeader
	}
	return nil
}

// messageLength is the whole length of the message whose fixed header is
// h, or why it is refused.
func messageLength(h []byte) (int64, error) {
	var order binary.ByteOrder
	switch h[0] {
	case 'l':
		order = binary.LittleEndian
	case 'B':
		order = binary.BigEndian
	default:
		return 0, fmt.Errorf("a11y: d-bus message with endianness byte %#x", h[0])
	}
	if h[3] != 1 {
		return 0, fmt.Errorf("a11y: d-bus protocol version %d", h[3])
	}
	body, fields := int64(order.Uint32(h[4:])), int64(order.Uint32(h[12:]))
	if body > MaxMessage {
		return 0, fmt.Errorf("a11y: d-bus message body of %d bytes (max %d)", body, MaxMessage)
	}
	if fields > maxFields {
		return 0, fmt.Errorf("a11y: d-bus header fields of %d bytes (max %d)", fields, maxFields)
	}
	return (fixedHeader+fields+7)&^7 + body, nil
}
