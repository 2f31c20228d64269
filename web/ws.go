package web

import (
	"bufio"
	"context"
	"fmt"
	"net"
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

// checkWS refuses, before anything with side effects runs, a request that
// is not a WebSocket upgrade or comes from a page of another origin.
func (s *Server) checkWS(w http.ResponseWriter, r *http.Request) bool {
	if !isUpgrade(r) {
		http.Error(w, "WebSocket only", http.StatusBadRequest)
		return false
	}
	if err := checkOrigin(r, s.cfg.AllowOrigins); err != nil {
		s.log.Warn("websocket refused", "path", r.URL.Path, "err", err)
		forbid(w)
		return false
	}
	return true
}

// wsOptions say how a WebSocket is accepted and kept.
type wsOptions struct {
	subprotocols []string
	readLimit    int64
	// ping makes deskd ping the peer every cfg.WSPing, so proxies that
	// cut idle connections keep it, and a peer that stopped answering
	// is dropped. The CDP relay pings by itself.
	ping bool
	// writeBuffer, when set, is the size of the connection's write
	// buffer (net/http hands a hijacked connection a 4 KiB one). The
	// WebSocket library writes a frame's header into it, then the
	// payload: a frame that does not fit goes out in two writes.
	writeBuffer int
}

// bigWriter hands the WebSocket library, at the hijack, a write buffer of
// its own size instead of net/http's 4 KiB.
type bigWriter struct {
	http.ResponseWriter
	size int
}

func (b bigWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(b.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	// net/http flushed and reset its writer for the hijack: nothing is
	// lost by writing through another one from here on.
	return c, bufio.NewReadWriter(rw.Reader, bufio.NewWriterSize(c, b.size)), nil
}

func (b bigWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// upgrade accepts a WebSocket whose request passed checkWS (every route
// calls it first, before any side effect). It returns a context that ends
// with the request or at Close, and a done func to call when the
// connection is finished. A connection under a panel token ends with
// close code 1008 when the token expires.
func (s *Server) upgrade(w http.ResponseWriter, r *http.Request, o wsOptions) (*websocket.Conn, context.Context, func(), error) {
	if !s.handlers.TryAdd() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return nil, nil, nil, errShuttingDown
	}
	if o.writeBuffer > 0 {
		w = bigWriter{ResponseWriter: w, size: o.writeBuffer}
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: o.subprotocols,
		// checkWS checked Origin, with the gateway's forwarding in mind.
		InsecureSkipVerify: true,
	})
	if err != nil {
		s.handlers.Done()
		return nil, nil, nil, err
	}
	c.SetReadLimit(o.readLimit)
	s.idle.add()
	ctx, cancel := context.WithCancel(s.base)
	stop := context.AfterFunc(r.Context(), cancel)
	release := s.sessions.hold(sessionKeyFrom(r), time.Now())
	var exp time.Time
	if cl, ok := ClaimsFrom(r.Context()); ok && cl.Exp != 0 {
		exp = cl.ExpiresAt()
	}
	ping := time.Duration(0)
	if o.ping {
		ping = s.cfg.WSPing
	}
	kept := make(chan struct{})
	go func() { // ends with ctx, which done cancels
		defer close(kept)
		keep(ctx, c, exp, ping)
	}()
	done := func() {
		release()
		stop()
		cancel()
		<-kept
		c.CloseNow()
		s.idle.done()
		s.handlers.Done()
	}
	return c, ctx, done, nil
}

// Close codes deskd ends a WebSocket with.
const (
	closeTokenExpired = websocket.StatusPolicyViolation // 1008
	closeNoPong       = websocket.StatusGoingAway       // 1001
)

// keep pings c every ping (when ping > 0) and closes it when a pong does
// not come within two more, or with 1008 when exp (when set) passes.
func keep(ctx context.Context, c *websocket.Conn, exp time.Time, ping time.Duration) {
	var expired <-chan time.Time
	if !exp.IsZero() {
		t := time.NewTimer(time.Until(exp))
		defer t.Stop()
		expired = t.C
	}
	var tick <-chan time.Time
	if ping > 0 {
		t := time.NewTicker(ping)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-expired:
			closeSoon(c, closeTokenExpired, "panel token expired")
			return
		case <-tick:
			pctx, cancel := context.WithTimeout(ctx, 2*ping) // a pong may queue behind a large update
			err := c.Ping(pctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				closeSoon(c, closeNoPong, "no answer to ping")
				return
			}
		}
	}
}

// closeSoon sends a close frame with code and reason, then closes the
// connection without waiting long for the peer's answer.
func closeSoon(c *websocket.Conn, code websocket.StatusCode, reason string) {
	done := make(chan struct{})
	go func() { // ends when Close returns; CloseNow below makes that quick
		defer close(done)
		c.Close(code, reason)
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		c.CloseNow()
		<-done
	}
}
