package web

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestIdleMemory(t *testing.T) {
	tests := []struct {
		name  string
		steps string // a: add, d: done, w: wait past the delay, c: close
		want  int32
	}{
		{"last one out frees", "aadw", 0},
		{"then frees once", "aaddw", 1},
		{"a new one in time cancels", "adaw", 0},
		{"and frees after it", "adadw", 1},
		{"each quiet spell", "adwadw", 2},
		{"closed: never", "adcw", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			m := newIdleMemory(20 * time.Millisecond)
			m.free = func() { n.Add(1) }
			for _, c := range tt.steps {
				switch c {
				case 'a':
					m.add()
				case 'd':
					m.done()
				case 'w':
					time.Sleep(80 * time.Millisecond)
				case 'c':
					m.close()
				}
			}
			if got := n.Load(); got != tt.want {
				t.Fatalf("freed %d times, want %d", got, tt.want)
			}
		})
	}
}
