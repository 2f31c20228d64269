package web

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/cubepod/deskd/a11y"
	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/term"
)

type hostile struct {
	name, method, path, host, origin, ctype string
	want                                    int
	body                                    string // substring of the answer
}

func (h hostile) do(t *testing.T, handler http.Handler) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(h.method, h.path, nil)
	req.Host = h.host
	if req.Host == "" {
		req.Host = "127.0.0.1:8080"
	}
	if h.origin != "" {
		req.Header.Set("Origin", h.origin)
	}
	if h.ctype != "" {
		req.Header.Set("Content-Type", h.ctype)
	}
	if h.method == "WS" {
		req.Method = http.MethodGet
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	return rec
}

// Loopback mode (no panel secret): DNS rebinding and cross-site requests
// are refused before anything runs; nothing in this table starts the
// desktop (activations stay 0).
func TestLoopbackModeHostile(t *testing.T) {
	s := newServer(t, Config{AllowHosts: []string{"box.internal"}})
	h := s.Handler()
	const js = "application/json"
	tests := []hostile{
		{name: "loopback IP", method: "GET", path: "/healthz", want: 200},
		{name: "localhost", method: "GET", path: "/healthz", host: "localhost:8080", want: 200},
		{name: "IPv6 loopback", method: "GET", path: "/healthz", host: "[::1]:8080", want: 200},
		{name: "127/8", method: "GET", path: "/healthz", host: "127.3.2.1", want: 200},
		{name: "allowed host", method: "GET", path: "/healthz", host: "box.internal:8080", want: 200},
		{name: "rebinding name", method: "GET", path: "/api/desktop/status", host: "evil.example:8080", want: 403, body: "not a loopback name"},
		{name: "rebinding page", method: "GET", path: "/vnc.html", host: "attacker.test", want: 403},
		{name: "rebinding ws", method: "WS", path: "/websockify", host: "evil.example:8080", origin: "http://evil.example:8080", want: 403},
		{name: "no host", method: "GET", path: "/healthz", host: " ", want: 403},
		{name: "localhost. suffix trick", method: "GET", path: "/healthz", host: "localhost.evil.example", want: 403},
		{name: "post text/plain (CSRF)", method: "POST", path: "/api/desktop/start", ctype: "text/plain", want: 415, body: "application/json"},
		{name: "post form (CSRF)", method: "POST", path: "/api/desktop/stop", ctype: "application/x-www-form-urlencoded", want: 415},
		{name: "post no type", method: "POST", path: "/api/desktop/stop", want: 415},
		{name: "post from another origin", method: "POST", path: "/api/desktop/stop", ctype: js, origin: "http://evil.example", want: 403},
		{name: "post JSON same origin", method: "POST", path: "/api/desktop/stop", ctype: js + "; charset=utf-8", origin: "http://127.0.0.1:8080", want: 200},
		{name: "ws from another origin", method: "WS", path: "/websockify", origin: "http://evil.example", want: 403},
		{name: "terminal ws from another origin", method: "WS", path: "/terminal/ws", origin: "http://evil.example", want: 403},
		{name: "cdp ws from another origin", method: "WS", path: "/cdp", origin: "http://evil.example", want: 403},
		{name: "cdp devtools ws from another origin", method: "WS", path: "/cdp/devtools/page/ABC", origin: "http://evil.example", want: 403},
		{name: "websockify without upgrade", method: "GET", path: "/websockify", want: 400, body: "WebSocket only"},
		{name: "json/new by GET", method: "GET", path: "/cdp/json/new?http://evil.example/", want: 405, body: "PUT"},
		{name: "PUT elsewhere", method: "PUT", path: "/cdp/json/version", origin: "", want: 405},
		{name: "PUT from another origin", method: "PUT", path: "/cdp/json/new", origin: "http://evil.example", want: 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.do(t, h)
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
				t.Fatalf("%s %s (Host %q, Origin %q) = %d %.200q; want %d with %q", tt.method, tt.path, tt.host, tt.origin, rec.Code, rec.Body.String(), tt.want, tt.body)
			}
		})
	}
	if n := testActivations(s); n != 0 {
		t.Fatalf("%v desktop starts from refused requests", n)
	}
}

func testActivations(s *Server) float64 {
	return float64(s.metrics.activationsOK.Load() + s.metrics.activationsErr.Load())
}

// Scope view may look, never act: every write path answers 403, and
// nothing is started for it.
func TestViewScopeWritePaths(t *testing.T) {
	sp := proc.NewSpawner()
	m, err := term.NewManager(term.Config{Shell: "/bin/bash", Args: []string{"--norc", "--noprofile"}, Spawner: sp, Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{Terminal: m, PanelSecret: secret, SandboxID: "sb1"})
	t.Cleanup(func() { s.Close(); m.Close(); sp.Close() })
	h := s.Handler()
	view := "/panel/" + token(t, panel.Claims{SID: "sb1", Scope: panel.ScopeView})
	const js = "application/json"
	tests := []hostile{
		{name: "start", method: "POST", path: view + "/api/desktop/start", ctype: js, want: 403},
		{name: "stop", method: "POST", path: view + "/api/desktop/stop", ctype: js, want: 403},
		{name: "status", method: "GET", path: view + "/api/desktop/status", want: 403},
		{name: "cdp discovery", method: "GET", path: view + "/cdp/json/version", want: 403},
		{name: "cdp new", method: "PUT", path: view + "/cdp/json/new", want: 403},
		{name: "cdp ws", method: "WS", path: view + "/cdp", want: 403},
		{name: "cdp devtools ws", method: "WS", path: view + "/cdp/devtools/page/ABC", want: 403},
		{name: "new terminal session", method: "WS", path: view + "/terminal/ws", want: 403, body: "existing terminal session"},
		{name: "unknown terminal session", method: "WS", path: view + "/terminal/ws?session=nope", want: 403, body: "existing terminal session"},
		{name: "pages still", method: "GET", path: view + "/vnc.html", want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.do(t, h)
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
				t.Fatalf("%s %s = %d %.200q; want %d with %q", tt.method, tt.path, rec.Code, rec.Body.String(), tt.want, tt.body)
			}
		})
	}
	if n := m.Count(); n != 0 {
		t.Fatalf("a view token started %d terminal sessions", n)
	}
	if n := testActivations(s); n != 0 {
		t.Fatalf("a view token started the desktop %v times", n)
	}
}

// The ops listener serves probes and metrics, and nothing else, without
// a token.
func TestOpsHandler(t *testing.T) {
	s := newServer(t, Config{PanelSecret: secret, SandboxID: "sb1"})
	h := s.OpsHandler()
	for _, tt := range []hostile{
		{name: "healthz", method: "GET", path: "/healthz", want: 200, body: "ok"},
		{name: "livez", method: "GET", path: "/livez", want: 200, body: "ok"},
		{name: "readyz, desktop stopped", method: "GET", path: "/readyz", want: 200, body: "ready"},
		{name: "readyz POST", method: "POST", path: "/readyz", ctype: "application/json", want: 405},
		{name: "metrics", method: "GET", path: "/metrics", want: 200, body: "cubepod_desktop_activations_total"},
		{name: "page", method: "GET", path: "/vnc.html", want: 404},
		{name: "api", method: "GET", path: "/api/desktop/status", want: 404},
		{name: "start", method: "POST", path: "/api/desktop/start", ctype: "application/json", want: 404},
		{name: "terminal", method: "WS", path: "/terminal/ws", want: 404},
		{name: "panel path", method: "GET", path: "/panel/x/healthz", want: 404},
	} {
		if rec := tt.do(t, h); rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("ops %s %s = %d %.100q; want %d", tt.method, tt.path, rec.Code, rec.Body.String(), tt.want)
		}
	}
}

// A WebSocket opened under a token ends with 1008 when the token expires.
func TestWebSocketEndsWithToken(t *testing.T) {
	sp := proc.NewSpawner()
	m, err := term.NewManager(term.Config{Shell: "/bin/bash", Args: []string{"--norc", "--noprofile"}, Spawner: sp, Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{Terminal: m, PanelSecret: secret})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close(); m.Close(); sp.Close() })
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second)
	tc := openTerm(t, srv, "/panel/"+token(t, panel.Claims{Exp: exp.Unix()})+"/terminal/ws")
	code := tc.closeStatus()
	if code != websocket.StatusPolicyViolation {
		t.Fatalf("close %d, want 1008 at the token's expiry", code)
	}
	if late := time.Since(exp); late < 0 || late > 3*time.Second {
		t.Fatalf("closed %v after the expiry", late)
	}
}

// A terminal left idle behind a proxy that cuts connections silent for
// 600 ms stays open: deskd's pings keep it busy.
func TestPingsKeepIdleTerminalBehindProxy(t *testing.T) {
	sp := proc.NewSpawner()
	m, err := term.NewManager(term.Config{Shell: "/bin/bash", Args: []string{"--norc", "--noprofile"}, Spawner: sp, Home: t.TempDir(), Env: []string{"PS1=$ "}})
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{Terminal: m, WSPing: 150 * time.Millisecond})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close(); m.Close(); sp.Close() })
	proxy := testenv.IdleProxy(t, strings.TrimPrefix(srv.URL, "http://"), 600*time.Millisecond)
	tc := openTerm(t, &httptest.Server{URL: "http://" + proxy}, "")
	// Read in the background as a browser does (pongs need a reader).
	out := make(chan string, 64)
	go func() { // ends when the connection closes
		for {
			_, b, err := tc.c.Read(context.Background())
			if err != nil {
				close(out)
				return
			}
			if b[0] == term.CmdOutput {
				out <- string(b[1:])
			}
		}
	}()
	time.Sleep(2 * time.Second) // idle on purpose: three proxy timeouts
	tc.send("0echo still-$((6*7))\r")
	var got strings.Builder
	deadline := time.After(10 * time.Second)
	for !strings.Contains(got.String(), "still-42") {
		select {
		case s, ok := <-out:
			if !ok {
				t.Fatalf("connection cut while idle; output so far %q", got.String())
			}
			got.WriteString(s)
		case <-deadline:
			t.Fatalf("no echo; output %q", got.String())
		}
	}
}

// The computer endpoints refuse malformed and hostile requests with a
// clear 4xx before the desktop is started; a view token may not act.
func TestComputerHostile(t *testing.T) {
	s := newServer(t, Config{PanelSecret: secret, SandboxID: "sb1"})
	h := s.Handler()
	full := "/panel/" + token(t, panel.Claims{SID: "sb1"})
	view := "/panel/" + token(t, panel.Claims{SID: "sb1", Scope: panel.ScopeView})
	const js = "application/json"
	big := `{"actions":[{"action":"type","text":"` + strings.Repeat("a", maxActionsBody) + `"}]}`
	tests := []struct {
		hostile
		reqBody string
	}{
		{hostile{name: "not JSON", method: "POST", path: full + "/computer/actions", ctype: js, want: 400, body: "bad actions request"}, `{actions`},
		{hostile{name: "text/plain", method: "POST", path: full + "/computer/actions", ctype: "text/plain", want: 415}, `{"actions":[]}`},
		{hostile{name: "unknown field", method: "POST", path: full + "/computer/actions", ctype: js, want: 400, body: "unknown field"}, `{"actions":[{"action":"screenshot"}],"rm":1}`},
		{hostile{name: "no actions", method: "POST", path: full + "/computer/actions", ctype: js, want: 400, body: "actions is required"}, `{}`},
		{hostile{name: "actions not a list", method: "POST", path: full + "/computer/actions", ctype: js, want: 400, body: "actions"}, `{"actions":{"action":"x"}}`},
		{hostile{name: "coordinate not numbers", method: "POST", path: full + "/computer/actions", ctype: js, want: 400}, `{"actions":[{"action":"left_click","coordinate":["a","b"]}]}`},
		{hostile{name: "bad screenshot option", method: "POST", path: full + "/computer/actions", ctype: js, want: 400, body: "screenshot"}, `{"actions":[{"action":"screenshot"}],"screenshot":"always"}`},
		{hostile{name: "settle too long", method: "POST", path: full + "/computer/actions", ctype: js, want: 400, body: "settle"}, `{"actions":[{"action":"screenshot"}],"settle_ms":999999}`},
		{hostile{name: "format", method: "POST", path: full + "/computer/actions", ctype: js, want: 400, body: "format"}, `{"actions":[{"action":"screenshot"}],"format":"bmp"}`},
		{hostile{name: "body too large", method: "POST", path: full + "/computer/actions", ctype: js, want: 413}, big},
		{hostile{name: "openai: not a list", method: "POST", path: full + "/computer/compat/openai", ctype: js, want: 400}, `{"actions":"click"}`},
		{hostile{name: "aio: not JSON", method: "POST", path: full + "/computer/compat/aio", ctype: js, want: 400}, `[`},
		{hostile{name: "aio: wrong type", method: "POST", path: full + "/computer/compat/aio", ctype: js, want: 400}, `{"action_type":5}`},
		{hostile{name: "a11y: view token, bad flag", method: "GET", path: view + "/computer/a11y?interactive=maybe", want: 400, body: "interactive"}, ""},
		{hostile{name: "a11y: max_nodes 0", method: "GET", path: view + "/computer/a11y?max_nodes=0", want: 400, body: "max_nodes"}, ""},
		{hostile{name: "a11y: max_nodes huge", method: "GET", path: full + "/computer/a11y?max_nodes=99999999999999999999", want: 400, body: "max_nodes"}, ""},
		{hostile{name: "a11y: depth", method: "GET", path: full + "/computer/a11y?max_depth=-1", want: 400, body: "max_depth"}, ""},
		{hostile{name: "a11y: timeout", method: "GET", path: full + "/computer/a11y?timeout_ms=3600000", want: 400, body: "timeout_ms"}, ""},
		{hostile{name: "a11y: region", method: "GET", path: full + "/computer/a11y?region=1,2,3", want: 400, body: "region"}, ""},
		{hostile{name: "a11y: region garbage", method: "GET", path: full + "/computer/a11y?region=" + strings.Repeat("9", 100), want: 400, body: "region"}, ""},
		{hostile{name: "a11y: format", method: "GET", path: full + "/computer/a11y?format=xml", want: 400, body: "format"}, ""},
		{hostile{name: "a11y: POST", method: "POST", path: full + "/computer/a11y", ctype: js, want: 405}, "{}"},
		{hostile{name: "shot: quality", method: "GET", path: full + "/computer/screenshot?quality=0", want: 400, body: "quality"}, ""},
		{hostile{name: "shot: format", method: "GET", path: full + "/computer/screenshot?format=gif", want: 400, body: "format"}, ""},
		{hostile{name: "shot: region", method: "GET", path: full + "/computer/screenshot?region=1,2,3", want: 400, body: "region"}, ""},
		{hostile{name: "shot: region garbage", method: "GET", path: full + "/computer/screenshot?region=" + strings.Repeat("9", 100), want: 400, body: "region"}, ""},
		{hostile{name: "shot: long edge", method: "GET", path: full + "/computer/screenshot?max_long_edge=99999999", want: 400, body: "max_long_edge"}, ""},
		{hostile{name: "shot: settle", method: "GET", path: full + "/computer/screenshot?settle_ms=-5", want: 400, body: "settle_ms"}, ""},
		{hostile{name: "clipboard: not JSON", method: "PUT", path: full + "/computer/clipboard", ctype: js, want: 400, body: "clipboard"}, `text`},
		{hostile{name: "clipboard: no text", method: "PUT", path: full + "/computer/clipboard", ctype: js, want: 400, body: "clipboard"}, `{}`},
		{hostile{name: "unknown endpoint", method: "GET", path: full + "/computer/nope", want: 404}, ""},
		{hostile{name: "view: actions", method: "POST", path: view + "/computer/actions", ctype: js, want: 403}, `{"actions":[{"action":"screenshot"}]}`},
		{hostile{name: "view: openai", method: "POST", path: view + "/computer/compat/openai", ctype: js, want: 403}, `{"actions":[{"type":"screenshot"}]}`},
		{hostile{name: "view: aio", method: "POST", path: view + "/computer/compat/aio", ctype: js, want: 403}, `{"action_type":"WAIT"}`},
		{hostile{name: "view: clipboard read", method: "GET", path: view + "/computer/clipboard", want: 403}, ""},
		{hostile{name: "view: clipboard write", method: "PUT", path: view + "/computer/clipboard", ctype: js, want: 403}, `{"text":"x"}`},
		{hostile{name: "cross-origin actions", method: "POST", path: full + "/computer/actions", ctype: js, origin: "http://evil.example", want: 403}, `{"actions":[{"action":"screenshot"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.reqBody))
			req.Host = "127.0.0.1:8080"
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			if tt.origin != "" {
				req.Header.Set("Origin", tt.origin)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
				t.Fatalf("%s %s = %d %.200q; want %d with %q", tt.method, tt.path, rec.Code, rec.Body.String(), tt.want, tt.body)
			}
		})
	}
	if n := testActivations(s); n != 0 {
		t.Fatalf("refused computer requests started the desktop %v times", n)
	}
}

func TestLease(t *testing.T) {
	var l lease
	a, b := agent{key: "t:aa/x", name: "x"}, agent{key: "t:bb", name: "t:bb"}
	t0 := time.Now()
	if _, _, ok := l.take(a, t0); !ok {
		t.Fatal("a free lease refused")
	}
	// A run longer than LeaseTTL: held all along (it once expired
	// LeaseTTL after the run started).
	if holder, left, ok := l.take(b, t0.Add(LeaseTTL+time.Minute)); ok || holder != "x" || left != 0 {
		t.Fatalf("b during a's long run: %q %v %v", holder, left, ok)
	}
	end := t0.Add(2 * LeaseTTL)
	l.done(a, end, LeaseTTL)
	if holder, left, ok := l.take(b, end.Add(time.Second)); ok || holder != "x" || left != LeaseTTL-time.Second {
		t.Fatalf("b after a's run: %q %v %v", holder, left, ok)
	}
	if _, _, ok := l.take(a, end.Add(2*time.Second)); !ok {
		t.Fatal("its holder refused")
	}
	l.done(a, end.Add(3*time.Second), LeaseTTL)
	if _, _, ok := l.take(b, end.Add(3*time.Second+LeaseTTL)); !ok {
		t.Fatal("an expired lease was not given to b")
	}
	if h, _ := l.state(end.Add(4*time.Second + LeaseTTL)); h != "t:bb" {
		t.Fatalf("holder %q", h)
	}

	// The same X-Agent-Id under another token is another agent.
	req := func(session, id string) agent {
		r := httptest.NewRequest("POST", "/computer/actions", nil)
		r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, session))
		if id != "" {
			r.Header.Set("X-Agent-Id", id)
		}
		return agentOf(r)
	}
	if x, y := req("t:1", "bot"), req("t:2", "bot"); x.key == y.key || x.name != "bot" {
		t.Fatalf("two tokens sending X-Agent-Id bot: %+v %+v", x, y)
	}
	if x, y := req("t:1", "bot"), req("t:1", "bot"); x != y {
		t.Fatalf("one token, one id: %+v %+v", x, y)
	}
	if x := req("t:1", "\x01bad"); x.key != "t:1" {
		t.Fatalf("unprintable id: %+v", x)
	}
}

// Any path under a valid token, or without one: no panic, nothing from
// outside the embedded assets, and nothing at all without the token.
func FuzzPanelPath(f *testing.F) {
	sp := proc.NewSpawner()
	// Programs that do not exist: a path that would start the desktop
	// fails at once instead of starting one per input.
	st := desktop.New(desktop.Config{RunDir: f.TempDir(), XvfbPath: "/nonexistent/Xvfb", ChromiumPath: "/nonexistent/chromium"}, sp)
	f.Cleanup(func() { st.Close(context.Background()); sp.Close() })
	s := New(Config{PanelSecret: secret, SandboxID: "sb1", Stack: st})
	f.Cleanup(s.Close)
	h := s.Handler()
	tok, err := panel.Mint(secret, panel.Claims{SID: "sb1", Scope: panel.ScopeView, Exp: time.Now().Add(24 * time.Hour).Unix()})
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"/vnc.html", "/../../../../etc/passwd", "/vendor/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc%2fpasswd",
		"/vendor/novnc/..%5c..%5cetc%5cpasswd", "/%00", "//etc/passwd", "/api/desktop/status", "/cdp/json/version", "/terminal/ws?session=x"} {
		f.Add(true, p)
		f.Add(false, p)
	}
	f.Fuzz(func(t *testing.T, withToken bool, p string) {
		target := p
		if withToken {
			target = "/panel/" + tok + p
		}
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host != "" {
			return
		}
		req := &http.Request{Method: http.MethodGet, URL: u, RequestURI: target, Host: "127.0.0.1:8080", Header: http.Header{},
			Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		req = req.WithContext(context.Background())
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if strings.Contains(rec.Body.String(), "root:x:0:0") {
			t.Fatalf("GET %q served /etc/passwd", target)
		}
		if !strings.HasPrefix(u.EscapedPath(), "/panel/"+tok+"/") && rec.Code != http.StatusForbidden && rec.Code != http.StatusMovedPermanently {
			t.Fatalf("GET %q without a token under it: %d", target, rec.Code)
		}
	})
}

// FuzzA11yQuery: a snapshot's options parse or are refused, never panic,
// and what parses is within the bounds.
func FuzzA11yQuery(f *testing.F) {
	for _, q := range []string{"", "interactive=1&max_nodes=5", "region=1,2,3,4&format=text", "max_nodes=0", "timeout_ms=1e9", "all=true&full=0&max_depth=256"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		o, _, err := a11yQuery(q)
		if err != nil {
			return
		}
		if o.MaxNodes < 0 || o.MaxNodes > a11y.MaxNodes || o.MaxDepth < 0 || o.MaxDepth > a11y.MaxDepth || o.Timeout < 0 || o.Timeout > a11y.MaxTimeout {
			t.Fatalf("%q parsed out of bounds: %+v", raw, o)
		}
	})
}
