package bench

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"time"
)

// link is a network path: a bottleneck of rate bytes a second with a
// bounded queue, and delay each way.
type link struct {
	rate  float64 // bytes a second
	delay time.Duration
}

// linkQueue bounds the bytes a direction holds (the bottleneck's buffer
// plus what is in flight): beyond it the sender is held back by TCP, as
// by a real router's queue.
const linkQueue = 256 << 10

// shaper is a TCP proxy that carries connections through a link: every
// URL given to url() goes through it to the same host.
type shaper struct {
	l      link
	ln     net.Listener
	mu     sync.Mutex
	target string // host:port the next connection goes to
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelFunc
}

func startShaper(ctx context.Context, l link) (*shaper, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &shaper{l: l, ln: ln}
	s.ctx, s.cancel = context.WithCancel(ctx)
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// url returns u (ws://host:port/path) routed through the link.
func (s *shaper) url(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	s.mu.Lock()
	s.target = p.Host
	s.mu.Unlock()
	p.Host = s.ln.Addr().String()
	return p.String()
}

func (s *shaper) close() {
	s.cancel()
	s.ln.Close()
	s.wg.Wait()
}

func (s *shaper) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		target := s.target
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			up, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer up.Close()
			ctx, cancel := context.WithCancel(s.ctx)
			defer cancel()
			go func() { <-ctx.Done(); c.Close(); up.Close() }()
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); defer cancel(); s.l.carry(ctx, up, c) }()
			go func() { defer wg.Done(); defer cancel(); s.l.carry(ctx, c, up) }()
			wg.Wait()
		}()
	}
}

// chunk is bytes on the link and when they arrive.
type chunk struct {
	b  []byte
	at time.Time
}

// carry copies src to dst through the link: each chunk leaves the
// bottleneck when the ones before it have (at rate) and arrives delay
// later.
func (l link) carry(ctx context.Context, dst io.Writer, src io.Reader) {
	const size = 16 << 10
	// The chunks on their way count too: a long fast link holds rate x
	// delay of them, beyond the queue.
	q := make(chan chunk, (linkQueue+int(l.rate*l.delay.Seconds()))/size)
	go func() {
		defer close(q)
		var free time.Time // when the bottleneck is next idle
		for {
			b := make([]byte, size)
			n, err := src.Read(b)
			if n > 0 {
				now := time.Now()
				if free.Before(now) {
					free = now
				}
				free = free.Add(time.Duration(float64(n) / l.rate * float64(time.Second)))
				select {
				case q <- chunk{b[:n], free.Add(l.delay)}:
				case <-ctx.Done():
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}
