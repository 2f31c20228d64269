package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/cubepod/deskd/desktop"
)

// Probes. /healthz (and /livez) is liveness: the process serves HTTP, and
// nothing more, so a kubelet restarts deskd only when it is stuck, never
// because Chromium is restarting. /readyz is readiness: what serving
// needs works right now: the terminal manager takes sessions, and while
// the desktop runs the X connection answers and a capture works, and a
// running Chromium answers on DevTools (the supervisor's health check).

func healthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintln(w, "ok")
}

// readyTimeout bounds one readiness check (a kubelet probe's default
// timeout is 1 s; ours is set to 2 s in the manifests).
const readyTimeout = 1500 * time.Millisecond

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	problems := s.readiness(ctx)
	if len(problems) == 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, "ready")
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "problems": problems})
}

// readiness lists what does not work; empty means ready.
func (s *Server) readiness(ctx context.Context) []string {
	var problems []string
	if s.cfg.Terminal != nil && s.cfg.Terminal.Closed() {
		problems = append(problems, "terminal: closed")
	}
	if s.cfg.Stack == nil {
		return problems
	}
	st := s.cfg.Stack.Status()
	if st.Status != desktop.StatusRunning && st.Status != desktop.StatusDegraded {
		return problems // stopped or starting: nothing of the desktop to check
	}
	if st.Pids["chromium"] != 0 && st.Health != "" && st.Health != "ok" {
		problems = append(problems, "chromium: devtools: "+st.Health)
	}
	s.rfb.mu.Lock()
	screen := s.rfb.screen
	if s.rfb.display != st.Display {
		screen = nil
	}
	s.rfb.mu.Unlock()
	if screen == nil {
		return problems // no viewer has needed the X connection yet
	}
	// One check of the display at a time: a probe every few seconds
	// against a display that hangs must not pile up goroutines.
	if !s.pinging.CompareAndSwap(false, true) {
		return append(problems, "x11: an earlier check still waits for the display")
	}
	done := make(chan error, 1)
	go func() { // ends with the X connection's reply or its close
		defer s.pinging.Store(false)
		done <- screen.Ping()
	}()
	select {
	case err := <-done:
		if err != nil {
			problems = append(problems, err.Error())
		}
	case <-ctx.Done():
		problems = append(problems, "x11: display does not answer within "+readyTimeout.String())
	}
	return problems
}
