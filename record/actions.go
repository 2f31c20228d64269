package record

import (
	"encoding/json"
	"sync"
	"time"
)

// Actions writes the action log, one JSON object a line, on the wall
// clock the other recordings use:
//
//	{"t": 12.345678, "time": "2026-12-07T12:00:12.345678Z", "kind": KIND, ...}
//
// t is seconds since the log started (its first line, kind "start").
// Kinds: "computer" (computer-use actions: what, where, the result),
// "mcp" (a tool call), "cdp" (an agent's command that changes a page),
// "takeover" (a person's noVNC input: phase "start" at the first input of
// a burst, "end" 2 s after its last), "file" (upload, download),
// "terminal" (a session opened). Its methods are safe for concurrent use
// and never fail the caller.
type Actions struct {
	f     *File
	start time.Time

	mu     sync.Mutex
	closed bool
}

// MaxField bounds a string field of an event.
const MaxField = 1024

// NewActions starts an action log in f.
func NewActions(f *File) *Actions {
	a := &Actions{f: f, start: time.Now()}
	a.Log("start", map[string]any{"version": 1})
	return a
}

// ID is the log's id.
func (a *Actions) ID() string { return a.f.ID }

// Log appends one event; string fields are cut to MaxField bytes.
func (a *Actions) Log(kind string, fields map[string]any) {
	now := time.Now()
	ev := make(map[string]any, len(fields)+3)
	for k, v := range fields {
		if s, ok := v.(string); ok && len(s) > MaxField {
			v = s[:MaxField] + "…"
		}
		ev[k] = v
	}
	ev["t"] = float64(now.Sub(a.start).Microseconds()) / 1e6
	ev["time"] = now.UTC().Format(time.RFC3339Nano)
	ev["kind"] = kind
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.f.Write(append(b, '\n'))
}

// Close finishes the log.
func (a *Actions) Close() error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	return a.f.Close()
}
