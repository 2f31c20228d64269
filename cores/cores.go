// Package cores runs the daemon's ordinary work on one scheduler thread
// and lets work that splits across cores have them all while it runs.
//
// deskd's work is a chain of small steps on several goroutines: an X
// event is read, the screen captured and compared, an update encoded and
// written. With two Ps, every goroutine made ready while the other P is
// idle wakes a second OS thread, which finds the goroutine already taken
// and parks again: two thread switches for nothing, and under a
// hypervisor a switch costs more than the step (typing watched by noVNC:
// idle threads parking and being started were a third of deskd's thread
// switches; one P cut them from 9.2 to 5.8 a frame and deskd's CPU a
// frame by 15%, six runs each way). With one P a goroutine
// made ready runs next on the same thread. Encoding a big update in two
// halves, or a PNG in strips, is where a second core pays: that work
// widens the scheduler for as long as it runs (a toggle costs ~12 µs,
// where such work takes a third of a millisecond or more).
package cores

import (
	"runtime"
	"sync"
)

// Cores is the scheduler's width. A nil *Cores leaves the runtime as it
// is: Widen does nothing, N is GOMAXPROCS.
type Cores struct {
	mu      sync.Mutex
	n       int // Ps while widened
	old     int // GOMAXPROCS before Narrow
	holders int
	closed  bool
}

// Narrow sets GOMAXPROCS to 1 and returns the Cores that widen it to n
// while work asks. With n < 2 there is nothing to widen to: it returns
// nil and leaves the runtime alone.
func Narrow(n int) *Cores {
	if n < 2 {
		return nil
	}
	c := &Cores{n: n}
	c.old = runtime.GOMAXPROCS(1)
	return c
}

// N reports how many cores widened work runs on.
func (c *Cores) N() int {
	if c == nil {
		return runtime.GOMAXPROCS(0)
	}
	return c.n
}

// Widen gives the scheduler all n Ps until release is called (once;
// later calls do nothing). Holders overlap: the last release narrows.
func (c *Cores) Widen() (release func()) {
	if c == nil {
		return func() {}
	}
	c.mu.Lock()
	if c.holders == 0 && !c.closed {
		runtime.GOMAXPROCS(c.n)
	}
	c.holders++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.holders--
			if c.holders == 0 && !c.closed {
				runtime.GOMAXPROCS(1)
			}
			c.mu.Unlock()
		})
	}
}

// Restore puts GOMAXPROCS back as it was before Narrow; Widen does
// nothing after it.
func (c *Cores) Restore() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		runtime.GOMAXPROCS(c.old)
	}
}
