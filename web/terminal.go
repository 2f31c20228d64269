package web

import (
	"net/http"

	"github.com/cubepod/deskd/term"
)

// terminalWS serves ttyd's protocol on /terminal/ws (subprotocol "tty").
// ?session=<id> reattaches (and asks for the id in the preferences, which
// deskd's page uses to reconnect); ?readonly=1, or a view-scope token,
// makes the viewer read-only.
func (s *Server) terminalWS(w http.ResponseWriter, r *http.Request) {
	if !s.checkWS(w, r) {
		return
	}
	if s.cfg.Terminal == nil {
		http.Error(w, "terminal not configured", http.StatusServiceUnavailable)
		return
	}
	claims, _ := ClaimsFrom(r.Context())
	q := r.URL.Query()
	_, announce := q["session"]
	opts := term.ServeOptions{
		Session:  q.Get("session"),
		Announce: announce,
		ReadOnly: claims.ReadOnly() || q.Get("readonly") == "1",
		// A view-only token may watch a session, never start a shell.
		NoCreate: claims.ReadOnly(),
		OnStart: func(id string) {
			s.logAction("terminal", map[string]any{"op": "open", "session": id, "recorded": s.cfg.Terminal.Recording()})
		},
	}
	if opts.NoCreate && !s.cfg.Terminal.Has(opts.Session) {
		http.Error(w, "a view-only token may only attach to an existing terminal session (?session=ID)", http.StatusForbidden)
		return
	}
	// Output frames (term.FrameSize at most) go out in one write each,
	// header and payload together.
	c, ctx, done, err := s.upgrade(w, r, wsOptions{subprotocols: []string{"tty"}, readLimit: term.MaxMessage, ping: true,
		writeBuffer: term.FrameSize + 16})
	if err != nil {
		return
	}
	defer done()
	if err := s.cfg.Terminal.Serve(ctx, wsConn{c}, opts); err != nil {
		s.log.Debug("terminal viewer ended", "err", err)
	}
}
