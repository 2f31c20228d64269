// Package bridge is deskd's RFB (VNC) server: the handshake, the client
// messages, the encoders and a per-client update loop. It serves any
// net.Conn (web adapts a WebSocket) and captures from a Screen (x11
// implements it; tests use an in-memory one). References are to RFC 6143
// and, for extensions, the community "RFB Protocol" document (rfbproto).
package bridge

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Protocol versions (RFC 6143 §7.1.1): 12 bytes "RFB 003.00x\n".
const (
	version33 = "RFB 003.003\n"
	version37 = "RFB 003.007\n"
	version38 = "RFB 003.008\n"
)

// Security types (§7.1.2, §7.2).
const (
	SecNone    = 1
	SecVNCAuth = 2
)

// Client-to-server message types (§7.5, rfbproto).
const (
	msgSetPixelFormat    = 0   // u8 type, 3 pad, PIXEL_FORMAT (16)
	msgSetEncodings      = 2   // u8 type, 1 pad, u16 n, s32 × n
	msgFBUpdateRequest   = 3   // u8 type, u8 incremental, u16 x, y, w, h
	msgKeyEvent          = 4   // u8 type, u8 down, 2 pad, u32 keysym
	msgPointerEvent      = 5   // u8 type, u8 button-mask, u16 x, y
	msgClientCutText     = 6   // u8 type, 3 pad, s32 length (<0: extended clipboard), bytes
	msgEnableContUpdates = 150 // u8 type, u8 enable, u16 x, y, w, h
	msgSetDesktopSize    = 251 // u8 type, 1 pad, u16 w, h, u8 n, 1 pad, n × SCREEN (16)
	msgFence             = 248 // u8 type, 3 pad, u32 flags, u8 length (<= 64), bytes
	msgQEMU              = 255 // u8 type, u8 subtype (0: ext key: u16 down, u32 keysym, u32 keycode)
)

// Server-to-client message types.
const (
	msgFramebufferUpdate = 0   // u8 type, 1 pad, u16 n-rects, then rectangles
	msgBell              = 2   // u8 type
	msgServerCutText     = 3   // u8 type, 3 pad, u32 length, Latin-1 text
	msgEndOfContUpdates  = 150 // u8 type
	msgServerFence       = 248 // as the client's
)

// Encodings (§7.7, rfbproto "Encodings").
const (
	EncRaw      = 0
	EncCopyRect = 1
	EncZlib     = 6
	EncTight    = 7
	EncZRLE     = 16
	// EncH264 is Open H.264 as noVNC 1.7 reads it: u32 length, u32 flags
	// (bit 0 reset this rectangle's decoder, bit 1 reset all), then length
	// bytes of Annex-B, whole pictures; decoders are kept per rectangle.
	EncH264 = 50

	EncDesktopSize         = -223
	EncLastRect            = -224
	EncCursor              = -239
	EncExtendedDesktopSize = -308
	EncQEMUExtKey          = -258
	EncFence               = -312
	EncContinuousUpdates   = -313
	EncExtendedClipboard   = -1063131698 // 0xC0A1E5CE as s32

	encJPEGQuality0  = -32 // .. -23: JPEG quality level 0..9
	encCompressLevel = -256
)

// Bounds on client input.
const (
	MaxEncodings   = 512
	MaxCutText     = 1 << 20 // longer clipboard text is read, dropped and logged (TigerVNC's default is 256 KiB)
	MaxFence       = 64
	MaxScreens     = 16
	MaxDesktopSize = 8192
)

// PixelFormat is PIXEL_FORMAT (§7.4): u8 bpp, u8 depth, u8 big-endian,
// u8 true-colour, u16 red/green/blue max, u8 red/green/blue shift, 3 pad.
type PixelFormat struct {
	BPP, Depth                      uint8
	BigEndian, TrueColour           bool
	RedMax, GreenMax, BlueMax       uint16
	RedShift, GreenShift, BlueShift uint8
}

// ServerFormat is the X screen's own layout: 32 bpp little-endian words
// 0x00RRGGBB, i.e. bytes B, G, R, X.
var ServerFormat = PixelFormat{BPP: 32, Depth: 24, TrueColour: true,
	RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 16, GreenShift: 8, BlueShift: 0}

func (pf PixelFormat) marshal() []byte {
	b := make([]byte, 16)
	b[0], b[1] = pf.BPP, pf.Depth
	if pf.BigEndian {
		b[2] = 1
	}
	if pf.TrueColour {
		b[3] = 1
	}
	binary.BigEndian.PutUint16(b[4:], pf.RedMax)
	binary.BigEndian.PutUint16(b[6:], pf.GreenMax)
	binary.BigEndian.PutUint16(b[8:], pf.BlueMax)
	b[10], b[11], b[12] = pf.RedShift, pf.GreenShift, pf.BlueShift
	return b
}

func parsePixelFormat(b []byte) PixelFormat {
	return PixelFormat{BPP: b[0], Depth: b[1], BigEndian: b[2] != 0, TrueColour: b[3] != 0,
		RedMax: binary.BigEndian.Uint16(b[4:]), GreenMax: binary.BigEndian.Uint16(b[6:]), BlueMax: binary.BigEndian.Uint16(b[8:]),
		RedShift: b[10], GreenShift: b[11], BlueShift: b[12]}
}

// validate accepts the true-colour formats a viewer can ask for.
func (pf PixelFormat) validate() error {
	switch pf.BPP {
	case 8, 16, 32:
	default:
		return fmt.Errorf("%w: %d bits per pixel", ErrProtocol, pf.BPP)
	}
	if !pf.TrueColour {
		return fmt.Errorf("%w: colour-map pixel formats are not supported", ErrProtocol)
	}
	for _, c := range []struct {
		max   uint16
		shift uint8
	}{{pf.RedMax, pf.RedShift}, {pf.GreenMax, pf.GreenShift}, {pf.BlueMax, pf.BlueShift}} {
		if c.max == 0 || c.max&(c.max+1) != 0 || int(c.shift)+bitLen(c.max) > int(pf.BPP) {
			return fmt.Errorf("%w: channel max %d shift %d does not fit %d bpp", ErrProtocol, c.max, c.shift, pf.BPP)
		}
	}
	return nil
}

func bitLen(v uint16) int {
	n := 0
	for ; v != 0; v >>= 1 {
		n++
	}
	return n
}

// ErrProtocol marks a malformed or out-of-bounds client message.
var ErrProtocol = errors.New("rfb: protocol error")

// Rect is a rectangle in framebuffer coordinates.
type Rect struct{ X, Y, W, H int }

func (r Rect) Empty() bool { return r.W <= 0 || r.H <= 0 }

// continues reports whether r lies right after run in the same row (the
// same rows, starting where run ends): the two make one rectangle.
func (r Rect) continues(run Rect) bool { return r.Y == run.Y && r.H == run.H && r.X == run.X+run.W }

// Intersect returns the overlap of r and o.
func (r Rect) Intersect(o Rect) Rect {
	x0, y0 := max(r.X, o.X), max(r.Y, o.Y)
	x1, y1 := min(r.X+r.W, o.X+o.W), min(r.Y+r.H, o.Y+o.H)
	if x1 <= x0 || y1 <= y0 {
		return Rect{}
	}
	return Rect{x0, y0, x1 - x0, y1 - y0}
}

// ClientMessage is one parsed client message.
type ClientMessage struct {
	Type        uint8
	PixelFormat PixelFormat   // SetPixelFormat
	Encodings   []int32       // SetEncodings
	Incremental bool          // FramebufferUpdateRequest, EnableContinuousUpdates (enable)
	Rect        Rect          // FramebufferUpdateRequest, EnableContinuousUpdates
	Down        bool          // KeyEvent, QEMU ext key
	Keysym      uint32        // KeyEvent, QEMU ext key
	Keycode     uint32        // QEMU ext key (XT scancode)
	Buttons     uint8         // PointerEvent
	X, Y        int           // PointerEvent
	Text        []byte        // ClientCutText (Latin-1), or the extended clipboard payload
	Extended    bool          // ClientCutText with a negative length
	Dropped     int           // ClientCutText over MaxCutText: its length (the bytes were read and discarded)
	Flags       uint32        // Fence
	Payload     []byte        // Fence
	Screens     []ScreenEntry // SetDesktopSize
	W, H        int           // SetDesktopSize
}

// ScreenEntry is SCREEN in ExtendedDesktopSize/SetDesktopSize.
type ScreenEntry struct {
	ID         uint32
	X, Y, W, H uint16
	Flags      uint32
}

// readChunk is the step in which readChunked grows its buffer.
const readChunk = 64 << 10

// readChunked reads exactly n bytes, allocating as they arrive rather
// than n up front, so a length field alone cannot claim memory.
func readChunked(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(n, readChunk))
	for len(b) < n {
		k := min(n-len(b), max(readChunk, len(b))) // at most doubles
		b = slices.Grow(b, k)
		if _, err := io.ReadFull(r, b[len(b):len(b)+k]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		b = b[:len(b)+k]
	}
	return b, nil
}

// ReadClientMessage reads one client message, refusing anything out of
// bounds before allocating for it.
func ReadClientMessage(r io.Reader) (ClientMessage, error) {
	var t [1]byte
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return ClientMessage{}, err
	}
	m := ClientMessage{Type: t[0]}
	read := func(n int) ([]byte, error) {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	be := binary.BigEndian
	switch m.Type {
	case msgSetPixelFormat:
		b, err := read(19)
		if err != nil {
			return m, err
		}
		m.PixelFormat = parsePixelFormat(b[3:])
		if err := m.PixelFormat.validate(); err != nil {
			return m, err
		}
	case msgSetEncodings:
		b, err := read(3)
		if err != nil {
			return m, err
		}
		n := int(be.Uint16(b[1:]))
		if n > MaxEncodings {
			return m, fmt.Errorf("%w: %d encodings (max %d)", ErrProtocol, n, MaxEncodings)
		}
		e, err := read(4 * n)
		if err != nil {
			return m, err
		}
		m.Encodings = make([]int32, n)
		for i := range m.Encodings {
			m.Encodings[i] = int32(be.Uint32(e[4*i:]))
		}
	case msgFBUpdateRequest, msgEnableContUpdates:
		b, err := read(9)
		if err != nil {
			return m, err
		}
		m.Incremental = b[0] != 0
		m.Rect = Rect{int(be.Uint16(b[1:])), int(be.Uint16(b[3:])), int(be.Uint16(b[5:])), int(be.Uint16(b[7:]))}
	case msgKeyEvent:
		b, err := read(7)
		if err != nil {
			return m, err
		}
		m.Down, m.Keysym = b[0] != 0, be.Uint32(b[3:])
	case msgPointerEvent:
		b, err := read(5)
		if err != nil {
			return m, err
		}
		m.Buttons, m.X, m.Y = b[0], int(be.Uint16(b[1:])), int(be.Uint16(b[3:]))
	case msgClientCutText:
		b, err := read(7)
		if err != nil {
			return m, err
		}
		n := int32(be.Uint32(b[3:]))
		if n < 0 {
			m.Extended, n = true, -n
		}
		if n < 0 { // -MinInt32 stays negative
			return m, fmt.Errorf("%w: cut text length %d", ErrProtocol, n)
		}
		if int(n) > MaxCutText {
			// As TigerVNC: skip it and go on; a viewer that copied a
			// big text stays connected. Nothing is kept of it.
			m.Dropped = int(n)
			if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return m, err
			}
			return m, nil
		}
		// The length is the viewer's word only: the buffer grows with
		// the bytes that actually arrive.
		if m.Text, err = readChunked(r, int(n)); err != nil {
			return m, err
		}
	case msgFence:
		b, err := read(8)
		if err != nil {
			return m, err
		}
		m.Flags = be.Uint32(b[3:])
		n := int(b[7])
		if n > MaxFence {
			return m, fmt.Errorf("%w: fence payload of %d bytes (max %d)", ErrProtocol, n, MaxFence)
		}
		if m.Payload, err = read(n); err != nil {
			return m, err
		}
	case msgSetDesktopSize:
		b, err := read(7)
		if err != nil {
			return m, err
		}
		m.W, m.H = int(be.Uint16(b[1:])), int(be.Uint16(b[3:]))
		n := int(b[5])
		if n == 0 || n > MaxScreens {
			return m, fmt.Errorf("%w: %d screens", ErrProtocol, n)
		}
		s, err := read(16 * n)
		if err != nil {
			return m, err
		}
		for i := range n {
			e := s[16*i:]
			m.Screens = append(m.Screens, ScreenEntry{be.Uint32(e), be.Uint16(e[4:]), be.Uint16(e[6:]), be.Uint16(e[8:]), be.Uint16(e[10:]), be.Uint32(e[12:])})
		}
		if m.W == 0 || m.H == 0 || m.W > MaxDesktopSize || m.H > MaxDesktopSize {
			return m, fmt.Errorf("%w: desktop size %dx%d", ErrProtocol, m.W, m.H)
		}
	case msgQEMU:
		b, err := read(1)
		if err != nil {
			return m, err
		}
		if b[0] != 0 {
			return m, fmt.Errorf("%w: QEMU submessage %d", ErrProtocol, b[0])
		}
		e, err := read(10)
		if err != nil {
			return m, err
		}
		m.Down, m.Keysym, m.Keycode = be.Uint16(e) != 0, be.Uint32(e[2:]), be.Uint32(e[6:])
	default:
		return m, fmt.Errorf("%w: unknown message type %d", ErrProtocol, m.Type)
	}
	return m, nil
}
