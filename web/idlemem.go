package web

import (
	"runtime/debug"
	"sync"
	"time"
)

// idleMemory gives the heap back to the OS once the last WebSocket
// (viewer, terminal, CDP agent) has been gone for a moment. The Go
// runtime would keep what a crowd of viewers left (their frames and
// buffers are garbage nobody collects while nothing allocates) until
// its forced GC two minutes on, then return it slowly; a sandbox that
// went quiet should cost a few MiB at once.
type idleMemory struct {
	mu     sync.Mutex
	n      int
	t      *time.Timer
	closed bool
	after  time.Duration
	free   func() // debug.FreeOSMemory, or a test's counter
}

func newIdleMemory(after time.Duration) *idleMemory {
	return &idleMemory{after: after, free: debug.FreeOSMemory}
}

// add counts a connection in.
func (m *idleMemory) add() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n++
	if m.t != nil {
		m.t.Stop()
		m.t = nil
	}
}

// done counts one out; the last one arms the release.
func (m *idleMemory) done() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n--
	if m.n > 0 || m.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(m.after, func() { // owned by m: stopped by add and close
		m.mu.Lock()
		fire := m.t == t && m.n == 0 && !m.closed
		m.t = nil
		m.mu.Unlock()
		if fire {
			m.free()
		}
	})
	m.t = t
}

// close disarms it for good.
func (m *idleMemory) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.t != nil {
		m.t.Stop()
		m.t = nil
	}
}
