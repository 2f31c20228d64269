package panel_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/web"
)

var gwSecret = []byte("gateway-test-secret")

// deskd is a real deskd HTTP handler in panel mode over an idle stack.
func deskd(t *testing.T) *url.URL {
	t.Helper()
	sp := proc.NewSpawner()
	st := desktop.New(desktop.Config{RunDir: t.TempDir()}, sp)
	srv := httptest.NewServer(web.New(web.Config{Stack: st, PanelSecret: []byte(panel.SandboxKey(gwSecret, "sb")), SandboxID: "sb"}).Handler())
	t.Cleanup(func() { srv.Close(); st.Close(t.Context()); sp.Close() })
	u, _ := url.Parse(srv.URL)
	return u
}

func newGateway(t *testing.T, cfg panel.GatewayConfig) *httptest.Server {
	t.Helper()
	cfg.Secret = gwSecret
	g, err := panel.NewGateway(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, u, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestGatewayControl(t *testing.T) {
	up := deskd(t)
	gw := newGateway(t, panel.GatewayConfig{Sandboxes: map[string]*url.URL{"sb": up}, APIKey: "k"})
	auth := []string{"Authorization", "Bearer k"}
	tests := []struct {
		name, method, path, body string
		hdr                      []string
		want                     int
		contains                 string
	}{
		{"status", "GET", "/sandboxes/sb/desktop/status", "", auth, 200, `"status":"stopped"`},
		{"stop", "POST", "/sandboxes/sb/desktop/stop", "", auth, 200, `"status":"stopped"`},
		{"no key", "GET", "/sandboxes/sb/desktop/status", "", nil, 401, "unauthorized"},
		{"wrong key", "GET", "/sandboxes/sb/desktop/status", "", []string{"Authorization", "Bearer x"}, 401, "unauthorized"},
		{"unknown sandbox", "GET", "/sandboxes/zz/desktop/status", "", auth, 404, "sandbox_not_found"},
		{"bad body", "POST", "/sandboxes/sb/desktop/start", `{"nope":1}`, auth, 400, "bad_request"},
		{"bad scope", "POST", "/sandboxes/sb/desktop/start", `{"scope":"root"}`, auth, 400, "unknown scope"},
		{"ttl too long", "POST", "/sandboxes/sb/desktop/start", `{"ttl":"48h"}`, auth, 400, "ttl"},
		{"body too big", "POST", "/sandboxes/sb/desktop/start", `{"url":"` + strings.Repeat("a", 5000) + `"}`, auth, 400, "bad_request"},
		{"wrong method", "GET", "/sandboxes/sb/desktop/start", "", auth, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := do(t, tt.method, gw.URL+tt.path, tt.body, tt.hdr...)
			if code != tt.want || !strings.Contains(body, tt.contains) {
				t.Fatalf("%s %s = %d %q; want %d with %q", tt.method, tt.path, code, body, tt.want, tt.contains)
			}
		})
	}
}

func TestGatewayNotInstalled(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	u, _ := url.Parse(srv.URL)
	srv.Close() // nothing listens there any more
	gw := newGateway(t, panel.GatewayConfig{Sandboxes: map[string]*url.URL{"sb": u}})
	for _, c := range []struct{ method, path string }{
		{"POST", "/sandboxes/sb/desktop/start"}, {"GET", "/sandboxes/sb/desktop/status"}, {"POST", "/sandboxes/sb/desktop/stop"},
	} {
		code, body := do(t, c.method, gw.URL+c.path, "")
		var e struct{ Error string }
		json.Unmarshal([]byte(body), &e)
		if code != http.StatusUnprocessableEntity || e.Error != "desktop_not_installed" {
			t.Errorf("%s %s = %d %s; want 422 desktop_not_installed", c.method, c.path, code, body)
		}
	}
}

func TestGatewayProxy(t *testing.T) {
	up := deskd(t)
	other := deskd(t)
	gw := newGateway(t, panel.GatewayConfig{Sandboxes: map[string]*url.URL{"sb": up, "zz": other}})
	mintWith := func(key string, c panel.Claims) string {
		if c.Exp == 0 {
			c.Exp = time.Now().Add(time.Hour).Unix()
		}
		tok, err := panel.Mint([]byte(key), c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	sbKey := panel.SandboxKey(gwSecret, "sb")
	mint := func(c panel.Claims) string { return mintWith(sbKey, c) }
	port := 0
	if p := up.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	full := mint(panel.Claims{SID: "sb", Port: port})
	view := mint(panel.Claims{SID: "sb", Port: port, Scope: panel.ScopeView})

	// The prefix is kept for deskd, which builds its URLs from the
	// forwarding headers: they point back at the gateway.
	code, body := do(t, "GET", gw.URL+"/panel/"+full+"/api/desktop/status", "")
	if code != 200 || !strings.Contains(body, `"desktop":"`+gw.URL+"/panel/"+full+"/vnc.html") {
		t.Fatalf("status through proxy: %d %s", code, body)
	}
	if code, body := do(t, "GET", gw.URL+"/panel/"+full+"/vnc.html", ""); code != 200 || !strings.Contains(body, "desktop.js") {
		t.Fatalf("page through proxy: %d", code)
	}
	if code, _ := do(t, "GET", gw.URL+"/panel/"+view+"/api/desktop/status", ""); code != 403 {
		t.Fatalf("view token reached the API: %d", code)
	}
	for name, tok := range map[string]string{
		"other sandbox": mint(panel.Claims{SID: "zz", Port: port}),
		// A sandbox knows its own key only: what it signs for another
		// sandbox, or with the master secret's place taken, is refused.
		"sb's key, zz's sid": mintWith(sbKey, panel.Claims{SID: "zz", Port: portOf(other)}),
		"zz's key, sb's sid": mintWith(panel.SandboxKey(gwSecret, "zz"), panel.Claims{SID: "sb", Port: port}),
		"master secret":      mintWith(string(gwSecret), panel.Claims{SID: "sb", Port: port}),
		"unknown sandbox":    mintWith(panel.SandboxKey(gwSecret, "nn"), panel.Claims{SID: "nn", Port: port}),
		"unsigned sid":       "eyJzaWQiOiJzYiJ9.AAAA",
		"other port":         mint(panel.Claims{SID: "sb", Port: 9222}),
		"expired":            mint(panel.Claims{SID: "sb", Port: port, Exp: time.Now().Add(-time.Second).Unix()}),
		"tampered":           full[:len(full)-4] + "AAAA",
	} {
		if code, body := do(t, "GET", gw.URL+"/panel/"+tok+"/vnc.html", ""); code != 403 || body != "forbidden\n" {
			t.Errorf("%s: %d %q", name, code, body)
		}
	}
	if code, _ := do(t, "GET", gw.URL+"/vnc.html", ""); code != 404 {
		t.Errorf("outside /panel/: %d", code)
	}
}

func portOf(u *url.URL) int {
	p, _ := strconv.Atoi(u.Port())
	return p
}

func TestSandboxKeys(t *testing.T) {
	a, b := panel.SandboxKey(gwSecret, "sb"), panel.SandboxKey(gwSecret, "zz")
	if a == b || a == panel.SandboxKey([]byte("other master"), "sb") || len(a) != 64 {
		t.Fatalf("keys not distinct per sandbox and master: %s %s", a, b)
	}
	tests := []struct {
		tok, want string
		wantErr   bool
	}{
		{"eyJzaWQiOiJzYiJ9.x", "sb", false},
		{"eyJzaWQiOiIifQ.x", "", true}, // empty sid
		{"!!!.x", "", true},
		{"nodot", "", true},
		{"e30.x", "", true}, // {}
		{strings.Repeat("a", panel.MaxTokenLen+1), "", true},
	}
	for _, tt := range tests {
		got, err := panel.PeekSID(tt.tok)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("PeekSID(%.30q) = %q, %v", tt.tok, got, err)
		}
	}
}

func FuzzPeekSID(f *testing.F) {
	f.Add("eyJzaWQiOiJzYiJ9.x")
	f.Add("e30.")
	f.Fuzz(func(t *testing.T, tok string) {
		sid, err := panel.PeekSID(tok)
		if err == nil && (sid == "" || len(sid) > panel.MaxSIDLen) {
			t.Fatalf("PeekSID(%q) = %q", tok, sid)
		}
	})
}

func TestParseSandbox(t *testing.T) {
	tests := []struct {
		in, id, host string
		wantErr      bool
	}{
		{"a=http://127.0.0.1:8080", "a", "127.0.0.1:8080", false},
		{"b=http://box", "b", "box:80", false},
		{"=http://x:1", "", "", true},
		{"c", "", "", true},
		{"d=ftp://x", "", "", true},
		{"e=http://", "", "", true},
	}
	for _, tt := range tests {
		id, u, err := panel.ParseSandbox(tt.in)
		if tt.wantErr != (err != nil) || (err == nil && (id != tt.id || u.Host != tt.host)) {
			t.Errorf("ParseSandbox(%q) = %q, %v, %v", tt.in, id, u, err)
		}
	}
}
