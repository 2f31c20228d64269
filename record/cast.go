package record

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"time"
)

// Cast writes a terminal session as asciicast v2
// (https://docs.asciinema.org/manual/asciicast/v2/): a header line
//
//	{"version": 2, "width": COLS, "height": ROWS, "timestamp": UNIX, "title": ..., "env": {...}}
//
// then one event a line, seconds since the start:
//
//	[1.234567, "o", "output"]   what the terminal showed
//	[1.234567, "i", "input"]    what was typed (only when asked: keys can be passwords)
//	[1.234567, "r", "80x24"]    a resize
//
// Event data is a JSON string: output that ends inside a UTF-8 sequence
// keeps its tail for the next event, and invalid bytes become U+FFFD.
// Its methods are safe for concurrent use and never fail the session:
// once the file fails, events are dropped.
type Cast struct {
	f     *File
	input bool

	mu    sync.Mutex
	start time.Time
	tail  []byte // the start of a UTF-8 sequence the last output ended in
	line  bytes.Buffer
}

// NewCast starts a recording of a cols x rows terminal in f; input
// records keystrokes too.
func NewCast(f *File, cols, rows int, title string, input bool) *Cast {
	c := &Cast{f: f, input: input, start: time.Now()}
	h := map[string]any{"version": 2, "width": cols, "height": rows, "timestamp": c.start.Unix(),
		"env": map[string]string{"TERM": "xterm-256color"}}
	if title != "" {
		h["title"] = title
	}
	b, _ := json.Marshal(h)
	f.Write(append(b, '\n'))
	return c
}

// ID is the recording's id.
func (c *Cast) ID() string { return c.f.ID }

// Output records what the terminal showed.
func (c *Cast) Output(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tail) > 0 {
		p = append(c.tail, p...)
		c.tail = nil
	}
	// Keep an incomplete sequence at the end for the next output.
	if cut := incompleteTail(p); cut > 0 {
		c.tail = append([]byte(nil), p[len(p)-cut:]...)
		p = p[:len(p)-cut]
	}
	if len(p) > 0 {
		c.event("o", p)
	}
}

// Input records what was typed, if the recording takes input.
func (c *Cast) Input(p []byte) {
	if !c.input {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.event("i", p)
}

// Resize records a new size.
func (c *Cast) Resize(cols, rows int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.event("r", []byte(strconv.Itoa(cols)+"x"+strconv.Itoa(rows)))
}

// Close writes what is left and finishes the file.
func (c *Cast) Close() error {
	c.mu.Lock()
	if len(c.tail) > 0 {
		c.event("o", c.tail)
		c.tail = nil
	}
	c.mu.Unlock()
	return c.f.Close()
}

// event writes one line; callers hold c.mu.
func (c *Cast) event(kind string, data []byte) {
	c.line.Reset()
	c.line.WriteByte('[')
	c.line.WriteString(strconv.FormatFloat(time.Since(c.start).Seconds(), 'f', 6, 64))
	c.line.WriteString(`, "`)
	c.line.WriteString(kind)
	c.line.WriteString(`", `)
	enc := json.NewEncoder(&c.line)
	enc.SetEscapeHTML(false)
	enc.Encode(string(data)) // invalid UTF-8 becomes U+FFFD; ends with '\n'
	c.line.Truncate(c.line.Len() - 1)
	c.line.WriteString("]\n")
	c.f.Write(c.line.Bytes())
}

// incompleteTail is how many bytes at the end of p begin a UTF-8
// sequence that p does not finish (0-3).
func incompleteTail(p []byte) int {
	for n := 1; n <= 3 && n <= len(p); n++ {
		b := p[len(p)-n]
		if b < 0x80 {
			return 0 // ASCII: nothing pending
		}
		if b >= 0xC0 { // a lead byte: complete if it has all its continuation bytes
			if need := seqLen(b); need > n {
				return n
			}
			return 0
		}
	}
	return 0
}

func seqLen(b byte) int {
	switch {
	case b >= 0xF0:
		return 4
	case b >= 0xE0:
		return 3
	default:
		return 2
	}
}
