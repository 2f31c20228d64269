package bench

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLineStamp(t *testing.T) {
	tests := []struct {
		line string
		want time.Time
		ok   bool
	}{
		{"T1733570000.123456 xxxx\r", time.Unix(1733570000, 123456000), true},
		{"T1733570000,000001 x", time.Unix(1733570000, 1000), true}, // a comma locale
		{"T1733570000.123456", time.Unix(1733570000, 123456000), true},
		{"", time.Time{}, false},
		{"T", time.Time{}, false},
		{"T$EPOCHREALTIME $F", time.Time{}, false}, // the loop's own text
		{"t1733570000.123456 x", time.Time{}, false},
		{"T1733570000.12345 x", time.Time{}, false},   // not micros
		{"T1733570000.1234567 x", time.Time{}, false}, // not micros
		{"T1733570000 x", time.Time{}, false},
		{"T.123456 x", time.Time{}, false},
		{"T99999999999999999999.123456 x", time.Time{}, false}, // overflows
		{"T-5.-12345 x", time.Time{}, false},
	}
	for _, tt := range tests {
		got, ok := lineStamp([]byte(tt.line))
		if ok != tt.ok || !got.Equal(tt.want) {
			t.Errorf("lineStamp(%q) = %v, %v; want %v, %v", tt.line, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzLineStamp(f *testing.F) {
	f.Add([]byte("T1733570000.123456 x"))
	f.Add([]byte("T1,2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, ok := lineStamp(b)
		if ok && (b[0] != 'T' || ts.IsZero()) {
			t.Fatalf("lineStamp(%q) = %v from a line that is not a stamp", b, ts)
		}
	})
}

// The terminal scenario's measurements against a real deskd, small: the
// echo of typed keys, and a crowd of shells watched twice each (every
// viewer gets the lines of its shell, timed).
func TestTerminalMeasures(t *testing.T) {
	bin := deskdBinary(t)
	ctx := t.Context()
	dk, err := startDeskd(ctx, Config{Deskd: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer dk.stop()
	ep := endpoint{name: "deskd", url: "ws://" + dk.addr + "/terminal/ws", pid: dk.pid}
	p50, p99, err := ep.echo(ctx, 30)
	if err != nil || p50 <= 0 || p99 < p50 {
		t.Fatalf("echo: p50 %v p99 %v, %v", p50, p99, err)
	}
	if _, _, err := ep.throughput(ctx, "seq 100000"); err != nil {
		t.Fatalf("throughput: %v", err)
	}
	// Each measurement ended its shell: the crowd may start all it needs.
	r, err := ep.crowd(ctx, 3, 2, crowdTime{500 * time.Millisecond, 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("echo p50 %.3f p99 %.3f ms; crowd %v", p50, p99, r)
	if n := countSessions(t, dk.addr); n != 0 {
		t.Fatalf("%d terminal sessions left after the measurements", n)
	}
	// 6 viewers, a line every 5 ms each for 2 s: far more than a few
	// (2400 on a quiet machine; 520 once under -race while make test ran
	// other packages on both cores).
	if r.lines < 6*40 || r.p50 <= 0 || r.p99 < r.p50 || r.cpu <= 0 {
		t.Fatalf("crowd: %v", r)
	}
}

// countSessions is deskd's cubepod_terminal_sessions gauge.
func countSessions(t *testing.T, addr string) int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "cubepod_terminal_sessions "); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("gauge %q: %v", l, err)
			}
			return n
		}
	}
	t.Fatalf("no cubepod_terminal_sessions in /metrics:\n%s", b)
	return 0
}
