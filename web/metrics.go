package web

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/record"
	"github.com/cubepod/deskd/term"
)

// metrics writes /metrics in the Prometheus text format (version 0.0.4)
// itself: a dozen series do not earn a client library whose packages cost
// an idle daemon more than a megabyte of resident memory.
type metrics struct {
	stack    *desktop.Stack
	sessions *sessions
	terminal *term.Manager
	start    time.Time
	// recordings, when set, adds the recordings' series
	recordings *record.Store

	activationsOK, activationsErr, activationsUnsupported atomic.Uint64
}

func newMetrics(stack *desktop.Stack, ss *sessions, terminal *term.Manager) *metrics {
	return &metrics{stack: stack, sessions: ss, terminal: terminal, start: time.Now()}
}

// activation counts a desktop start by result: "ok", "unsupported" (no
// Xvfb or Chromium installed) or "error".
func (m *metrics) activation(result string) {
	switch result {
	case "ok":
		m.activationsOK.Add(1)
	case "unsupported":
		m.activationsUnsupported.Add(1)
	default:
		m.activationsErr.Add(1)
	}
}

func (m *metrics) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(m.appendText(nil))
	})
}

// family writes one metric family's HELP and TYPE lines.
func family(b []byte, name, typ, help string) []byte {
	return fmt.Appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

func sample(b []byte, name, labels string, v float64) []byte {
	b = append(b, name...)
	if labels != "" {
		b = append(b, '{')
		b = append(b, labels...)
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = strconv.AppendFloat(b, v, 'g', -1, 64)
	return append(b, '\n')
}

func (m *metrics) appendText(b []byte) []byte {
	b = family(b, "cubepod_desktop_activations_total", "counter", "Desktop start requests (API, CLI or first viewer/agent), by result.")
	b = sample(b, "cubepod_desktop_activations_total", `result="error"`, float64(m.activationsErr.Load()))
	b = sample(b, "cubepod_desktop_activations_total", `result="ok"`, float64(m.activationsOK.Load()))
	b = sample(b, "cubepod_desktop_activations_total", `result="unsupported"`, float64(m.activationsUnsupported.Load()))

	st := m.stack.Status()
	comps := []string{desktop.A11yBus, desktop.Chromium, desktop.WM, desktop.Xvfb}
	b = family(b, "cubepod_desktop_component_restarts_total", "counter", "Times a desktop component was restarted after it died.")
	for _, c := range comps {
		b = sample(b, "cubepod_desktop_component_restarts_total", `component="`+c+`"`, float64(st.Restarts[c]))
	}
	b = family(b, "cubepod_desktop_component_up", "gauge", "Whether a desktop component is running (1) or not (0).")
	for _, c := range comps {
		up := 0.0
		if st.Pids[c] != 0 {
			up = 1
		}
		b = sample(b, "cubepod_desktop_component_up", `component="`+c+`"`, up)
	}
	b = family(b, "cubepod_panel_active_sessions", "gauge", "Panel sessions (distinct tokens, or clients without a panel secret) active in the idle window or holding a connection.")
	b = sample(b, "cubepod_panel_active_sessions", "", float64(m.sessions.active(time.Now())))
	n := 0
	if m.terminal != nil {
		n = m.terminal.Count()
	}
	b = family(b, "cubepod_terminal_sessions", "gauge", "Terminal sessions alive (a session outlives its viewers until it is reaped).")
	b = sample(b, "cubepod_terminal_sessions", "", float64(n))
	if rs := m.recordings; rs != nil {
		b = family(b, "cubepod_recordings_active", "gauge", "Recordings being written.")
		b = sample(b, "cubepod_recordings_active", "", float64(rs.Active()))
		b = family(b, "cubepod_recording_written_bytes_total", "counter", "Bytes written to recordings.")
		b = sample(b, "cubepod_recording_written_bytes_total", "", float64(rs.Written()))
		b = family(b, "cubepod_recordings_bytes", "gauge", "Space the recordings take (bounded by --record-max-mib).")
		b = sample(b, "cubepod_recordings_bytes", "", float64(rs.Bytes()))
	}

	// Go runtime.
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for _, g := range []struct {
		name, typ, help string
		v               float64
	}{
		{"go_goroutines", "gauge", "Number of goroutines that currently exist.", float64(runtime.NumGoroutine())},
		{"go_memstats_alloc_bytes", "gauge", "Number of bytes allocated in heap and currently in use.", float64(ms.HeapAlloc)},
		{"go_memstats_heap_inuse_bytes", "gauge", "Number of heap bytes in in-use spans.", float64(ms.HeapInuse)},
		{"go_memstats_sys_bytes", "gauge", "Number of bytes obtained from the OS.", float64(ms.Sys)},
		{"go_gc_cycles_total", "counter", "Completed GC cycles.", float64(ms.NumGC)},
		{"go_gc_pause_seconds_total", "counter", "Total GC pause time.", float64(ms.PauseTotalNs) / 1e9},
	} {
		b = family(b, g.name, g.typ, g.help)
		b = sample(b, g.name, "", g.v)
	}

	// The process, from /proc/self.
	p := readProcSelf()
	for _, g := range []struct {
		name, typ, help string
		v               float64
	}{
		{"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.", p.cpu},
		{"process_open_fds", "gauge", "Number of open file descriptors.", p.fds},
		{"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", p.rss},
		{"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", p.vsize},
		{"process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.", float64(m.start.UnixNano()) / 1e9},
	} {
		b = family(b, g.name, g.typ, g.help)
		b = sample(b, g.name, "", g.v)
	}
	return b
}

type procSelf struct{ cpu, fds, rss, vsize float64 }

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc's times.
const clockTicks = 100

func readProcSelf() procSelf {
	var p procSelf
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		if i := bytes.LastIndexByte(b, ')'); i > 0 {
			f := strings.Fields(string(b[i+1:]))
			// After "pid (comm)": state is field 0; utime 11, stime 12,
			// vsize 20, rss (pages) 21.
			if len(f) > 21 {
				ut, _ := strconv.ParseFloat(f[11], 64)
				stt, _ := strconv.ParseFloat(f[12], 64)
				vs, _ := strconv.ParseFloat(f[20], 64)
				rss, _ := strconv.ParseFloat(f[21], 64)
				p.cpu, p.vsize, p.rss = (ut+stt)/clockTicks, vs, rss*float64(os.Getpagesize())
			}
		}
	}
	if d, err := os.Open("/proc/self/fd"); err == nil {
		names, _ := d.Readdirnames(-1)
		d.Close()
		p.fds = float64(len(names))
	}
	return p
}
