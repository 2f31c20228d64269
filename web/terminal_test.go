package web

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/term"
)

// termServer is a deskd web server with a terminal manager.
func termServer(t *testing.T, mod func(*term.Config)) (*httptest.Server, *term.Manager) {
	t.Helper()
	sp := proc.NewSpawner()
	cfg := term.Config{Shell: "/bin/bash", Args: []string{"--norc", "--noprofile"}, Spawner: sp, Home: t.TempDir(), Env: []string{"PS1=$ "}}
	if mod != nil {
		mod(&cfg)
	}
	m, err := term.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{Terminal: m})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close(); m.Close(); sp.Close() })
	return srv, m
}

type termClient struct {
	t       *testing.T
	c       *websocket.Conn
	session string
}

// dialTerm opens a WebSocket to srv at path (default /terminal/ws).
func dialTerm(t *testing.T, srv *httptest.Server, path string, hdr http.Header) (*termClient, *http.Response, error) {
	t.Helper()
	if !strings.HasPrefix(path, "/") {
		path = "/terminal/ws" + path
	}
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + path
	c, resp, err := websocket.Dial(t.Context(), u, &websocket.DialOptions{Subprotocols: []string{"tty"}, HTTPHeader: hdr})
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(1 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &termClient{t: t, c: c}, resp, nil
}

// open dials, sends the hello and reads title and preferences.
func openTerm(t *testing.T, srv *httptest.Server, query string) *termClient {
	t.Helper()
	tc, _, err := dialTerm(t, srv, query, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tc.c.Subprotocol() != "tty" {
		t.Fatalf("subprotocol %q", tc.c.Subprotocol())
	}
	tc.send(`{"AuthToken":"","columns":100,"rows":30}`)
	for _, want := range []byte{term.CmdSetTitle, term.CmdPreferences} {
		typ, b := tc.read()
		if typ != websocket.MessageBinary || len(b) == 0 || b[0] != want {
			t.Fatalf("got %v %q, want a binary %q message", typ, b, want)
		}
		if want == term.CmdPreferences {
			var p struct{ Session string }
			json.Unmarshal(b[1:], &p)
			tc.session = p.Session
		}
	}
	return tc
}

func (tc *termClient) send(msg string) {
	tc.t.Helper()
	if err := tc.c.Write(tc.t.Context(), websocket.MessageBinary, []byte(msg)); err != nil {
		tc.t.Fatalf("send %q: %v", msg, err)
	}
}

func (tc *termClient) read() (websocket.MessageType, []byte) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(tc.t.Context(), 20*time.Second)
	defer cancel()
	typ, b, err := tc.c.Read(ctx)
	if err != nil {
		tc.t.Fatalf("read: %v", err)
	}
	return typ, b
}

func (tc *termClient) expect(want string) string {
	tc.t.Helper()
	var out strings.Builder
	for !strings.Contains(out.String(), want) {
		_, b := tc.read()
		if b[0] == term.CmdOutput {
			out.Write(b[1:])
		}
	}
	return out.String()
}

// closeStatus reads until the server closes and returns its code.
func (tc *termClient) closeStatus() websocket.StatusCode {
	ctx, cancel := context.WithTimeout(tc.t.Context(), 20*time.Second)
	defer cancel()
	for {
		if _, _, err := tc.c.Read(ctx); err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func TestTerminalProtocol(t *testing.T) {
	srv, _ := termServer(t, nil)
	tc := openTerm(t, srv, "?session=")
	if tc.session == "" {
		t.Fatal("?session= did not announce the session id")
	}
	tc.send("0echo ok-$((20+22))\r")
	tc.expect("ok-42")
	tc.send(`1{"columns":132,"rows":43}`)
	tc.send("0stty size\r")
	tc.expect("43 132")
	// Pause: output stops; resume: the held output arrives.
	tc.send("2")
	tc.send("0echo held-$((3*3))\r")
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	for {
		_, b, err := tc.c.Read(ctx)
		if err != nil {
			break // nothing more while paused
		}
		if bytes.Contains(b, []byte("held-9")) {
			t.Fatal("output arrived while paused")
		}
	}
	cancel()
	// The timed-out Read closed that connection (coder/websocket does);
	// the session lives on: reattach and see the output.
	tc2 := openTerm(t, srv, "?session="+tc.session)
	tc2.send("3")
	tc2.expect("held-9")
}

// ttyd's own client sends no session parameter: it must get plain
// preferences, with no key it would apply to xterm.js as an option.
func TestTerminalTtydClientPreferences(t *testing.T) {
	srv, _ := termServer(t, nil)
	tc := openTerm(t, srv, "")
	if tc.session != "" {
		t.Fatalf("session announced to a client that did not ask: %q", tc.session)
	}
}

func TestTerminalMalformed(t *testing.T) {
	srv, _ := termServer(t, nil)
	tests := []struct {
		name  string
		hello string
		msgs  []string
		want  websocket.StatusCode
	}{
		{"bad json hello", "{bad", nil, term.CloseInvalid},
		{"hello with giant size", `{"columns":1000000,"rows":1}`, nil, term.ClosePolicy},
		{"unknown command", `{"columns":80,"rows":24}`, []string{"Z"}, term.CloseUnsupported},
		{"giant resize", `{"columns":80,"rows":24}`, []string{`1{"columns":4000000000,"rows":4000000000}`}, term.ClosePolicy},
		{"resize out of bounds", `{"columns":80,"rows":24}`, []string{`1{"columns":5000,"rows":24}`}, term.ClosePolicy},
		{"message over the limit", `{"columns":80,"rows":24}`, []string{"0" + strings.Repeat("x", term.MaxMessage+1)}, websocket.StatusMessageTooBig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc, _, err := dialTerm(t, srv, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			tc.send(tt.hello)
			for _, m := range tt.msgs {
				tc.c.Write(t.Context(), websocket.MessageBinary, []byte(m))
			}
			if got := tc.closeStatus(); got != tt.want {
				t.Fatalf("closed with %v, want %v", got, tt.want)
			}
		})
	}
	// And the server still serves.
	tc := openTerm(t, srv, "")
	tc.send("0echo alive\r")
	tc.expect("alive")
}

func TestTerminalOrigin(t *testing.T) {
	srv, _ := termServer(t, nil)
	if _, resp, err := dialTerm(t, srv, "", http.Header{"Origin": {"http://evil.example"}}); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("foreign origin: err %v, resp %v", err, resp)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, h := range []http.Header{
		{"Origin": {"http://" + host}},
		{"Origin": {"https://gw.example"}, "X-Forwarded-Host": {"gw.example"}},
	} {
		if _, _, err := dialTerm(t, srv, "", h); err != nil {
			t.Fatalf("origin %v refused: %v", h, err)
		}
	}
}

func TestTerminalCtrlCDuringFlood(t *testing.T) {
	srv, _ := termServer(t, nil)
	tc := openTerm(t, srv, "")
	tc.send("0yes flood-line\r")
	got := 0
	for got < 2<<20 { // 2 MiB of flood first
		_, b := tc.read()
		got += len(b)
	}
	t0 := time.Now()
	tc.send("0\x03")
	tc.send("0echo done-$((6*7))\r")
	tc.expect("done-42")
	t.Logf("Ctrl-C to prompt during a flood: %v", time.Since(t0).Round(time.Millisecond))
}

// TestStalledViewer: 100 MB of output while one viewer reads nothing.
// The reading viewer gets every line in order, the server's memory stays
// bounded, and the stalled viewer is dropped instead of being buffered.
func TestStalledViewer(t *testing.T) {
	srv, _ := termServer(t, func(c *term.Config) { c.StallTimeout = time.Second })
	fast := openTerm(t, srv, "?session=")
	stalled, _, err := dialTerm(t, srv, "?session="+fast.session, nil)
	if err != nil {
		t.Fatal(err)
	}
	stalled.send(`{"columns":100,"rows":30}`) // and then never reads

	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // samples the heap until stop
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	const n = 11_000_000 // lines 1..n: about 100 MB with the PTY's CRLF
	t0 := time.Now()
	fast.send("0seq 1 " + strconv.Itoa(n) + "; echo seq-done\r")
	next, total := 1, 0
	var carry []byte
	done := false
	for !done {
		_, b := fast.read()
		if b[0] != term.CmdOutput {
			continue
		}
		total += len(b) - 1
		data := append(carry, b[1:]...)
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			line := bytes.TrimRight(data[:i], "\r")
			if j := bytes.LastIndexByte(line, '\r'); j >= 0 {
				line = line[j+1:] // what a terminal shows after a carriage return
			}
			data = data[i+1:]
			if bytes.Contains(line, []byte("seq-done")) && !bytes.Contains(line, []byte("echo")) {
				done = true
				break
			}
			if v, err := strconv.Atoi(string(line)); err == nil {
				if v != next {
					t.Fatalf("line %d after %d: output out of order or lost", v, next-1)
				}
				next++
			}
		}
		carry = append(carry[:0], data...)
	}
	close(stop)
	<-sampled
	if next != n+1 {
		t.Fatalf("got lines 1..%d, want 1..%d", next-1, n)
	}
	secs := time.Since(t0).Seconds()
	t.Logf("%d MB in %.1f s (%.0f MB/s) with a stalled viewer; peak heap in use %d MiB",
		total>>20, secs, float64(total)/secs/1e6, peak.Load()>>20)
	if peak.Load() > 96<<20 {
		t.Fatalf("heap peaked at %d MiB: output is being buffered", peak.Load()>>20)
	}
	// The stalled viewer was dropped, with a code that says why if the
	// close got through, or by closing the socket.
	if st := stalled.closeStatus(); st != term.CloseLagging && st != -1 {
		t.Fatalf("stalled viewer closed with %v", st)
	}
}

// A view-scope token gets the terminal read-only: output yes, input no.
func TestTerminalViewTokenReadOnly(t *testing.T) {
	sp := proc.NewSpawner()
	m, err := term.NewManager(term.Config{Shell: "/bin/bash", Args: []string{"--norc", "--noprofile"}, Spawner: sp, Home: t.TempDir(), Env: []string{"PS1=$ "}})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{Terminal: m, PanelSecret: secret})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close(); m.Close(); sp.Close() })

	writer := openTerm(t, srv, "/panel/"+token(t, panel.Claims{})+"/terminal/ws?session=")
	viewer := openTerm(t, srv, "/panel/"+token(t, panel.Claims{Scope: panel.ScopeView})+"/terminal/ws?session="+writer.session)
	viewer.send("0echo typed-by-viewer\r")
	writer.send("0echo typed-by-writer-$((5*5))\r")
	out := viewer.expect("typed-by-writer-25")
	if strings.Contains(out, "typed-by-viewer") {
		t.Fatalf("a view token typed into the shell: %q", out)
	}
	if _, resp, err := dialTerm(t, srv, "/terminal/ws", nil); err == nil || resp == nil || resp.StatusCode != 403 {
		t.Fatalf("terminal without a token: %v %v", err, resp)
	}
}

// writeCounter counts the writes to its connections.
type writeCounter struct {
	net.Listener
	writes *atomic.Int64
}

func (l writeCounter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countedConn{c, l.writes}, nil
}

type countedConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countedConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// An output frame goes out in one write, its header with its payload:
// behind net/http's 4 KiB hijack buffer a 64 KiB frame took two (the
// header flushed with the first 4 KiB, then the rest).
func TestTerminalFrameOneWrite(t *testing.T) {
	sp := proc.NewSpawner()
	m, err := term.NewManager(term.Config{Shell: "/bin/bash", Args: []string{"--norc", "--noprofile"}, Spawner: sp, Home: t.TempDir(), Env: []string{"PS1=$ "}})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{Terminal: m})
	var writes atomic.Int64
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.Listener = writeCounter{srv.Listener, &writes}
	srv.Start()
	t.Cleanup(func() { srv.Close(); s.Close(); m.Close(); sp.Close() })
	tc := openTerm(t, srv, "")
	// Big frames: the shell writes 4 MiB at once, the viewer reads them
	// after they are queued.
	tc.send("0head -c 4000000 /dev/zero | tr '\\0' x; echo; echo __E\"\"ND__\r")
	before := writes.Load()
	frames := 0
	var out strings.Builder
	for !strings.Contains(out.String(), "__END__") {
		_, b := tc.read()
		frames++
		if b[0] == term.CmdOutput {
			out.Write(b[1:])
			if s := out.String(); len(s) > 64 {
				out.Reset()
				out.WriteString(s[len(s)-64:])
			}
		}
	}
	n := writes.Load() - before
	t.Logf("%d frames in %d writes", frames, n)
	if n > int64(frames)+2 { // a ping may come between
		t.Fatalf("%d frames took %d writes: more than one a frame", frames, n)
	}
}
