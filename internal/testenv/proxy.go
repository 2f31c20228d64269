package testenv

import (
	"net"
	"sync"
	"testing"
	"time"
)

// IdleProxy forwards TCP to target and cuts any connection that carried
// no byte either way for idle, like a load balancer's idle timeout. It
// returns its address; it stops at the test's end.
func IdleProxy(t testing.TB, target string, idle time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			wg.Go(func() { pipeIdle(in, out, idle) })
		}
	})
	return l.Addr().String()
}

// pipeIdle copies both ways until either side ends or the pair has been
// quiet for idle; it returns once both copies have ended.
func pipeIdle(a, b net.Conn, idle time.Duration) {
	var mu sync.Mutex
	last := time.Now()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				mu.Lock()
				last = time.Now()
				mu.Unlock()
				if _, err := dst.Write(buf[:n]); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go cp(a, b) // both end once the conns are closed below
	go cp(b, a)
	tick := time.NewTicker(max(idle/10, 10*time.Millisecond))
	defer tick.Stop()
	cut := func() { a.Close(); b.Close(); <-done }
	for {
		select {
		case <-done:
			cut()
			return
		case <-tick.C:
			mu.Lock()
			quiet := time.Since(last)
			mu.Unlock()
			if quiet >= idle {
				cut()
				<-done
				return
			}
		}
	}
}
