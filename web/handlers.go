package web

import (
	"errors"
	"sync"
)

var errShuttingDown = errors.New("web: shutting down")

// handlerGroup counts long-lived handlers (WebSockets) so Close can wait
// for them: http.Server.Shutdown does not wait for hijacked connections.
type handlerGroup struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// TryAdd registers a handler unless the group is closed.
func (g *handlerGroup) TryAdd() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *handlerGroup) Done() { g.wg.Done() }

// closeAndWait refuses new handlers and waits for the running ones.
func (g *handlerGroup) closeAndWait() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.wg.Wait()
}
