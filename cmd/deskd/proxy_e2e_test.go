package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
)

// proxiedSite is a web site the desktop reaches only through a proxy: its
// pages are named *.test, which only the test proxies route (to it).
func proxiedSite(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<title>via-proxy "+r.Host+"</title><body>through the proxy</body>")
	})}
	go srv.Serve(ln) // ends at Close
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// waitTitle waits until a desktop tab has title want.
func waitTitle(t *testing.T, cdpBase, want string) {
	t.Helper()
	var titles []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var list []struct{ Type, Title, URL string }
		getJSON(t, cdpBase+"/json/list", &list)
		titles = titles[:0]
		for _, tg := range list {
			if tg.Type == "page" && tg.Title == want {
				return
			}
			titles = append(titles, tg.Title+" "+tg.URL)
		}
	}
	t.Fatalf("no tab titled %q; tabs: %q", want, titles)
}

// navigate sends the desktop's first tab to u over CDP.
func navigate(t *testing.T, cdpBase, u string) {
	t.Helper()
	var list []struct{ Type, WebSocketDebuggerURL string }
	getJSON(t, cdpBase+"/json/list", &list)
	for _, tg := range list {
		if tg.Type == "page" {
			c := dialCDP(t, t.Context(), tg.WebSocketDebuggerURL, nil)
			if _, err := c.call(t.Context(), "Page.navigate", map[string]any{"url": u}); err != nil {
				t.Fatalf("navigate %s: %v", u, err)
			}
			return
		}
	}
	t.Fatal("no page to navigate")
}

func deskdStatus(t *testing.T, cdpBase string) map[string]any {
	t.Helper()
	var st map[string]any
	getJSON(t, strings.TrimSuffix(cdpBase, "/cdp")+"/api/desktop/status", &st)
	return st
}

// waitProxyStatus waits until status's "proxy" holds want.
func waitProxyStatus(t *testing.T, cdpBase, want string) map[string]any {
	t.Helper()
	var st map[string]any
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st = deskdStatus(t, cdpBase)
		if p, _ := st["proxy"].(string); strings.Contains(p, want) {
			return st
		}
	}
	t.Fatalf("status proxy %q, want %q", st["proxy"], want)
	return nil
}

// The desktop's Chromium goes through an upstream proxy that demands
// credentials, with no prompt: an HTTP proxy with Basic auth from
// --proxy and a credentials file, then a SOCKS5 one with a username and
// password from a start request through the gateway (which restarts
// Chromium alone); wrong credentials show as a clear status; no
// credential is on any child's command line or in its environment, in
// the status or in the logs.
func TestBrowserThroughAuthenticatedProxy(t *testing.T) {
	testenv.Chromium(t)
	site := proxiedSite(t)
	const httpPass, socksPass = "http-pw-58213", "socks-pw-77410"
	up := testenv.NewAuthProxy(t, "agent", httpPass, site)
	socks := testenv.NewSocks5Proxy(t, "s-agent", socksPass, site)
	credFile := filepath.Join(t.TempDir(), "proxy.creds")
	if err := os.WriteFile(credFile, []byte("agent:"+httpPass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newInstall(t, "--proxy", up.URL, "--proxy-credentials-file", credFile, "--proxy-bypass", "*.internal")
	e.useDisplay(t)
	deskd := serveDeskd(t, e)
	gw := gateway(t, map[string]*url.URL{"sb1": deskd})
	sr, st0 := startWith(t, gw, "http://first.test/")
	cdpBase := sr.CDPURL
	waitTitle(t, cdpBase, "via-proxy first.test")
	st := waitProxyStatus(t, cdpBase, up.URL+": ok")
	pids := func(st map[string]any) map[string]any { return st["pids"].(map[string]any) }
	xvfb, chrome := pids(st0)["xvfb"], pids(st)["chromium"]
	if len(up.Auths()) == 0 {
		t.Fatal("the page came without the upstream proxy")
	}

	// A start request (through the gateway) sends it through SOCKS5:
	// Chromium restarts, Xvfb stays.
	start := func(body map[string]any) int {
		b, _ := json.Marshal(body)
		resp, err := http.Post(gw+"/sandboxes/sb1/desktop/start", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := start(map[string]any{"proxy": map[string]any{"server": socks, "username": "s-agent", "password": socksPass}}); code != 200 {
		t.Fatalf("start with a SOCKS5 proxy: %d", code)
	}
	st = deskdStatus(t, cdpBase)
	if pids(st)["xvfb"] != xvfb || pids(st)["chromium"] == chrome {
		t.Fatalf("a proxy change: xvfb %v -> %v, chromium %v -> %v; want Chromium alone restarted", xvfb, pids(st)["xvfb"], chrome, pids(st)["chromium"])
	}
	navigate(t, cdpBase, "http://second.test/")
	waitTitle(t, cdpBase, "via-proxy second.test")
	waitProxyStatus(t, cdpBase, socks+": ok")

	// Wrong credentials: a clear status, no prompt, no password.
	if code := start(map[string]any{"proxy": map[string]any{"server": socks, "username": "s-agent", "password": "wrong-pw-1"}}); code != 200 {
		t.Fatalf("start: %d", code)
	}
	navigate(t, cdpBase, "http://third.test/")
	st = waitProxyStatus(t, cdpBase, "refused the credentials")
	// A bad setting is refused and changes nothing.
	if code := start(map[string]any{"proxy": map[string]any{"server": "http://u:p@proxy.example:1"}}); code != http.StatusBadRequest {
		t.Fatalf("a proxy URL with credentials: %d, want 400", code)
	}

	// No credential anywhere it could leak.
	secrets := []string{httpPass, socksPass, "wrong-pw-1"}
	statusJSON, _ := json.Marshal(st)
	daemon := int(st["pids"].(map[string]any)["deskd"].(float64))
	seen := noSecretsIn(t, append(descendants(daemon), daemon),
		map[string]string{"HTTP proxy password": httpPass, "SOCKS5 proxy password": socksPass, "wrong proxy password": "wrong-pw-1"})
	if !seen["chromium"] {
		t.Errorf("no chromium among the daemon's processes %v: the check did not see it", seen)
	}
	logs, _ := filepath.Glob(filepath.Join(e.runDir, "logs", "*"))
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a proxy password", f)
			}
		}
	}
	dlog := e.daemonLog.String()
	for _, s := range secrets {
		if strings.Contains(dlog, s) {
			t.Errorf("deskd's log holds a proxy password")
		}
	}
	if !strings.Contains(dlog, "refused the credentials") {
		t.Errorf("deskd's log does not say the upstream refused the credentials:\n%s", tail(dlog, 2000))
	}
	for _, s := range secrets {
		if bytes.Contains(statusJSON, []byte(s)) {
			t.Errorf("status %s holds a proxy password", statusJSON)
		}
	}
	t.Logf("proxy status after wrong credentials: %q", st["proxy"])
}
