package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/x11"
)

const e2eSecret = "e2e-panel-secret"

// e2eKey is sandbox sb1's own panel key: what its deskd holds.
var e2eKey = panel.SandboxKey([]byte(e2eSecret), "sb1")

// testPage is what the desktop's Chromium shows: flat colours and text.
const testPage = `data:text/html,<body style='margin:0;background:%23204080'><div style='position:fixed;left:0;top:0;width:50%;height:50%;background:%23ff8800'></div><h1 style='position:fixed;top:60%;left:10%;color:white;font:48px sans-serif'>deskd 0123</h1><input id='i' style='position:fixed;right:5%;bottom:5%;font-size:24px'><script>window.clicks=0;document.body.onclick=e=>{window.clicks++;document.getElementById('i').focus()}</script></body>`

// gateway runs the reference gateway in-process in front of deskd.
func gateway(t *testing.T, sandboxes map[string]*url.URL) string {
	t.Helper()
	g, err := panel.NewGateway(panel.GatewayConfig{Secret: []byte(e2eSecret), Sandboxes: sandboxes, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g}
	go srv.Serve(l) // ends at Close below
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String()
}

// serveDeskd runs `deskd serve` in panel mode and returns its base URL.
func serveDeskd(t *testing.T, e *install) *url.URL {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	keyFile := filepath.Join(testenv.TempDir(t), "panel.key")
	if err := os.WriteFile(keyFile, []byte(e2eKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, deskdBin, append([]string{"serve", "--sandbox-id", "sb1", "--panel-secret-file", keyFile}, e.flags...)...)
	logs := &lockedBuffer{}
	cmd.Stderr = logs
	e.daemonLog = logs
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("deskd log:\n%s", tail(logs.String(), 4000))
		}
	})
	u, _ := url.Parse("http://" + e.listen)
	// In panel mode nothing answers without a token: wait for the 403.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(u.String() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("unauthenticated /healthz = %d, want 403", resp.StatusCode)
			}
			return u
		}
		if time.Now().After(deadline) {
			t.Fatalf("deskd not up: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // no readiness event across processes
	}
}

func post(t *testing.T, u string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(`{"url":"`+testPage+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func fetch(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestPanelInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	e := newInstall(t)
	e.useDisplay(t) // the test reads the display (xdpyinfo, xclip, captures)
	deskd := serveDeskd(t, e)
	closed := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))}
	gw := gateway(t, map[string]*url.URL{"sb1": deskd, "absent": closed})

	// The control plane's call: start the desktop, get the URLs.
	code, body := post(t, gw+"/sandboxes/sb1/desktop/start")
	if code != http.StatusOK {
		t.Fatalf("start via gateway: %d %s", code, body)
	}
	var sr panel.StartResponse
	if err := json.Unmarshal(body, &sr); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{sr.DesktopURL, sr.TerminalURL, sr.CDPURL} {
		if !strings.HasPrefix(u, gw+"/panel/") {
			t.Fatalf("url %q not under the gateway's /panel/", u)
		}
	}
	if time.Until(sr.ExpiresAt) < 59*time.Minute {
		t.Fatalf("expiresAt %v", sr.ExpiresAt)
	}
	var st map[string]any
	json.Unmarshal(sr.Status, &st)
	if st["status"] != "running" {
		t.Fatalf("desktop status %v", st)
	}
	if code, b := fetch(t, gw+"/sandboxes/sb1/desktop/status"); code != 200 || !strings.Contains(b, `"status":"running"`) {
		t.Fatalf("status via gateway: %d %s", code, b)
	}
	if code, b := post(t, gw+"/sandboxes/absent/desktop/start"); code != http.StatusUnprocessableEntity || !strings.Contains(string(b), "desktop_not_installed") {
		t.Fatalf("start on a sandbox without deskd: %d %s", code, b)
	}
	if code, _ := post(t, gw+"/sandboxes/nope/desktop/start"); code != http.StatusNotFound {
		t.Fatalf("unknown sandbox: %d", code)
	}

	// Bad, expired, tampered tokens: 403 and nothing else, at the
	// gateway and at deskd itself.
	tok, _, _ := panel.SplitPath(strings.TrimPrefix(sr.DesktopURL, gw))
	expired, _ := panel.Mint([]byte(e2eKey), panel.Claims{SID: "sb1", Port: deskdPort(deskd), Exp: time.Now().Add(-time.Minute).Unix()})
	forged, _ := panel.Mint([]byte("not-the-secret"), panel.Claims{SID: "sb1", Port: deskdPort(deskd), Exp: time.Now().Add(time.Hour).Unix()})
	for name, bad := range map[string]string{
		"tampered": tok[:len(tok)-3] + "abc", "expired": expired, "forged": forged, "garbage": "x.y",
	} {
		for _, base := range []string{gw, deskd.String()} {
			for _, p := range []string{"/vnc.html", "/vendor/novnc/core/rfb.js", "/api/desktop/status", "/metrics", "/terminal/"} {
				code, b := fetch(t, base+"/panel/"+bad+p)
				if code != http.StatusForbidden || b != "forbidden\n" {
					t.Errorf("%s token at %s%s: %d %.80q", name, base, p, code, b)
				}
			}
		}
	}
	if code, _ := fetch(t, deskd.String()+"/vnc.html"); code != http.StatusForbidden {
		t.Errorf("deskd served a page without a token: %d", code)
	}

	// A real browser loads both pages under /panel/<token>/.
	b := newBrowser(t, chromium)
	b.load(sr.DesktopURL, `document.body.dataset.state !== "loading" && !!window.deskd`)
	b.load(sr.TerminalURL, `!!document.querySelector(".xterm-screen") && !!window.deskdTerm`)
	b.load(strings.TrimSuffix(sr.DesktopURL, "/vnc.html?autoconnect=true&resize=scale")+"/", `!!document.querySelector("a[href^='vnc.html']")`)
	b.check(t)

	// The desktop, for real: noVNC's canvas shows what the X display shows.
	b.load(sr.DesktopURL, `document.body.dataset.state === "connected"`)
	b.check(t)
	compareCanvas(t, b, st["display"].(string))

	// Click and type through noVNC: the desktop's own Chromium, asked over
	// the CDP relay, saw both.
	page := desktopPage(t, strings.Replace(sr.CDPURL, "/vnc.html?autoconnect=true&resize=scale", "", 1))
	b.clickCanvas(t, 0.5, 0.8)
	// Keys sent before the click has focused the field would be lost.
	waitDesktop(t, page, `window.clicks >= 1 && document.activeElement === document.getElementById("i")`)
	if err := chromedp.Do(b.ctx, chromedp.SendKeys(chromedp.CSS("#screen canvas"), "Typed-42")); err != nil {
		t.Fatal(err)
	}
	waitDesktop(t, page, `document.getElementById("i").value === "Typed-42"`)

	// The clipboard both ways, in UTF-8, against xclip (an X client we
	// did not write): typed into the page's clipboard box it reaches X;
	// copied in X it shows up in the box.
	display := st["display"].(string)
	clipboardBothWays(t, b, display)

	// kill -9 Xvfb: the supervisor brings the display back, the page
	// reconnects, and what it shows is the new display.
	xvfbPid := int(st["pids"].(map[string]any)["xvfb"].(float64))
	b.eval(t, `(window.__oldRFB = window.deskd.rfb, "ok")`)
	if err := syscall.Kill(xvfbPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	b.waitJS(t, `document.body.dataset.state === "connected" && window.deskd.rfb !== window.__oldRFB`)
	var st2 map[string]any
	_, body2 := fetch(t, gw+"/sandboxes/sb1/desktop/status")
	json.Unmarshal([]byte(body2), &st2)
	if st2["status"] != "running" || int(st2["pids"].(map[string]any)["xvfb"].(float64)) == xvfbPid {
		t.Fatalf("after kill -9 Xvfb: %v", st2)
	}
	compareCanvas(t, b, st2["display"].(string))

	// resize=remote: the X screen takes the page's size (RANDR), the
	// canvas shows it exactly, and the desktop's Chromium, maximized by
	// the window manager, follows the screen.
	display = st2["display"].(string)
	remote := strings.Replace(sr.DesktopURL, "resize=scale", "resize=remote", 1)
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(900, 600)); err != nil {
		t.Fatal(err)
	}
	b.load(remote, `document.body.dataset.state === "connected"`)
	for _, sz := range [][2]int{{900, 600}, {1100, 700}, {640, 480}} {
		if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(int64(sz[0]), int64(sz[1]))); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%dx%d", sz[0], sz[1])
		waitDisplaySize(t, display, want)
		b.waitJS(t, fmt.Sprintf(`(() => { const c = document.querySelector("#screen canvas"); return c.width === %d && c.height === %d; })()`, sz[0], sz[1]))
		compareCanvas(t, b, display)
		page := desktopPage(t, strings.Replace(sr.CDPURL, "/vnc.html?autoconnect=true&resize=scale", "", 1))
		// (a window manager may keep a border of its own)
		waitDesktop(t, page, fmt.Sprintf(`Math.abs(outerWidth - %d) <= 8 && Math.abs(outerHeight - %d) <= 8`, sz[0], sz[1]))
		if _, b := fetch(t, gw+"/sandboxes/sb1/desktop/status"); !strings.Contains(b, `"resolution":"`+want+`x24"`) {
			t.Fatalf("status after resizing to %s: %s", want, b)
		}
		t.Logf("resize=remote: display and canvas %s, the desktop's Chromium follows, status says so", want)
	}
	b.check(t)
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(1024, 768)); err != nil {
		t.Fatal(err)
	}

	// The terminal, for real: type, read the screen, resize, reconnect.
	b.load(sr.TerminalURL, `document.body.dataset.state === "connected"`)
	b.check(t)
	b.typeLine(t, "echo deskd-$((6*7))")
	b.waitScreen(t, "deskd-42")
	before := b.eval(t, `deskdTerm.term.rows + " " + deskdTerm.term.cols`)
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(700, 400)); err != nil {
		t.Fatal(err)
	}
	size := b.eval(t, `new Promise(r => { const c = () => { const s = deskdTerm.term.rows + " " + deskdTerm.term.cols; s !== `+strconv.Quote(before)+` ? r(s) : setTimeout(c, 20); }; c(); })`)
	b.typeLine(t, "stty size")
	b.waitScreen(t, size)
	if got := b.eval(t, `new URL(location.href).searchParams.get("session") || ""`); got == "" {
		t.Fatal("the page did not learn its session id")
	}
	// Drop the socket: the page reconnects, resets its screen and gets
	// the scrollback replayed by the same session.
	b.eval(t, `(window.__old = deskdTerm.socket, deskdTerm.socket.close(), "closed")`)
	b.waitJS(t, `document.body.dataset.state === "connected" && deskdTerm.socket !== window.__old`)
	b.waitScreen(t, "deskd-42")
	b.typeLine(t, "echo after-$((2+3))")
	b.waitScreen(t, "after-5")

	if code, b := post(t, gw+"/sandboxes/sb1/desktop/stop"); code != 200 || !strings.Contains(string(b), `"status":"stopped"`) {
		t.Fatalf("stop via gateway: %d %s", code, b)
	}
}

// panelURL is deskd's base URL under an hour-long token of scope for
// sandbox "sb1" (what serveDeskd serves).
func panelURL(t *testing.T, deskd *url.URL, scope panel.Scope) string {
	t.Helper()
	tok, err := panel.Mint([]byte(e2eKey), panel.Claims{SID: "sb1", Port: deskdPort(deskd), Exp: time.Now().Add(time.Hour).Unix(), Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	return deskd.String() + "/panel/" + tok
}

func deskdPort(u *url.URL) int {
	n, _ := strconv.Atoi(u.Port())
	return n
}

// browser is a headless Chromium that records every HTTP request and
// its outcome.
type browser struct {
	ctx      context.Context
	mu       sync.Mutex
	urls     map[network.RequestID]string
	inflight map[network.RequestID]bool // HTTP requests not finished yet
	bad      []string
	n        int
}

func newBrowser(t *testing.T, path string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-first-run", true),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelT(); cancelC(); cancelA() })
	b := &browser{ctx: ctx, urls: map[network.RequestID]string{}, inflight: map[network.RequestID]bool{}}
	// Listen's callback runs in the tab's reader: record, never block.
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.urls[e.RequestID] = e.Request.URL
			if e.Type != network.ResourceTypeWebSocket {
				b.inflight[e.RequestID] = true
			}
		case *network.EventLoadingFinished:
			delete(b.inflight, e.RequestID)
		case *network.EventResponseReceived:
			b.n++
			if e.Response.Status >= 400 {
				b.bad = append(b.bad, e.Response.URL+" -> "+strconv.Itoa(int(e.Response.Status)))
			}
		case *network.EventLoadingFailed:
			delete(b.inflight, e.RequestID)
			// Chrome reports a failed subresource (a 404 stylesheet,
			// say) as aborted; only the WebSocket may fail here, since
			// the RFB and terminal endpoints are other issues' work.
			if e.Type != network.ResourceTypeWebSocket {
				b.bad = append(b.bad, "failed "+string(e.Type)+" "+b.urls[e.RequestID]+": "+e.ErrorText)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// load navigates to u and waits until ready evaluates true in the page.
func (b *browser) load(u, ready string) {
	err := chromedp.Do(b.ctx, chromedp.Navigate(u))
	ok := false
	for try := 0; err == nil || (try < 3 && strings.Contains(err.Error(), "Cannot find context with specified id")); try++ {
		// chromedp evaluates in the execution context it last heard of;
		// right after a navigation that may be the old page's, which the
		// browser has destroyed: ask again once the new one is known.
		ok, err = chromedp.Run(b.ctx, chromedp.Poll[bool](ready, chromedp.WithPollingTimeout(30*time.Second)))
		if err == nil {
			break
		}
	}
	// Let the page's requests finish (a late favicon, say) before anything
	// navigates away and cancels them.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		b.mu.Lock()
		idle := len(b.inflight) == 0
		b.mu.Unlock()
		if idle {
			break
		}
		time.Sleep(20 * time.Millisecond) // network events arrive on chromedp's goroutine
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil || !ok {
		b.bad = append(b.bad, "page "+u+" never became ready ("+ready+"): "+errText(err))
	}
	// A request Chromium has not reported finished (a low-priority
	// favicon on a loaded machine, say) is not a missing asset: fetch it
	// directly, and count it bad only if that fails.
	for id := range b.inflight {
		if u := b.urls[id]; !servable(u) {
			b.bad = append(b.bad, "unfinished after 10 s and not servable: "+u)
		}
	}
	clear(b.inflight)
}

// servable reports whether u answers 200 to a plain GET.
func servable(u string) bool {
	resp, err := http.Get(u)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

func (b *browser) check(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.bad) > 0 {
		t.Fatalf("browser saw %d problems:\n%s", len(b.bad), strings.Join(b.bad, "\n"))
	}
	if b.n < 15 {
		t.Fatalf("browser saw only %d responses: assets were not loaded", b.n)
	}
	t.Logf("browser loaded %d responses, none failed", b.n)
}

// clickCanvas clicks noVNC's canvas at a fraction of the remote screen.
func (b *browser) clickCanvas(t *testing.T, fx, fy float64) {
	t.Helper()
	xy := b.eval(t, fmt.Sprintf(`(() => { const r = document.querySelector("#screen canvas").getBoundingClientRect(); return (r.left + %f * r.width) + " " + (r.top + %f * r.height); })()`, fx, fy))
	var x, y float64
	fmt.Sscan(xy, &x, &y)
	if err := chromedp.Do(b.ctx, chromedp.MouseClickXY(x, y)); err != nil {
		t.Fatal(err)
	}
}

// desktopPage connects to the desktop Chromium's test page over CDP.
func desktopPage(t *testing.T, cdpBase string) *cdpConn {
	t.Helper()
	var list []struct {
		Type                 string `json:"type"`
		URL                  string `json:"url"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	getJSON(t, cdpBase+"/json/list", &list)
	for _, tg := range list {
		if tg.Type == "page" && strings.HasPrefix(tg.URL, "data:text/html") {
			return dialCDP(t, t.Context(), tg.WebSocketDebuggerURL, nil)
		}
	}
	t.Fatalf("no test page among %+v", list)
	return nil
}

// waitDesktop polls a JS condition in the desktop's page.
func waitDesktop(t *testing.T, page *cdpConn, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var last json.RawMessage
	for ctx.Err() == nil {
		res, err := page.call(ctx, "Runtime.evaluate", map[string]any{"expression": cond, "returnByValue": true})
		if err == nil && bytes.Contains(res, []byte(`"value":true`)) {
			return
		}
		last = res
		time.Sleep(100 * time.Millisecond)
	}
	state, _ := page.call(context.Background(), "Runtime.evaluate", map[string]any{"expression": `JSON.stringify({clicks: window.clicks, value: document.getElementById("i").value})`, "returnByValue": true})
	t.Fatalf("desktop page never met %s (last %s); state %s", cond, last, state)
}

// canvasJS returns noVNC's canvas as "w h base64(RGBA)" once it has pixels.
const canvasJS = `new Promise(r => { const f = () => { const c = document.querySelector("#screen canvas"); if (!c || !c.width) return setTimeout(f, 50); const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data; let s = ""; for (let i = 0; i < d.length; i += 32768) s += String.fromCharCode.apply(null, d.subarray(i, i + 32768)); r(c.width + " " + c.height + " " + btoa(s)); }; f(); })`

// compareCanvas checks noVNC's canvas against a capture of the display:
// the flat colours exactly, and nearly every pixel closely (JPEG may
// carry photo-like tiles).
func compareCanvas(t *testing.T, b *browser, display string) {
	t.Helper()
	scr, err := x11.OpenScreen(display, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scr.Close()
	w, h := scr.Size()
	want := make([]byte, w*h*4)
	var got []byte
	var close float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		parts := strings.SplitN(b.eval(t, canvasJS), " ", 3)
		cw, _ := strconv.Atoi(parts[0])
		ch, _ := strconv.Atoi(parts[1])
		got, _ = base64.StdEncoding.DecodeString(parts[2])
		if err := scr.Capture(image.Rect(0, 0, w, h), want, w*4); err != nil {
			t.Fatal(err)
		}
		if cw != w || ch != h {
			t.Fatalf("canvas %dx%d, display %dx%d", cw, ch, w, h)
		}
		n := 0
		for i := 0; i < w*h; i++ {
			g, x := got[4*i:], want[4*i:] // RGBA vs BGRX
			if absDiff(g[0], x[2]) <= 24 && absDiff(g[1], x[1]) <= 24 && absDiff(g[2], x[0]) <= 24 {
				n++
			}
		}
		close = float64(n) / float64(w*h)
		if close > 0.99 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // the page may still be painting
	}
	if close <= 0.99 {
		t.Fatalf("only %.1f%% of the canvas matches the display", 100*close)
	}
	// Flat areas: the orange block and the blue background, exactly.
	for _, p := range []struct{ x, y int }{{w / 8, h / 3}, {w - 20, h - 20}} {
		i := 4 * (p.y*w + p.x)
		if got[i] != want[i+2] || got[i+1] != want[i+1] || got[i+2] != want[i] {
			t.Fatalf("canvas at %d,%d = %v, display %v (BGR)", p.x, p.y, got[i:i+3], want[i:i+3])
		}
	}
	t.Logf("noVNC canvas matches the X display on %.2f%% of %dx%d pixels", 100*close, w, h)
}

func absDiff(a, b byte) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// screenJS returns the text of xterm.js's whole buffer.
const screenJS = `(() => { const b = deskdTerm.term.buffer.active; let s = ""; for (let i = 0; i < b.length; i++) s += b.getLine(i).translateToString(true) + "\n"; return s; })()`

// typeLine types line into the focused terminal as an IME would
// (Input.insertText: one input event per line, as xterm.js expects) and
// presses Enter as a raw key (SendKeys's extra char event would make
// xterm.js send every character twice).
func (b *browser) typeLine(t *testing.T, line string) {
	t.Helper()
	err := chromedp.Do(b.ctx,
		chromedp.Focus(chromedp.CSS(".xterm-helper-textarea")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if _, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: line}); err != nil {
				return err
			}
			for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeKeyUp} {
				if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, input.DispatchKeyEventParams{
					Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13,
				}); err != nil {
					return err
				}
			}
			return nil
		}))
	if err != nil {
		t.Fatalf("type %q: %v", line, err)
	}
}

func (b *browser) eval(t *testing.T, js string) string {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js, chromedp.EvalAsValue, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("eval %s: %v", js, err)
	}
	return v
}

func (b *browser) waitJS(t *testing.T, cond string) {
	t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("waiting for %s: %v", cond, err)
	}
}

func (b *browser) waitScreen(t *testing.T, want string) {
	t.Helper()
	js, _ := json.Marshal(want)
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[bool](screenJS+".includes("+string(js)+")", chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("screen never showed %q: %v\nscreen:\n%s", want, err, b.eval(t, screenJS))
	}
}

func errText(err error) string {
	if err == nil {
		return "false"
	}
	return err.Error()
}

// clipboardBothWays checks noVNC's clipboard box against the X clipboard.
func clipboardBothWays(t *testing.T, b *browser, display string) {
	t.Helper()
	xclip := testenv.LookPath(t, "xclip")
	const toX = "héllo € ✓ 漢字 from noVNC"
	// The bar hides above the page until the pointer reaches its strip.
	if err := chromedp.Do(b.ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 300, 2)); err != nil {
		t.Fatal(err)
	}
	b.waitJS(t, `(() => { const r = document.getElementById("clipbtn").getBoundingClientRect(); return r.top >= 0 && getComputedStyle(document.getElementById("bar")).transform === "none"; })()`)
	err := chromedp.Do(b.ctx,
		chromedp.Click(chromedp.CSS("#clipbtn")),
		chromedp.Focus(chromedp.CSS("#cliptext")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: toX})
			return err
		}))
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		out, err := exec.CommandContext(ctx, xclip, "-display", display, "-o", "-selection", "clipboard", "-target", "UTF8_STRING").Output()
		cancel()
		if got = string(out); err == nil && got == toX {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("X clipboard %q (%v), want %q", got, err, toX)
		}
	}

	const fromX = "ünïcødé ✓ copied in X\nsecond line"
	ctx, cancel := context.WithCancel(t.Context())
	cmd := exec.CommandContext(ctx, xclip, "-display", display, "-quiet", "-selection", "clipboard", "-i")
	cmd.Stdin = strings.NewReader(fromX)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }() // xclip serves the selection until killed
	want, _ := json.Marshal(fromX)
	b.waitJS(t, `document.getElementById("cliptext").value === `+string(want))
	t.Logf("clipboard: page -> X and X -> page, UTF-8 intact")
}

// waitDisplaySize polls xdpyinfo, an X client we did not write, until
// the display's size is want ("WxH").
func waitDisplaySize(t *testing.T, display, want string) {
	t.Helper()
	xdpyinfo := testenv.LookPath(t, "xdpyinfo")
	var got string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command(xdpyinfo, "-display", display).Output()
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "dimensions:" {
				got = f[1]
			}
		}
		if got == want {
			return
		}
	}
	t.Fatalf("display %s is %s, want %s", display, got, want)
}
