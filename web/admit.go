package web

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubepod/deskd/rawconn"
)

// Admission decides which TCP connections a listener keeps, so that
// nobody without a token can lock the panel out by holding connections:
//
//   - An address is trusted once a request from it passed the panel check
//     (the gateway, after its first request); trust lapses after
//     trustTTL without one. A connection is trusted once it carried such
//     a request.
//   - An untrusted address keeps at most PerAddr connections open: past
//     that, its oldest idle connection is closed for the new one, else
//     one of its connections that has sent no request for newGrace, else
//     the new connection is closed at once.
//   - At Max open connections, idle keep-alives are reclaimed first
//     (untrusted, then trusted, oldest first), then untrusted
//     connections that have sent no request for newGrace; only when none
//     of those exist does Accept wait for a connection to close.
//     WebSockets (hijacked) and requests in progress are never closed.
//   - Refused and unauthenticated answers close their connection
//     (forbid sets Connection: close), so a 403 frees its slot at once.
//
// Wire it with Listener for the listener and ConnState and ConnContext
// on the http.Server.
type Admission struct {
	max, perAddr int

	mu      sync.Mutex
	open    map[*admConn]struct{}
	perIP   map[string]int
	trusted map[string]time.Time
	freed   chan struct{} // a token when a connection closed

	refused, evicted atomic.Int64
}

const (
	trustTTL   = 10 * time.Minute
	maxTrusted = 4096 // addresses remembered as trusted
	newGrace   = time.Second
)

// NewAdmission keeps at most max connections open, and perAddr from each
// address that has not shown a valid token (0: a quarter of max, 64 at
// most).
func NewAdmission(maxConns, perAddr int) *Admission {
	if perAddr <= 0 {
		perAddr = max(1, min(64, maxConns/4))
	}
	return &Admission{max: maxConns, perAddr: perAddr, open: map[*admConn]struct{}{}, perIP: map[string]int{},
		trusted: map[string]time.Time{}, freed: make(chan struct{}, 1)}
}

type admConn struct {
	net.Conn
	a       *Admission
	ip      string
	state   http.ConnState // under a.mu
	since   time.Time      // of the state, under a.mu
	trusted bool           // under a.mu
	// released is set by whoever takes the connection out of the books
	// first: its Close, or an eviction (a sync.Once here deadlocked: an
	// eviction under a.mu waited for a Close waiting for a.mu).
	released atomic.Bool
}

func (c *admConn) Close() error {
	if c.released.CompareAndSwap(false, true) {
		c.a.release(c)
	}
	return c.Conn.Close()
}

type admKey struct{}

// ConnState is the http.Server's ConnState hook.
func (a *Admission) ConnState(c net.Conn, st http.ConnState) {
	ac, ok := c.(*admConn)
	if !ok {
		return
	}
	a.mu.Lock()
	ac.state, ac.since = st, time.Now()
	a.mu.Unlock()
}

// ConnContext is the http.Server's ConnContext hook: requests find their
// connection through it (see trustConn).
func (a *Admission) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if ac, ok := c.(*admConn); ok {
		return context.WithValue(ctx, admKey{}, ac)
	}
	return ctx
}

// trustConn marks the request's connection and address as trusted: the
// request passed the panel check.
func trustConn(ctx context.Context) {
	ac, ok := ctx.Value(admKey{}).(*admConn)
	if !ok {
		return
	}
	a := ac.a
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	ac.trusted = true
	if _, ok := a.trusted[ac.ip]; !ok && len(a.trusted) >= maxTrusted {
		stalest, oldest := "", now
		for ip, t := range a.trusted {
			if t.Before(oldest) {
				stalest, oldest = ip, t
			}
		}
		delete(a.trusted, stalest)
	}
	a.trusted[ac.ip] = now
}

// forgetLocked takes c out of the books.
func (a *Admission) forgetLocked(c *admConn) {
	delete(a.open, c)
	if a.perIP[c.ip]--; a.perIP[c.ip] <= 0 {
		delete(a.perIP, c.ip)
	}
}

func (a *Admission) release(c *admConn) {
	a.mu.Lock()
	a.forgetLocked(c)
	a.mu.Unlock()
	select {
	case a.freed <- struct{}{}:
	default:
	}
}

// Counts reports the connections open, refused and evicted so far.
func (a *Admission) Counts() (open int, refused, evicted int64) {
	a.mu.Lock()
	open = len(a.open)
	a.mu.Unlock()
	return open, a.refused.Load(), a.evicted.Load()
}

// admit registers c, making room by the rules above; nil means c was
// refused (and closed) or done ended.
func (a *Admission) admit(c net.Conn, done <-chan struct{}) *admConn {
	ip := hostOf(c.RemoteAddr())
	for {
		now := time.Now()
		a.mu.Lock()
		t, ok := a.trusted[ip]
		trusted := ok && now.Sub(t) < trustTTL
		if !trusted && a.perIP[ip] >= a.perAddr {
			v := a.victim(ip, now)
			if v == nil {
				a.mu.Unlock()
				a.refused.Add(1)
				c.Close()
				return nil
			}
			if !a.evictLocked(v) {
				a.mu.Unlock()
				continue // closing meanwhile: its place frees at once
			}
		}
		if len(a.open) < a.max {
			ac := &admConn{Conn: c, a: a, ip: ip, state: http.StateNew, since: now}
			a.open[ac] = struct{}{}
			a.perIP[ip]++
			a.mu.Unlock()
			return ac
		}
		if v := a.victim("", now); v != nil {
			a.evictLocked(v)
			a.mu.Unlock()
			continue // evicted, or closing meanwhile: look again
		}
		a.mu.Unlock()
		// Wait for a connection to close, or for a silent one to pass
		// its grace and become reclaimable.
		wake := time.NewTimer(newGrace / 4)
		select {
		case <-a.freed:
		case <-wake.C:
		case <-done:
			wake.Stop()
			c.Close()
			return nil
		}
		wake.Stop()
	}
}

// victim picks the connection to close for room: of address ip (any
// when ""), idle ones first (untrusted before trusted), oldest first;
// then untrusted ones that have sent no request for newGrace.
func (a *Admission) victim(ip string, now time.Time) *admConn {
	var best *admConn
	rank := func(c *admConn) int {
		switch {
		case c.state == http.StateIdle && !c.trusted:
			return 3
		case c.state == http.StateIdle:
			return 2
		case c.state == http.StateNew && !c.trusted && now.Sub(c.since) >= newGrace:
			return 1
		}
		return 0
	}
	bestRank := 0
	for c := range a.open {
		if (ip != "" && c.ip != ip) || c.released.Load() {
			continue
		}
		r := rank(c)
		if r > bestRank || (r == bestRank && r > 0 && c.since.Before(best.since)) {
			best, bestRank = c, r
		}
	}
	return best
}

// evictLocked takes v out of the books and closes its socket; the HTTP
// server's goroutine for it then ends. It returns false when v's Close
// got there first (and will take it out of the books itself).
func (a *Admission) evictLocked(v *admConn) bool {
	if !v.released.CompareAndSwap(false, true) {
		return false
	}
	a.forgetLocked(v)
	a.evicted.Add(1)
	v.Conn.Close()
	return true
}

func hostOf(addr net.Addr) string {
	if ta, ok := addr.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return h
}

// Listener wraps l: its connections are admitted by a.
func (a *Admission) Listener(l net.Listener) net.Listener {
	return &admListener{Listener: l, a: a, done: make(chan struct{})}
}

type admListener struct {
	net.Listener
	a         *Admission
	closeOnce sync.Once
	done      chan struct{}
}

func (l *admListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		// Raw reads and writes (rawconn): a viewer's updates do not wake
		// the Go runtime's monitor thread.
		if ac := l.a.admit(rawconn.Wrap(c), l.done); ac != nil {
			return ac, nil
		}
		select {
		case <-l.done:
			return nil, net.ErrClosed
		default:
		}
	}
}

func (l *admListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}
