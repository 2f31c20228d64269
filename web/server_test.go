package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/proc"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var secret = []byte("web-test-secret")

// newServer returns a Server over an idle stack (nothing is started).
func newServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	sp := proc.NewSpawner()
	st := desktop.New(desktop.Config{RunDir: t.TempDir()}, sp)
	t.Cleanup(func() { st.Close(t.Context()); sp.Close() })
	cfg.Stack = st
	return New(cfg)
}

func token(t *testing.T, c panel.Claims) string {
	t.Helper()
	if c.Exp == 0 {
		c.Exp = time.Now().Add(time.Hour).Unix()
	}
	tok, err := panel.Mint(secret, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// get sends a request as a local client of the port would: Host is the
// loopback address, and a POST says it carries JSON.
func get(t *testing.T, h http.Handler, method, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, target, nil)
	req.Host = "127.0.0.1:8080"
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	h.ServeHTTP(rec, req)
	return rec
}

func TestPanelCheck(t *testing.T) {
	s := newServer(t, Config{PanelSecret: secret, SandboxID: "sb1", HTTPPort: 8080})
	h := s.Handler()
	good := token(t, panel.Claims{SID: "sb1"})
	ourPort := token(t, panel.Claims{SID: "sb1", Port: 8080})
	otherPort := token(t, panel.Claims{SID: "sb1", Port: 3000})
	view := token(t, panel.Claims{SID: "sb1", Scope: panel.ScopeView})
	expired := token(t, panel.Claims{SID: "sb1", Exp: time.Now().Add(-time.Second).Unix()})
	other := token(t, panel.Claims{SID: "sb2"})
	tampered := good[:len(good)-2] + "AA"
	tests := []struct {
		name, method, path string
		want               int
		body               string // substring of the body
	}{
		{"asset", "GET", "/panel/" + good + "/vnc.html", 200, "desktop.js"},
		{"vendor asset", "GET", "/panel/" + good + "/vendor/novnc/core/rfb.js", 200, "export default class RFB"},
		{"terminal page", "GET", "/panel/" + good + "/terminal/", 200, "terminal.js"},
		{"healthz", "GET", "/panel/" + good + "/healthz", 200, "ok"},
		{"status", "GET", "/panel/" + good + "/api/desktop/status", 200, `"status":"stopped"`},
		{"status urls keep prefix", "GET", "/panel/" + good + "/api/desktop/status", 200, "/panel/" + good + "/vnc.html"},
		{"no slash redirects", "GET", "/panel/" + good + "?x=1", 301, ""},
		{"view token reads pages", "GET", "/panel/" + view + "/vnc.html", 200, ""},
		{"view token: no API", "GET", "/panel/" + view + "/api/desktop/status", 403, "forbidden"},
		{"view token: no start", "POST", "/panel/" + view + "/api/desktop/start", 403, "forbidden"},
		{"no token", "GET", "/vnc.html", 403, "forbidden"},
		{"no token healthz", "GET", "/healthz", 403, "forbidden"},
		{"no token readyz", "GET", "/readyz", 403, "forbidden"},
		{"no token livez", "GET", "/livez", 403, "forbidden"},
		{"view token readyz", "GET", "/panel/" + view + "/readyz", 200, "ready"},
		{"livez", "GET", "/panel/" + good + "/livez", 200, "ok"},
		{"readyz with a query", "GET", "/panel/" + good + "/readyz?verbose=%00", 200, "ready"},
		{"readyz POST", "POST", "/panel/" + good + "/readyz", 405, ""},
		{"no token metrics", "GET", "/metrics", 403, "forbidden"},
		{"empty token", "GET", "/panel//vnc.html", 403, "forbidden"},
		{"garbage token", "GET", "/panel/xyz/vnc.html", 403, "forbidden"},
		{"expired", "GET", "/panel/" + expired + "/vnc.html", 403, "forbidden"},
		{"tampered", "GET", "/panel/" + tampered + "/vnc.html", 403, "forbidden"},
		{"other sandbox", "GET", "/panel/" + other + "/vnc.html", 403, "forbidden"},
		{"our port", "GET", "/panel/" + ourPort + "/vnc.html", 200, "desktop.js"},
		{"other port of the sandbox", "GET", "/panel/" + otherPort + "/vnc.html", 403, "forbidden"},
		{"unknown path", "GET", "/panel/" + good + "/nope.js", 404, ""},
		{"cdp: unknown json endpoint", "GET", "/panel/" + good + "/cdp/json/bogus", 404, "no such DevTools endpoint"},
		{"cdp: bad target id", "GET", "/panel/" + good + "/cdp/json/close/a%2Fb", 404, ""},
		{"cdp: bad devtools path", "GET", "/panel/" + good + "/cdp/devtools/page/x/y", 404, "no such DevTools target"},
		{"cdp: devtools without upgrade", "GET", "/panel/" + good + "/cdp/devtools/page/ABC", 400, "WebSocket only"},
		// The mux sends unclean paths to their clean form (and outside the
		// token's prefix: a redirect serves nothing).
		{"cdp: frontend outside devtools", "GET", "/panel/" + good + "/cdp/devtools/../json/version", 307, ""},
		{"cdp: frontend dot segment", "GET", "/panel/" + good + "/cdp/devtools/core/%2e%2e/x.js", 307, ""},
		{"cdp: frontend double slash", "GET", "/panel/" + good + "/cdp/devtools//etc/passwd", 307, ""},
		{"cdp: frontend encoded slash", "GET", "/panel/" + good + "/cdp/devtools/core%2f..%2f..%2fx.js", 307, ""},
		{"cdp: frontend hidden file", "GET", "/panel/" + good + "/cdp/devtools/.git/config", 404, "no such DevTools frontend file"},
		{"cdp: frontend bad char", "GET", "/panel/" + good + "/cdp/devtools/a%00b.js", 404, "no such DevTools frontend file"},
		{"cdp: frontend too long", "GET", "/panel/" + good + "/cdp/devtools/" + strings.Repeat("a", 300) + ".js", 404, "no such DevTools frontend file"},
		{"cdp: frontend view token", "GET", "/panel/" + view + "/cdp/devtools/inspector.html", 403, "forbidden"},
		{"cdp: frontend PUT", "PUT", "/panel/" + good + "/cdp/devtools/inspector.html", 405, ""},
		{"cdp: view token", "GET", "/panel/" + view + "/cdp/json/version", 403, "forbidden"},
		{"cdp: view token ws", "GET", "/panel/" + view + "/cdp", 403, "forbidden"},
		{"wrong method", "GET", "/panel/" + good + "/api/desktop/stop", 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := get(t, h, tt.method, tt.path)
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.body) {
				t.Fatalf("%s %s = %d %.200q; want %d containing %q", tt.method, tt.path, rec.Code, rec.Body.String(), tt.want, tt.body)
			}
			if tt.want == 403 && rec.Body.String() != "forbidden\n" {
				t.Fatalf("403 body %q serves more than a refusal", rec.Body.String())
			}
		})
	}
	if loc := get(t, h, "GET", "/panel/"+good+"?x=1").Header().Get("Location"); loc != "/panel/"+good+"/?x=1" {
		t.Errorf("redirect to %q", loc)
	}
}

func TestNoSecretServesRoot(t *testing.T) {
	h := newServer(t, Config{}).Handler()
	for _, p := range []string{"/", "/vnc.html", "/terminal/", "/healthz", "/api/desktop/status"} {
		if rec := get(t, h, "GET", p); rec.Code != 200 {
			t.Errorf("GET %s = %d", p, rec.Code)
		}
	}
	rec := get(t, h, "GET", "/vnc.html")
	if rec.Header().Get("X-Frame-Options") != "" {
		t.Error("pages must be frameable")
	}
	if ct := get(t, h, "GET", "/vendor/xterm/lib/xterm.mjs").Header().Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("xterm.mjs served as %q; module scripts need a JavaScript type", ct)
	}
}

func TestStartRequestBounds(t *testing.T) {
	h := newServer(t, Config{}).Handler()
	for _, body := range []string{`{"resolution":"99999x1"}`, `{"resolution":"1024x768x16"}`, `{"bogus":1}`, `{` + strings.Repeat(" ", maxAPIBody) + `}`, `[]`,
		`{"url":"--renderer-cmd-prefix=/bin/sh"}`, `{"url":"javascript:alert(1)"}`, `{"url":"http://x/\u0000"}`, `{"tab_follow":"off"}`, `{"tab_follow":1}`,
		`{"a11y":"on"}`, `{"a11y":"--no-sandbox"}`, `{"a11y":1}`, `{"a11y":"complete\n"}`} {
		req := httptest.NewRequest("POST", "/api/desktop/start", strings.NewReader(body))
		req.Host = "localhost:8080"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "bad start request") {
			t.Errorf("start %.40q = %d %q; want 400", body, rec.Code, rec.Body.String())
		}
	}
}

func TestMetrics(t *testing.T) {
	s := newServer(t, Config{})
	h := s.Handler()
	get(t, h, "GET", "/vnc.html")
	body := get(t, h, "GET", "/metrics").Body.String()
	for _, want := range []string{
		`cubepod_desktop_activations_total{result="ok"} 0`,
		`cubepod_desktop_activations_total{result="error"} 0`,
		"cubepod_panel_active_sessions 1",
		`cubepod_desktop_component_up{component="chromium"} 0`,
		"cubepod_terminal_sessions 0",
		"go_goroutines",
		"process_resident_memory_bytes",
		"process_cpu_seconds_total",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The text format: HELP and TYPE before each family's samples, one
	// sample a line, names and numbers well formed.
	sampleLine := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (-?[0-9.e+-]+|NaN|[+-]Inf)$`)
	typed := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			typed[f[2]] = true
			continue
		}
		if strings.HasPrefix(l, "# HELP ") {
			continue
		}
		m := sampleLine.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("not a sample line: %q", l)
		}
		if !typed[m[1]] {
			t.Fatalf("sample %q before its TYPE", l)
		}
		if m[1] == "process_resident_memory_bytes" && m[4] == "0" {
			t.Fatal("resident memory 0")
		}
	}
}

func TestSessionsBounded(t *testing.T) {
	ss := newSessions(time.Minute)
	t0 := time.Now()
	release := ss.hold("held", t0)
	for i := range 2 * maxSessions {
		ss.seen(string(rune(i))+"k", t0.Add(time.Duration(i)))
	}
	if n := ss.active(t0); n > maxSessions {
		t.Fatalf("%d sessions kept, bound %d", n, maxSessions)
	}
	if n := ss.active(t0.Add(2 * time.Hour)); n != 1 {
		t.Fatalf("after idle window: %d active, want the held one", n)
	}
	release()
	if n := ss.active(t0.Add(4 * time.Hour)); n != 0 {
		t.Fatalf("released session still active: %d", n)
	}
}

// TestAssetsComplete reads every page and script we wrote and checks
// that each relative URL they load is in the embedded files, so a page
// never meets a 404 for an asset.
func TestAssetsComplete(t *testing.T) {
	if vendorMissing() {
		t.Fatal("static/vendor is empty: run `make assets` first")
	}
	ref := regexp.MustCompile(`(?:src|href)="([^"#?:]+)"|from '(\.[^']+)'|import\s+'(\.[^']+)'`)
	checked := 0
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(p, "static/vendor/xterm/") {
			return err
		}
		if !strings.HasSuffix(p, ".html") && !strings.HasSuffix(p, ".js") {
			return nil
		}
		b, _ := fs.ReadFile(static, p)
		dir := p[:strings.LastIndexByte(p, '/')]
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			u := m[1] + m[2] + m[3]
			if u == "" || strings.HasPrefix(u, "/") || strings.HasPrefix(u, "cdp/") {
				continue // cdp/ is served by a route, not a file
			}
			target := clean(dir + "/" + u)
			if strings.HasSuffix(target, "/") || target == dir {
				target += "/index.html"
			}
			if _, err := fs.Stat(static, strings.TrimSuffix(strings.ReplaceAll(target, "//", "/"), "/")); err != nil {
				t.Errorf("%s loads %q: %v", p, u, err)
			}
			checked++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Fatalf("only %d references checked; the pattern has gone stale", checked)
	}
}

func clean(p string) string {
	var out []string
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case ".", "":
		case "..":
			out = out[:len(out)-1]
		default:
			out = append(out, seg)
		}
	}
	s := strings.Join(out, "/")
	if strings.HasSuffix(p, "/") {
		s += "/"
	}
	return s
}

func TestPublicBase(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string]string
		host    string
		want    string
	}{
		{"plain", nil, "127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"forwarded", map[string]string{"X-Forwarded-Proto": "https", "X-Forwarded-Host": "gw.example, proxy", "X-Forwarded-Prefix": "/panel/t/"}, "10.0.0.1:8080", "https://gw.example/panel/t"},
		{"bad proto ignored", map[string]string{"X-Forwarded-Proto": "javascript"}, "h:1", "http://h:1"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.Host = tt.host
		for k, v := range tt.headers {
			r.Header.Set(k, v)
		}
		if got := publicBase(r, ""); got != tt.want {
			t.Errorf("%s: publicBase = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// A start that cannot happen because Xvfb is not installed is counted as
// unsupported, not as an error (CEP's dashboards tell the two apart).
func TestActivationUnsupported(t *testing.T) {
	sp := proc.NewSpawner()
	st := desktop.New(desktop.Config{RunDir: t.TempDir(), XvfbPath: "/nonexistent/Xvfb"}, sp)
	t.Cleanup(func() { st.Close(t.Context()); sp.Close() })
	h := New(Config{Stack: st}).Handler()
	if rec := get(t, h, "POST", "/api/desktop/start"); rec.Code < 500 || !strings.Contains(rec.Body.String(), "not supported") {
		t.Fatalf("start without Xvfb = %d %s", rec.Code, rec.Body.String())
	}
	body := get(t, h, "GET", "/metrics").Body.String()
	for _, want := range []string{
		`cubepod_desktop_activations_total{result="unsupported"} 1`,
		`cubepod_desktop_activations_total{result="error"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
