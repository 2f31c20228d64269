package cores

import (
	"runtime"
	"sync"
	"testing"
)

func TestNarrowWiden(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	for _, tc := range []struct {
		name string
		n    int
		nil_ bool
	}{
		{"one core: nothing to widen to", 1, true},
		{"none", 0, true},
		{"four", 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GOMAXPROCS(3)
			c := Narrow(tc.n)
			if (c == nil) != tc.nil_ {
				t.Fatalf("Narrow(%d) = %v", tc.n, c)
			}
			if c == nil {
				if got := runtime.GOMAXPROCS(0); got != 3 {
					t.Fatalf("GOMAXPROCS %d, want it left at 3", got)
				}
				release := c.Widen() // a nil Cores widens nothing
				release()
				if c.N() != 3 || runtime.GOMAXPROCS(0) != 3 {
					t.Fatalf("nil Cores: N %d, GOMAXPROCS %d; want 3, 3", c.N(), runtime.GOMAXPROCS(0))
				}
				return
			}
			if got := runtime.GOMAXPROCS(0); got != 1 || c.N() != tc.n {
				t.Fatalf("narrowed: GOMAXPROCS %d, N %d; want 1, %d", got, c.N(), tc.n)
			}
			a := c.Widen()
			b := c.Widen()
			if got := runtime.GOMAXPROCS(0); got != tc.n {
				t.Fatalf("widened: GOMAXPROCS %d, want %d", got, tc.n)
			}
			a()
			a() // a second call does nothing
			if got := runtime.GOMAXPROCS(0); got != tc.n {
				t.Fatalf("one holder left: GOMAXPROCS %d, want %d", got, tc.n)
			}
			b()
			if got := runtime.GOMAXPROCS(0); got != 1 {
				t.Fatalf("released: GOMAXPROCS %d, want 1", got)
			}
			held := c.Widen()
			c.Restore()
			held() // after Restore nothing narrows again
			if got := runtime.GOMAXPROCS(0); got != 3 {
				t.Fatalf("restored: GOMAXPROCS %d, want 3", got)
			}
		})
	}
}

// Holders on many goroutines: the last release narrows, whatever the order.
func TestWidenConcurrent(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(before)
	c := Narrow(2)
	defer c.Restore()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				release := c.Widen()
				if got := runtime.GOMAXPROCS(0); got != 2 {
					t.Errorf("held: GOMAXPROCS %d, want 2", got)
				}
				release()
			}
		})
	}
	wg.Wait()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Fatalf("all released: GOMAXPROCS %d, want 1", got)
	}
}
