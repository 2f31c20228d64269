package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// wsConn adapts a WebSocket to the message-oriented Conn of term (binary
// messages out; text or binary accepted in, as ttyd does).
type wsConn struct{ c *websocket.Conn }

func (w wsConn) Read(ctx context.Context) ([]byte, error) {
	_, b, err := w.c.Read(ctx)
	return b, err
}

func (w wsConn) Write(ctx context.Context, b []byte) error {
	return w.c.Write(ctx, websocket.MessageBinary, b)
}

func (w wsConn) Close(code int, reason string) error {
	return w.c.Close(websocket.StatusCode(code), reason)
}

func (w wsConn) CloseNow() error { return w.c.CloseNow() }

// checkOrigin admits a WebSocket upgrade from the page's own origin: the
// Origin's host must be the request's Host, the X-Forwarded-Host a gateway
// set, or one of --allow-origin (host or scheme://host; "*" for any).
// Requests without Origin are not from a browser page and pass.
func checkOrigin(r *http.Request, allow []string) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" {
		return fmt.Errorf("bad Origin %q", o)
	}
	for _, h := range []string{r.Host, firstValue(r.Header.Get("X-Forwarded-Host"))} {
		if h != "" && strings.EqualFold(u.Host, h) {
			return nil
		}
	}
	for _, a := range allow {
		if a == "*" || strings.EqualFold(a, u.Host) || strings.EqualFold(a, u.Scheme+"://"+u.Host) {
			return nil
		}
	}
	return fmt.Errorf("origin %q may not open a WebSocket here", o)
}

// upgrade checks the origin and accepts a WebSocket. It returns a context
// that ends with the request or at Close, and a done func to call when
// the connection is finished.
func (s *Server) upgrade(w http.ResponseWriter, r *http.Request, subprotocols []string, readLimit int64) (*websocket.Conn, context.Context, func(), error) {
	if err := checkOrigin(r, s.cfg.AllowOrigins); err != nil {
		s.log.Warn("websocket refused", "path", r.URL.Path, "err", err)
		forbid(w)
		return nil, nil, nil, err
	}
	if !s.handlers.TryAdd() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return nil, nil, nil, errShuttingDown
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: subprotocols,
		// Origin was checked above, with the gateway's forwarding in mind.
		InsecureSkipVerify: true,
	})
	if err != nil {
		s.handlers.Done()
		return nil, nil, nil, err
	}
	c.SetReadLimit(readLimit)
	ctx, cancel := context.WithCancel(s.base)
	stop := context.AfterFunc(r.Context(), cancel)
	release := s.sessions.hold(sessionKeyFrom(r), time.Now())
	done := func() {
		release()
		stop()
		cancel()
		c.CloseNow()
		s.handlers.Done()
	}
	return c, ctx, done, nil
}
