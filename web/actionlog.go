package web

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/cubepod/deskd/computer"
	"github.com/cubepod/deskd/record"
)

// The action log (record.Actions): what agents and people did, on the
// recordings' clock. Server.actions is the log being written, or nil.

// logAction appends an event to the action log, if one is being written.
func (s *Server) logAction(kind string, fields map[string]any) {
	if a := s.actions.Load(); a != nil {
		a.Log(kind, fields)
	}
}

// startActions starts an action log unless one runs.
func (s *Server) startActions() error {
	s.actionsMu.Lock()
	defer s.actionsMu.Unlock()
	if s.actions.Load() != nil {
		return nil
	}
	f, err := s.cfg.Recordings.Create(record.ActionLog)
	if err != nil {
		return err
	}
	s.actions.Store(record.NewActions(f))
	s.log.Info("action log started", "id", f.ID)
	return nil
}

// stopActions finishes the action log, if one runs.
func (s *Server) stopActions() {
	s.actionsMu.Lock()
	defer s.actionsMu.Unlock()
	if a := s.actions.Swap(nil); a != nil {
		a.Close()
	}
}

// logComputer logs a run of computer-use actions.
func (s *Server) logComputer(who string, plan computer.Plan, err error) {
	if s.actions.Load() == nil {
		return
	}
	f := map[string]any{"agent": who, "actions": plan.Logged(), "ok": err == nil}
	if err != nil {
		f["error"] = err.Error()
	}
	s.logAction("computer", f)
}

// logCDP logs an agent's command that changes a page: the method, the
// target, and what says where it went (a URL, an input event's type and
// place, a key); typed text by its length only.
func (s *Server) logCDP(method, target string, params json.RawMessage) {
	if s.actions.Load() == nil {
		return
	}
	var p struct {
		URL    string   `json:"url"`
		Type   string   `json:"type"`
		X      *float64 `json:"x"`
		Y      *float64 `json:"y"`
		Button string   `json:"button"`
		Key    string   `json:"key"`
		Text   string   `json:"text"`
	}
	json.Unmarshal(params, &p)
	f := map[string]any{"method": method, "target": target}
	for k, v := range map[string]string{"url": p.URL, "type": p.Type, "button": p.Button, "key": p.Key} {
		if v != "" {
			f[k] = v
		}
	}
	if p.X != nil && p.Y != nil {
		f["x"], f["y"] = *p.X, *p.Y
	}
	if p.Text != "" {
		f["text_bytes"] = len(p.Text)
	}
	s.logAction("cdp", f)
}

// takeoverQuiet ends a person's burst of input on the desktop.
const takeoverQuiet = 2 * time.Second

// takeover follows bursts of a person's desktop input for the log.
type takeover struct {
	mu     sync.Mutex
	active bool
	first  time.Time
	last   time.Time
	timer  *time.Timer
	closed bool
}

// viewerInput is a person's noVNC input (pointer or key).
func (s *Server) viewerInput() {
	s.human.note()
	if s.actions.Load() == nil {
		return
	}
	t := &s.takeover
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	now := time.Now()
	t.last = now
	if !t.active {
		t.active, t.first = true, now
		s.logAction("takeover", map[string]any{"phase": "start"})
	}
	if t.timer == nil {
		t.timer = time.AfterFunc(takeoverQuiet, s.takeoverEnd)
	} else {
		t.timer.Reset(takeoverQuiet)
	}
}

// takeoverEnd logs the end of a burst (the timer's goroutine).
func (s *Server) takeoverEnd() {
	t := &s.takeover
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.active || time.Since(t.last) < takeoverQuiet { // input came since the timer fired
		return
	}
	t.active = false
	s.logAction("takeover", map[string]any{"phase": "end", "first_input": t.first.UTC().Format(time.RFC3339Nano),
		"last_input": t.last.UTC().Format(time.RFC3339Nano)})
}

// closeTakeover stops the burst timer (Server.Close).
func (s *Server) closeTakeover() {
	t := &s.takeover
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
	}
}
