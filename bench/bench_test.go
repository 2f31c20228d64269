package bench

import (
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMedianAndRatio(t *testing.T) {
	tests := []struct {
		d, p  []float64
		wantD float64
		wantR float64
	}{
		{[]float64{3, 1, 2}, []float64{4, 4, 4}, 2, 0.5},
		{[]float64{1, 2, 3, 4}, []float64{5}, 2.5, 0.5},
		{nil, []float64{1}, 0, 0},
		{[]float64{1}, nil, 1, 0},                         // no peer figure: no ratio
		{[]float64{0.15}, []float64{0.00195}, 0.15, 76.9}, // small values keep their digits
	}
	for _, tt := range tests {
		f := figure("m", "u", "lower", tt.d, tt.p)
		if f.Deskd != tt.wantD || f.Ratio != tt.wantR {
			t.Errorf("figure(%v, %v) = deskd %v ratio %v; want %v, %v", tt.d, tt.p, f.Deskd, f.Ratio, tt.wantD, tt.wantR)
		}
	}
}

func TestReportShapes(t *testing.T) {
	r := Report{Machine: Machine{CPU: "x", Cores: 2}, Rounds: 1, Scenarios: map[string]*Scenario{
		"idle_rss": {Peer: "p", Status: "ok", Figures: []Figure{figure("idle RSS", "MiB", "lower", []float64{12}, []float64{48})}},
		"rfb":      {Status: "pending"},
	}}
	js, err := r.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"machine", "idle_rss", "rfb"} {
		if _, ok := top[k]; !ok {
			t.Errorf("latest.json lacks top-level %q", k)
		}
	}
	if md := r.Markdown(); !strings.Contains(md, "| idle_rss | idle RSS (MiB) | 12 | 48 | 0.25 | lower |") {
		t.Errorf("table:\n%s", md)
	}
	if svg := r.SVG(); !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "0.25×") {
		t.Errorf("svg:\n%s", svg)
	}
}

// TestCPUOf: the bench's CPU figure for a process agrees with the
// kernel's own account of it (getrusage, in microseconds) to within a
// millisecond, where /proc/PID/stat's 10 ms ticks could be off by ten
// (and per-thread schedstat, not brought up to date while a thread
// runs, was off by 1.2 ms).
func TestCPUOf(t *testing.T) {
	self := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	pid := os.Getpid()
	for _, burn := range []time.Duration{time.Millisecond, 3 * time.Millisecond, 25 * time.Millisecond, 104 * time.Millisecond} {
		r0, c0 := self(), cpuOf(pid)
		for self()-r0 < burn {
		}
		c1, r1 := cpuOf(pid), self()
		got, want := c1-c0, r1-r0
		if d := got - want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("burnt %v: cpuOf says %v, getrusage %v", burn, got, want)
		}
	}
}
