package cdp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// MaxMessage is the largest CDP message relayed (a full-page screenshot
// of a long page, or a big Runtime.evaluate result, is tens of MiB).
const MaxMessage = 256 << 20

// DefaultPing is the heartbeat interval on both legs of a relay.
const DefaultPing = 20 * time.Second

// Close codes the relay sends to agents (RFC 6455 §7.4.1).
const (
	CloseBrowserGone = 1011 // the upstream connection broke: Chromium exited or crashed
	CloseHeartbeat   = 1001 // a leg stopped answering pings
)

// DialUpstream opens the DevTools WebSocket at path ("/devtools/...") on
// 127.0.0.1:port. Chromium accepts only IP or localhost Hosts and no
// foreign Origin, so neither comes from the agent.
func DialUpstream(ctx context.Context, port int, path string) (*websocket.Conn, error) {
	host := "127.0.0.1:" + strconv.Itoa(port)
	c, _, err := websocket.Dial(ctx, "ws://"+host+path, &websocket.DialOptions{
		Host: host, HTTPHeader: http.Header{},
	})
	if err != nil {
		return nil, fmt.Errorf("cdp: dial %s: %w", path, err)
	}
	c.SetReadLimit(MaxMessage)
	return c, nil
}

// Relay copies messages both ways between an agent and Chromium until
// one side closes, keeping text frames text and binary binary, streaming
// each message without holding it whole. It pings a leg that has been
// silent for ping (any inbound data counts as alive) and closes both when
// a ping goes unanswered for another ping interval. It never sends a
// message of its own. It returns why the relay ended.
//
// w, when not nil, is shown each message of at most maxInspected bytes
// (whole, before it is passed on): tab-follow's view of the agent.
func Relay(ctx context.Context, agent, upstream *websocket.Conn, ping time.Duration, w *Watcher) error {
	if ping <= 0 {
		ping = DefaultPing
	}
	agent.SetReadLimit(MaxMessage)
	upstream.SetReadLimit(MaxMessage)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	legs := [2]*leg{{name: "agent", c: agent}, {name: "chromium", c: upstream}}
	for _, l := range legs {
		l.touch()
	}
	var wg sync.WaitGroup
	ended := make(chan endReason, 3)
	wg.Add(3)
	var fromAgent, fromBrowser func([]byte)
	if w != nil {
		fromAgent, fromBrowser = w.FromAgent, w.FromBrowser
	}
	go func() { defer wg.Done(); ended <- copyMessages(ctx, legs[0], legs[1], fromAgent) }()
	go func() { defer wg.Done(); ended <- copyMessages(ctx, legs[1], legs[0], fromBrowser) }()
	go func() { defer wg.Done(); ended <- heartbeat(ctx, legs, ping) }()
	why := <-ended
	// Tell each side what happened before cancelling: a read whose
	// context ends closes its connection at once, without a close frame.
	var wc sync.WaitGroup
	for _, l := range legs {
		code, reason := why.closeFor(l)
		wc.Go(func() { l.c.Close(code, reason) })
	}
	wc.Wait()
	cancel()
	for _, l := range legs {
		l.c.CloseNow()
	}
	wg.Wait()
	return why.err
}

type leg struct {
	name string
	c    *websocket.Conn
	seen atomic.Int64 // unix nanos of the last inbound data
}

func (l *leg) touch() { l.seen.Store(time.Now().UnixNano()) }

func (l *leg) silentFor() time.Duration { return time.Since(time.Unix(0, l.seen.Load())) }

// endReason says which leg ended the relay and how.
type endReason struct {
	from   *leg // the leg that failed or closed; nil for a heartbeat miss
	status websocket.StatusCode
	reason string
	err    error
}

func (e endReason) closeFor(l *leg) (websocket.StatusCode, string) {
	switch {
	case errors.Is(e.err, context.Canceled): // the server is shutting down
		return websocket.StatusGoingAway, "server shutting down"
	case e.from == nil: // heartbeat
		return CloseHeartbeat, "heartbeat timeout"
	case l == e.from:
		return websocket.StatusNormalClosure, ""
	case e.status != -1 && e.status != websocket.StatusNoStatusRcvd && e.status != websocket.StatusAbnormalClosure:
		return e.status, e.reason // a clean close passes through
	case e.from.name == "chromium":
		return CloseBrowserGone, "browser connection lost"
	default:
		return websocket.StatusGoingAway, "agent went away"
	}
}

// copyMessages streams each message from src to dst. With inspect, a
// message of at most maxInspected bytes is read whole and shown to it
// before it goes on; a longer one is streamed past.
func copyMessages(ctx context.Context, src, dst *leg, inspect func([]byte)) endReason {
	buf := make([]byte, 32<<10)
	var head []byte
	if inspect != nil {
		head = make([]byte, maxInspected)
	}
	for {
		typ, r, err := src.c.Reader(ctx)
		if err != nil {
			return endOf(src, err)
		}
		src.touch()
		rest := io.Reader(touchReader{r, src})
		var first []byte
		if inspect != nil {
			n, err := io.ReadFull(rest, head)
			switch err {
			case io.EOF, io.ErrUnexpectedEOF: // the whole message
				inspect(head[:n])
				rest = nil
			case nil: // more follows
			default:
				return endOf(src, err)
			}
			first = head[:n]
		}
		w, err := dst.c.Writer(ctx, typ)
		if err != nil {
			return endOf(dst, err)
		}
		if len(first) > 0 {
			if _, err := w.Write(first); err != nil {
				return endOf(dst, err)
			}
		}
		if rest != nil {
			if _, err := io.CopyBuffer(errWriter{w}, rest, buf); err != nil {
				var we *writeErr
				if errors.As(err, &we) {
					return endOf(dst, err)
				}
				return endOf(src, err)
			}
		}
		if err := w.Close(); err != nil {
			return endOf(dst, err)
		}
	}
}

// touchReader marks its leg alive on every read, so a long message in
// progress counts as traffic.
type touchReader struct {
	r io.Reader
	l *leg
}

func (t touchReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.l.touch()
	}
	return n, err
}

// errWriter marks write errors, so a failed copy blames the right leg.
type errWriter struct{ w io.Writer }

func (e errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		err = &writeErr{err}
	}
	return n, err
}

type writeErr struct{ error }

func (e *writeErr) Unwrap() error { return e.error }

func endOf(l *leg, err error) endReason {
	st := websocket.CloseStatus(err)
	var reason string
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		reason = ce.Reason
	}
	return endReason{from: l, status: st, reason: reason, err: fmt.Errorf("cdp relay: %s: %w", l.name, err)}
}

// heartbeat pings a leg that has been silent for ping.
func heartbeat(ctx context.Context, legs [2]*leg, ping time.Duration) endReason {
	t := time.NewTicker(ping / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return endReason{from: legs[0], status: -1, err: ctx.Err()}
		case <-t.C:
		}
		for _, l := range legs {
			if l.silentFor() < ping {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, ping)
			err := l.c.Ping(pctx)
			cancel()
			if ctx.Err() != nil {
				return endReason{from: legs[0], status: -1, err: ctx.Err()}
			}
			if err != nil {
				return endReason{status: -1, err: fmt.Errorf("cdp relay: %s missed a heartbeat: %w", l.name, err)}
			}
			l.touch()
		}
	}
}
