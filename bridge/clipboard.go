package bridge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/klauspost/compress/zlib"
)

// ClipboardScreen is a Screen with a clipboard (UTF-8 text).
type ClipboardScreen interface {
	SetClipboard(text string) error
	// ClipboardChanged delivers the text when another program of the
	// screen's changes the clipboard (never for SetClipboard's own text).
	ClipboardChanged() <-chan string
}

// Extended clipboard (rfbproto "ExtendedClipboard", pseudo-encoding
// 0xC0A1E5CE): a ServerCutText/ClientCutText whose s32 length is
// negative carries -length bytes: u32 flags (formats in bits 0-15,
// actions in bits 24-31), then, by action,
//
//	caps:                   u32 maximum size per format flagged
//	request, peek, notify:  nothing
//	provide:                one zlib stream of, per format flagged in bit
//	                        order, u32 size and that many bytes (text:
//	                        UTF-8, CRLF line ends, NUL-terminated)
const (
	clipFormatText = 1 << 0
	clipCaps       = 1 << 24
	clipRequest    = 1 << 25
	clipPeek       = 1 << 26
	clipNotify     = 1 << 27
	clipProvide    = 1 << 28
	clipActions    = 0xff << 24
)

// clipState is the shared clipboard, numbered so each viewer knows
// whether it has the current text.
type clipState struct {
	text   string
	serial int
	from   *client // the viewer that set it (it is not sent back there)
}

// clipboardLoop follows the screen's clipboard.
func (s *Server) clipboardLoop(cs ClipboardScreen) {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case text, ok := <-cs.ClipboardChanged():
			if !ok {
				return
			}
			s.publishClipboard(text, nil)
		}
	}
}

// publishClipboard makes text the clipboard every viewer but from gets.
func (s *Server) publishClipboard(text string, from *client) {
	s.mu.Lock()
	s.clip = clipState{text: text, serial: s.clip.serial + 1, from: from}
	for c := range s.clients {
		if c != from {
			c.poke()
		}
	}
	s.mu.Unlock()
}

// setClipboard takes text from a viewer: to the screen and the others.
func (s *Server) setClipboard(text string, from *client) {
	if cs, ok := s.screen.(ClipboardScreen); ok {
		if err := cs.SetClipboard(text); err != nil {
			s.log.Warn("clipboard from viewer not applied", "err", err)
		}
	}
	s.publishClipboard(text, from)
}

// latin1 decodes ISO 8859-1 (ClientCutText's charset, RFC 6143 §7.5.6).
func latin1(b []byte) string {
	var sb strings.Builder
	sb.Grow(len(b))
	for _, c := range b {
		sb.WriteRune(rune(c))
	}
	return sb.String()
}

// toLatin1 encodes text for ServerCutText: what Latin-1 lacks becomes '?'.
func toLatin1(text string) []byte {
	out := make([]byte, 0, len(text))
	for _, r := range text {
		if r > 0xff {
			r = '?'
		}
		out = append(out, byte(r))
	}
	return out
}

// appendServerCutText appends ServerCutText (§7.6.4): u8 3, 3 pad, u32
// length, text; an extended one has the negated length.
func appendServerCutText(dst, payload []byte, extended bool) []byte {
	n := uint32(len(payload))
	if extended {
		n = uint32(-int32(n))
	}
	dst = append(dst, msgServerCutText, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, n)
	return append(dst, payload...)
}

// extClipCaps is the server's caps: text up to MaxCutText, every action.
func extClipCaps() []byte {
	b := binary.BigEndian.AppendUint32(nil, clipCaps|clipRequest|clipPeek|clipNotify|clipProvide|clipFormatText)
	return binary.BigEndian.AppendUint32(b, MaxCutText)
}

// extClipProvide builds a provide message body for text.
func extClipProvide(text string) []byte {
	t := strings.ReplaceAll(strings.ReplaceAll(text, "\r\n", "\n"), "\n", "\r\n") + "\x00"
	var z bytes.Buffer
	binary.Write(&z, binary.BigEndian, uint32(clipProvide|clipFormatText))
	w := zlib.NewWriter(&z)
	binary.Write(w, binary.BigEndian, uint32(len(t)))
	io.WriteString(w, t)
	w.Close()
	return z.Bytes()
}

// parseExtClip splits an extended clipboard payload into flags and the
// rest.
func parseExtClip(p []byte) (flags uint32, rest []byte, err error) {
	if len(p) < 4 {
		return 0, nil, fmt.Errorf("%w: extended clipboard message of %d bytes", ErrProtocol, len(p))
	}
	return binary.BigEndian.Uint32(p), p[4:], nil
}

// errClipTooLong marks clipboard text over MaxCutText: it is dropped
// (and logged), the viewer stays connected.
var errClipTooLong = errors.New("rfb: clipboard text too long")

// parseProvide inflates a provide message's data (at most MaxCutText
// bytes of it) and returns its text, if it has the text format.
func parseProvide(flags uint32, data []byte) (string, bool, error) {
	zr, err := zlib.NewReader(bytes.NewReader(data))
	if err != nil {
		return "", false, fmt.Errorf("%w: extended clipboard data: %v", ErrProtocol, err)
	}
	defer zr.Close()
	r := io.LimitReader(zr, MaxCutText+4*16)
	for bit := range 16 {
		f := uint32(1) << bit
		if flags&f == 0 {
			continue
		}
		var n uint32
		if err := binary.Read(r, binary.BigEndian, &n); err != nil {
			return "", false, fmt.Errorf("%w: extended clipboard size: %v", ErrProtocol, err)
		}
		if n > MaxCutText {
			return "", false, fmt.Errorf("%w: extended clipboard item of %d bytes (max %d)", errClipTooLong, n, MaxCutText)
		}
		b, err := readChunked(r, int(n)) // a size field is no reason to allocate
		if err != nil {
			return "", false, fmt.Errorf("%w: extended clipboard item: %v", ErrProtocol, err)
		}
		if f == clipFormatText {
			b = bytes.TrimSuffix(b, []byte{0})
			text := strings.ReplaceAll(string(b), "\r\n", "\n")
			if !utf8.ValidString(text) {
				text = strings.ToValidUTF8(text, "\uFFFD")
			}
			return text, true, nil
		}
	}
	return "", false, nil
}

// clipMessages appends the clipboard messages the viewer is due, given
// the shared clipboard clip, and marks them sent. Callers hold c.mu.
func (c *client) clipMessages(dst []byte, clip clipState) []byte {
	if c.viewOnly {
		return dst
	}
	if c.extClip && !c.capsSent {
		dst = appendServerCutText(dst, extClipCaps(), true)
		c.capsSent = true
	}
	if c.wantRequest { // the viewer has text for us: ask for it
		dst = appendServerCutText(dst, binary.BigEndian.AppendUint32(nil, clipRequest|clipFormatText), true)
		c.wantRequest = false
	}
	if c.wantProvide {
		dst = appendServerCutText(dst, extClipProvide(clip.text), true)
		c.wantProvide = false
	}
	if c.wantNotify { // answer to a peek
		f := uint32(clipNotify)
		if clip.serial > 0 {
			f |= clipFormatText
		}
		dst = appendServerCutText(dst, binary.BigEndian.AppendUint32(nil, f), true)
		c.wantNotify = false
	}
	if clip.serial != c.clipSeen {
		c.clipSeen = clip.serial
		if clip.from != c {
			if c.extClip {
				dst = appendServerCutText(dst, binary.BigEndian.AppendUint32(nil, clipNotify|clipFormatText), true)
			} else {
				dst = appendServerCutText(dst, toLatin1(clip.text), false)
			}
		}
	}
	return dst
}

// clientCutText handles ClientCutText, plain or extended.
func (c *client) clientCutText(m ClientMessage) error {
	if c.viewOnly {
		return nil
	}
	if m.Dropped > 0 {
		c.s.log.Warn("viewer clipboard text dropped", "bytes", m.Dropped, "max", MaxCutText)
		return nil
	}
	if !m.Extended {
		c.s.setClipboard(latin1(m.Text), c)
		return nil
	}
	flags, rest, err := parseExtClip(m.Text)
	if err != nil {
		return err
	}
	switch flags & clipActions {
	case clipCaps: // the viewer's own caps: every viewer we know takes text
	case clipNotify: // it has text: we owe it a request
		if flags&clipFormatText != 0 {
			c.owe(&c.wantRequest)
		}
	case clipRequest: // it wants ours
		if flags&clipFormatText != 0 {
			c.owe(&c.wantProvide)
		}
	case clipPeek: // it asks what we have
		c.owe(&c.wantNotify)
	case clipProvide:
		text, ok, err := parseProvide(flags, rest)
		if errors.Is(err, errClipTooLong) {
			c.s.log.Warn("viewer clipboard text dropped", "err", err)
			return nil
		}
		if err != nil {
			return err
		}
		if ok {
			c.s.setClipboard(text, c)
		}
	}
	return nil
}

// owe sets one of the flags the writer answers (guarded by c.mu).
func (c *client) owe(flag *bool) {
	c.mu.Lock()
	*flag = true
	c.mu.Unlock()
	c.poke()
}
