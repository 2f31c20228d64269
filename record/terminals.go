package record

import "sync/atomic"

// Terminals records terminal sessions into a Store as asciicast v2.
type Terminals struct {
	Store *Store
	// Input records keystrokes too (off by default: keys can be
	// passwords).
	Input atomic.Bool
}

// Start begins the recording of a session of cols x rows; nil when the
// store refuses (logged), and the session goes unrecorded.
func (t *Terminals) Start(session string, cols, rows int) *Cast {
	f, err := t.Store.Create(Terminal)
	if err != nil {
		t.Store.log.Warn("terminal session not recorded", "session", session, "err", err)
		return nil
	}
	t.Store.log.Info("recording terminal session", "session", session, "id", f.ID, "input", t.Input.Load())
	return NewCast(f, cols, rows, "deskd terminal "+session, t.Input.Load())
}
