// Package term serves PTY terminal sessions over ttyd's wire protocol.
// Sessions outlive connections, can have several viewers (read-write and
// read-only) and keep a bounded scrollback that is replayed on reattach.
// The protocol works over any Conn; the WebSocket is an adapter in web.
//
// Wire format (ttyd, subprotocol "tty", one command byte per message):
//
//	client → server
//	  first message   JSON {"AuthToken":string,"columns":int,"rows":int}, no command byte
//	  '0' INPUT        '0' + bytes for the PTY
//	  '1' RESIZE       '1' + JSON {"columns":int,"rows":int}
//	  '2' PAUSE        '2'            stop sending output
//	  '3' RESUME       '3'            send output again
//	server → client
//	  '0' OUTPUT       '0' + bytes from the PTY
//	  '1' SET_TITLE    '1' + window title
//	  '2' PREFERENCES  '2' + JSON object of client options
package term

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Client → server commands.
const (
	CmdInput  = '0'
	CmdResize = '1'
	CmdPause  = '2'
	CmdResume = '3'
)

// Server → client commands.
const (
	CmdOutput      = '0'
	CmdSetTitle    = '1'
	CmdPreferences = '2'
)

// Bounds on what a client may send.
const (
	MaxHelloLen  = 4 << 10 // the first JSON message
	MaxResizeLen = 256     // a RESIZE body
	MaxInputLen  = 1 << 20 // one INPUT message (a large paste)
	MaxMessage   = MaxInputLen + 1
	MaxColumns   = 1000
	MaxRows      = 500
	// Default size when the client sends 0 (ttyd's client never does).
	DefaultColumns = 80
	DefaultRows    = 24
)

// ErrProtocol wraps every malformed-message error; Code says how to close.
type ErrProtocol struct {
	Code   int // WebSocket close code
	Reason string
}

func (e *ErrProtocol) Error() string { return fmt.Sprintf("term: %s (close %d)", e.Reason, e.Code) }

// Close codes (RFC 6455 §7.4.1, and 4000 of our own).
const (
	CloseNormal      = 1000 // the shell exited
	CloseGoingAway   = 1001 // the server shuts down
	CloseUnsupported = 1003 // unknown command
	CloseInvalid     = 1007 // bad JSON
	ClosePolicy      = 1008 // out-of-bounds size
	CloseTooBig      = 1009
	CloseTryLater    = 1013 // too many sessions
	CloseLagging     = 4000 // the viewer fell behind the scrollback; reconnect to resync
)

func protoErr(code int, format string, a ...any) error {
	return &ErrProtocol{Code: code, Reason: fmt.Sprintf(format, a...)}
}

// Size is a terminal size in cells.
type Size struct {
	Columns int `json:"columns"`
	Rows    int `json:"rows"`
}

func (s Size) check() error {
	if s.Columns < 0 || s.Rows < 0 || s.Columns > MaxColumns || s.Rows > MaxRows {
		return protoErr(ClosePolicy, "size %dx%d out of bounds (max %dx%d)", s.Columns, s.Rows, MaxColumns, MaxRows)
	}
	return nil
}

func (s Size) orDefault() Size {
	if s.Columns == 0 {
		s.Columns = DefaultColumns
	}
	if s.Rows == 0 {
		s.Rows = DefaultRows
	}
	return s
}

// Hello is the client's first message.
type Hello struct {
	AuthToken string `json:"AuthToken"`
	Size
}

// ParseHello parses the first message.
func ParseHello(b []byte) (Hello, error) {
	if len(b) > MaxHelloLen {
		return Hello{}, protoErr(CloseTooBig, "first message of %d bytes (max %d)", len(b), MaxHelloLen)
	}
	var h Hello
	if err := strictJSON(b, &h); err != nil {
		return Hello{}, protoErr(CloseInvalid, "first message is not the JSON hello: %v", err)
	}
	if err := h.check(); err != nil {
		return Hello{}, err
	}
	h.Size = h.Size.orDefault()
	return h, nil
}

// Message is a parsed client message after the hello.
type Message struct {
	Cmd   byte
	Input []byte // CmdInput; aliases the frame
	Size  Size   // CmdResize
}

// ParseMessage parses one client message after the hello.
func ParseMessage(b []byte) (Message, error) {
	if len(b) == 0 {
		return Message{}, protoErr(CloseUnsupported, "empty message")
	}
	if len(b) > MaxMessage {
		return Message{}, protoErr(CloseTooBig, "message of %d bytes (max %d)", len(b), MaxMessage)
	}
	m := Message{Cmd: b[0]}
	body := b[1:]
	switch m.Cmd {
	case CmdInput:
		m.Input = body
	case CmdResize:
		if len(body) > MaxResizeLen {
			return Message{}, protoErr(CloseTooBig, "resize of %d bytes", len(body))
		}
		if err := strictJSON(body, &m.Size); err != nil {
			return Message{}, protoErr(CloseInvalid, "resize is not JSON {columns, rows}: %v", err)
		}
		if err := m.Size.check(); err != nil {
			return Message{}, err
		}
		if m.Size.Columns == 0 || m.Size.Rows == 0 {
			return Message{}, protoErr(ClosePolicy, "resize to %dx%d", m.Size.Columns, m.Size.Rows)
		}
	case CmdPause, CmdResume:
		if len(body) != 0 {
			return Message{}, protoErr(CloseUnsupported, "command %q with a body", m.Cmd)
		}
	default:
		// ttyd's client sends JSON only as the first message; a '{' here
		// is a second hello, which ttyd also rejects.
		return Message{}, protoErr(CloseUnsupported, "unknown command %q", m.Cmd)
	}
	return m, nil
}

// strictJSON decodes one JSON object into v: no trailing data; unknown
// fields are allowed (ttyd clients may add some).
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// Frame builds a server message: cmd followed by body.
func Frame(cmd byte, body []byte) []byte {
	f := make([]byte, 1+len(body))
	f[0] = cmd
	copy(f[1:], body)
	return f
}
