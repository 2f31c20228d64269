package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/coder/websocket"
	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/panel"
)

// cdpEnv is deskd in panel mode behind the gateway, nothing started yet.
type cdpEnv struct {
	*install
	gw     string // gateway base URL
	tok    string // full-scope token for sandbox sb1
	base   string // gw/panel/<tok>/cdp
	wsBase string // the same as a ws URL
	port   int    // deskd's port
}

func cdpSetup(t *testing.T, extra ...string) *cdpEnv {
	t.Helper()
	testenv.Chromium(t)
	e := newInstall(t, extra...)
	deskd := serveDeskd(t, e)
	c := &cdpEnv{install: e, gw: gateway(t, map[string]*url.URL{"sb1": deskd}), port: deskdPort(deskd)}
	c.tok = c.mint(t, panel.ScopeFull)
	c.base = c.gw + "/panel/" + c.tok + "/cdp"
	c.wsBase = "ws" + strings.TrimPrefix(c.base, "http")
	return c
}

func (c *cdpEnv) mint(t *testing.T, scope panel.Scope) string {
	tok, err := panel.Mint([]byte(e2eKey), panel.Claims{SID: "sb1", Port: c.port, Exp: time.Now().Add(time.Hour).Unix(), Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	code, b := fetch(t, u)
	if code != 200 {
		t.Fatalf("GET %s: %d %s", u, code, b)
	}
	if err := json.Unmarshal([]byte(b), v); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, b)
	}
}

// putJSON PUTs to u (as agents open tabs: PUT /json/new) and decodes.
func putJSON(t *testing.T, u string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("PUT %s: %d %s", u, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("PUT %s: %v: %s", u, err, b)
	}
}

type agentResult struct {
	Value string
	PNG   int
	Sig   []int
}

// runAgent runs testdata/agents.mjs (real Playwright or Puppeteer).
func runAgent(t *testing.T, mode, endpoint string) agentResult {
	t.Helper()
	testenv.LookPath(t, "node")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "testdata/agents.mjs", mode, endpoint)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s agent: %v\n%s", mode, err, errb.String())
	}
	var r agentResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%s agent printed %q: %v", mode, out.String(), err)
	}
	return r
}

func checkAgent(t *testing.T, name string, r agentResult) {
	t.Helper()
	if r.Value != "hello:42" || r.PNG < 1000 || fmt.Sprint(r.Sig) != "[137 80 78 71]" {
		t.Fatalf("%s: evaluate %q, screenshot %d bytes starting %v; want hello:42 and a PNG", name, r.Value, r.PNG, r.Sig)
	}
	t.Logf("%s: evaluate ok, screenshot %d bytes", name, r.PNG)
}

func TestCDPAgents(t *testing.T) {
	c := cdpSetup(t)
	if st, _ := c.run("status"); st["status"] != "stopped" {
		t.Fatalf("desktop running before any CDP request: %v", st)
	}

	// Playwright with the http panel URL; its first request starts the
	// desktop and waits for Chromium.
	checkAgent(t, "playwright", runAgent(t, "playwright", c.base))

	// Discovery answers point back through the panel.
	var ver struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	getJSON(t, c.base+"/json/version/", &ver) // trailing slash, as Playwright asks
	if !strings.HasPrefix(ver.WebSocketDebuggerURL, c.wsBase+"/devtools/browser/") {
		t.Fatalf("webSocketDebuggerUrl %q not under %s", ver.WebSocketDebuggerURL, c.wsBase)
	}
	var created struct {
		ID                   string `json:"id"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
		DevtoolsFrontendURL  string `json:"devtoolsFrontendUrl"`
	}
	if code, _ := fetch(t, c.base+"/json/new?about:blank"); code != http.StatusMethodNotAllowed {
		t.Fatalf("GET /json/new = %d; only PUT may open a tab", code)
	}
	putJSON(t, c.base+"/json/new?about:blank", &created)
	if created.ID == "" || created.WebSocketDebuggerURL != c.wsBase+"/devtools/page/"+created.ID {
		t.Fatalf("json/new: %+v", created)
	}
	fe, _ := url.Parse(created.DevtoolsFrontendURL)
	gwHost := strings.TrimPrefix(c.gw, "http://")
	if got := fe.Query().Get("ws"); got != gwHost+"/panel/"+c.tok+"/cdp/devtools/page/"+created.ID {
		t.Fatalf("devtoolsFrontendUrl ws=%q does not point through the panel", got)
	}
	var list []struct {
		ID                   string `json:"id"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	getJSON(t, c.base+"/json/list", &list)
	found := false
	for _, tg := range list {
		if tg.WebSocketDebuggerURL != "" && !strings.HasPrefix(tg.WebSocketDebuggerURL, c.wsBase+"/devtools/") {
			t.Fatalf("list entry %+v escapes the panel", tg)
		}
		found = found || tg.ID == created.ID
	}
	if !found {
		t.Fatalf("new target %s not in /json/list", created.ID)
	}
	if code, body := fetch(t, c.base+"/json/close/"+created.ID); code != 200 {
		t.Fatalf("json/close: %d %s", code, body)
	}

	// Puppeteer with the rewritten browser URL, and with the stable /cdp.
	checkAgent(t, "puppeteer (browser url)", runAgent(t, "puppeteer", ver.WebSocketDebuggerURL))
	checkAgent(t, "puppeteer (stable /cdp)", runAgent(t, "puppeteer", c.wsBase))

	// chromedp's remote allocator: with the rewritten browser URL as it
	// is, and with the stable /cdp (chromedp would replace a URL without
	// /devtools/browser/ by http://host/json/version, dropping the panel
	// prefix and its token, so that one needs remote.NoModifyURL).
	runChromedp(t, "chromedp (browser url)", remote.NewAllocator, ver.WebSocketDebuggerURL)
	runChromedp(t, "chromedp (stable /cdp)", remote.NewAllocator, c.wsBase, remote.NoModifyURL)

	// A view-only token reaches no CDP at all; no token, nothing either.
	view := c.mint(t, panel.ScopeView)
	for _, u := range []string{c.gw + "/panel/" + view + "/cdp/json/version", "http://" + c.listen + "/cdp/json/version"} {
		if code, _ := fetch(t, u); code != 403 {
			t.Fatalf("%s: %d, want 403", u, code)
		}
	}
}

func runChromedp(t *testing.T, name string, alloc func(context.Context, string, ...remote.Option) (context.Context, context.CancelFunc), u string, opts ...remote.Option) {
	t.Helper()
	actx, cancelA := alloc(t.Context(), u, opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, time.Minute)
	defer cancelT()
	if err := chromedp.Do(ctx, chromedp.Navigate(`data:text/html,<h1 id="h">hello</h1>`)); err != nil {
		t.Fatalf("%s navigate: %v", name, err)
	}
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("h").textContent + ":" + 6*7`))
	if err != nil || v != "hello:42" {
		t.Fatalf("%s evaluate = %q, %v", name, v, err)
	}
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil || !bytes.HasPrefix(shot, []byte("\x89PNG")) {
		t.Fatalf("%s screenshot: %d bytes, %v", name, len(shot), err)
	}
	t.Logf("%s: evaluate ok, screenshot %d bytes", name, len(shot))
}

// cdpConn is a raw CDP client over a WebSocket.
type cdpConn struct {
	c  *websocket.Conn
	id int
}

func dialCDP(t *testing.T, ctx context.Context, u string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *cdpConn {
	t.Helper()
	opts := &websocket.DialOptions{}
	if dial != nil {
		opts.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: dial}}
	}
	c, _, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return &cdpConn{c: c}
}

// call sends one command and returns its result, skipping events.
func (c *cdpConn) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	c.id++
	msg, _ := json.Marshal(map[string]any{"id": c.id, "method": method, "params": params})
	if err := c.c.Write(ctx, websocket.MessageText, msg); err != nil {
		return nil, err
	}
	for {
		typ, b, err := c.c.Read(ctx)
		if err != nil {
			return nil, err
		}
		if typ != websocket.MessageText {
			return nil, fmt.Errorf("reply in a %v frame: CDP is text", typ)
		}
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		if r.ID != c.id {
			continue
		}
		if r.Error != nil {
			return nil, fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		return r.Result, nil
	}
}

func TestCDPLargeMessage(t *testing.T) {
	c := cdpSetup(t)
	var created struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	putJSON(t, c.base+"/json/new", &created)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pc := dialCDP(t, ctx, created.WebSocketDebuggerURL, nil)
	const n = 30 << 20
	t0 := time.Now()
	res, err := pc.call(ctx, "Runtime.evaluate", map[string]any{
		"expression": fmt.Sprintf(`"0123456789abcdef".repeat(%d)`, n/16), "returnByValue": true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Result.Value) != n || r.Result.Value[n-16:] != "0123456789abcdef" || strings.Count(r.Result.Value[:4096], "0123456789abcdef") != 256 {
		t.Fatalf("30 MiB string came back as %d bytes", len(r.Result.Value))
	}
	t.Logf("30 MiB reply through gateway and relay in %v", time.Since(t0).Round(time.Millisecond))
}

// TestCDPHeartbeatKeepsIdleAlive: behind a proxy that cuts connections
// idle for 30 s, a relayed CDP connection left idle for 2 minutes is
// still usable, while a silent connection through the same proxy is cut.
func TestCDPHeartbeatKeepsIdleAlive(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 2 minutes")
	}
	t.Parallel()
	c := cdpSetup(t)
	gwAddr := strings.TrimPrefix(c.gw, "http://")
	proxy := testenv.IdleProxy(t, gwAddr, 30*time.Second)
	viaProxy := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", proxy)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	cc := dialCDP(t, ctx, c.wsBase, viaProxy)
	// The client library answers pings only while it reads: keep a read
	// pending, as every CDP client does, and take the reply from it.
	replies := make(chan []byte, 1)
	go func() {
		for {
			_, b, err := cc.c.Read(ctx)
			if err != nil {
				close(replies)
				return
			}
			replies <- b
		}
	}()
	silent, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silentCut := make(chan time.Duration, 1)
	t0 := time.Now()
	go func() {
		io.Copy(io.Discard, silent)
		silentCut <- time.Since(t0)
	}()

	time.Sleep(2 * time.Minute) // the idle period under test
	select {
	case d := <-silentCut:
		t.Logf("a silent connection through the proxy was cut after %v", d.Round(time.Second))
	default:
		t.Fatal("the proxy did not cut a silent connection: it does not enforce its timeout")
	}
	msg := []byte(`{"id":7,"method":"Browser.getVersion"}`)
	if err := cc.c.Write(ctx, websocket.MessageText, msg); err != nil {
		t.Fatalf("relayed connection died while idle: %v", err)
	}
	select {
	case b, ok := <-replies:
		if !ok || !bytes.Contains(b, []byte(`"id":7`)) || !bytes.Contains(b, []byte("Chrome/")) {
			t.Fatalf("after 2 idle minutes: reply %q (open %v)", b, ok)
		}
	case <-ctx.Done():
		t.Fatal("no reply after the idle period")
	}
}

func TestCDPChromiumDeath(t *testing.T) {
	c := cdpSetup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cc := dialCDP(t, ctx, c.wsBase, nil)
	if _, err := cc.call(ctx, "Browser.getVersion", nil); err != nil {
		t.Fatal(err)
	}
	st, _ := c.run("status")
	pid := int(st["pids"].(map[string]any)[desktop.Chromium].(float64))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, _, err := cc.c.Read(ctx)
	if got := websocket.CloseStatus(err); got != 1011 {
		t.Fatalf("after kill -9 chromium the agent got %v (%v), want close 1011", got, err)
	}
	t.Logf("agent told in %v: %v", time.Since(t0).Round(time.Millisecond), err)
	// The next connection works, on the restarted browser.
	cc2 := dialCDP(t, ctx, c.wsBase, nil)
	res, err := cc2.call(ctx, "Browser.getVersion", nil)
	if err != nil || !bytes.Contains(res, []byte("Chrome/")) {
		t.Fatalf("after restart: %s %v", res, err)
	}
	st, _ = c.run("status")
	if npid := int(st["pids"].(map[string]any)[desktop.Chromium].(float64)); npid == pid {
		t.Fatal("same chromium pid after kill")
	}
}
