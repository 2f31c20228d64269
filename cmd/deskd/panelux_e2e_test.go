package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/x11"
)

// keysPage records, in the desktop's Chromium, every key (with its
// modifiers) and every mouse press it gets.
const keysPage = `data:text/html,<body style='margin:0;background:%23204080'><input id='i' style='position:fixed;right:5%;bottom:5%'><script>window.keys=[];window.clicks=0;addEventListener('keydown',e=>keys.push((e.ctrlKey?'C-':'')+(e.altKey?'A-':'')+(e.metaKey?'M-':'')+e.key));addEventListener('mousedown',()=>clicks++)</script></body>`

// startWith starts the desktop through the gateway on page.
func startWith(t *testing.T, gw, page string) (panel.StartResponse, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"url": page})
	resp, err := http.Post(gw+"/sandboxes/sb1/desktop/start", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sr panel.StartResponse
	if resp.StatusCode != 200 || json.Unmarshal(b, &sr) != nil {
		t.Fatalf("start: %d %s", resp.StatusCode, b)
	}
	var st map[string]any
	json.Unmarshal(sr.Status, &st)
	return sr, st
}

// desktopEval evaluates js in the desktop's page (as a user gesture) and
// returns its value as JSON.
func desktopEval(t *testing.T, pg *cdpConn, js string) string {
	t.Helper()
	res, err := pg.call(t.Context(), "Runtime.evaluate", map[string]any{"expression": js, "returnByValue": true, "userGesture": true, "awaitPromise": true})
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
	}
	json.Unmarshal(res, &r)
	return string(r.Result.Value)
}

// forget drops the problems the test caused on purpose (a refused upload,
// a listing of ~/Downloads before it exists) from what check reports.
func (b *browser) forget(substr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bad = slices.DeleteFunc(b.bad, func(s string) bool { return strings.Contains(s, substr) })
}

// showBar moves the pointer to the top edge, where the toolbar hides.
func (b *browser) showBar(t *testing.T) {
	t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 300, 2)); err != nil {
		t.Fatal(err)
	}
	b.waitJS(t, `getComputedStyle(document.getElementById("bar")).transform === "none"`)
}

func (b *browser) click(t *testing.T, sel string) {
	t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)); err != nil {
		t.Fatalf("click %s: %v", sel, err)
	}
}

// TestPanelControls drives the desktop page's toolbar, clipboard and file
// transfer, and the terminal page's addons, in a real browser through
// the gateway, and checks their effect where it lands: keys in the
// desktop's Chromium, text in the X clipboard, bytes in the home.
func TestPanelControls(t *testing.T) {
	chromium := testenv.Chromium(t)
	home := filepath.Join(testenv.TempDir(t), "home")
	// --no-sandbox is what brings Chromium's "unsupported command-line
	// flag" infobar (deskd passes it whenever Chromium runs as root); the
	// GUI runs as uid 1000 here, so it is asked for explicitly.
	e := newInstall(t, "--home", home, "--max-upload-mib", "512", "--no-sandbox")
	e.useDisplay(t)
	deskd := serveDeskd(t, e)
	gw := gateway(t, map[string]*url.URL{"sb1": deskd})
	sr, st := startWith(t, gw, keysPage)
	display := st["display"].(string)
	deskdPid := int(st["pids"].(map[string]any)["deskd"].(float64))
	cdpBase := strings.Replace(sr.CDPURL, "/vnc.html?autoconnect=true&resize=scale", "", 1)

	// A fresh Chromium with --no-sandbox (as it runs as root) shows no
	// infobar: in the X capture the page starts right under the tab strip
	// and toolbar (~87 px; the "--no-sandbox" infobar pushes it to ~147).
	infobarCheck(t, display)

	b := newBrowser(t, chromium)
	gwURL, _ := url.Parse(gw)
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		if _, err := chromedp.CallBrowser(b.ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: name, AllowWithoutSanitization: name == "clipboard-write"},
			Setting:    cdpbrowser.PermissionSettingGranted, Origin: gwURL.Scheme + "://" + gwURL.Host,
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := chromedp.Call(b.ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	b.load(sr.DesktopURL, `document.body.dataset.state === "connected"`)
	b.check(t)

	// Every control is keyboard-reachable: Tab from the page lands in
	// the toolbar, and every visible control takes focus.
	b.eval(t, `(document.activeElement && document.activeElement.blur(), "ok")`)
	if err := chromedp.Do(b.ctx, chromedp.KeyEvent("\t")); err != nil {
		t.Fatal(err)
	}
	if got := b.eval(t, `String(document.getElementById("bar").contains(document.activeElement))`); got != "true" {
		t.Errorf("Tab from the page did not reach the toolbar (focus on %s)", b.eval(t, `document.activeElement.outerHTML.slice(0, 80)`))
	}
	if bad := b.eval(t, `[...document.querySelectorAll("#bar button, #keys button, .panel button, .panel select, .panel input:not([type=file]), .panel textarea")].filter(el => !el.hidden).filter(el => { const p = el.closest(".panel, #keys"); if (p) p.hidden = false; el.focus(); return document.activeElement !== el; }).map(el => el.id || el.textContent).join(",")`); bad != "" {
		t.Errorf("controls not focusable: %s", bad)
	}
	b.eval(t, `(document.querySelectorAll(".panel, #keys").forEach(p => p.hidden = true), "ok")`)

	// Extra keys: Ctrl+Alt+Del, a sticky Ctrl for the next key, Esc;
	// the desktop's page records what X delivered.
	pg := desktopPage(t, cdpBase)
	b.clickCanvas(t, 0.5, 0.5)
	waitDesktop(t, pg, `window.clicks >= 1`)
	b.showBar(t)
	b.click(t, "#keysbtn")
	b.click(t, "#cad")
	waitDesktop(t, pg, `keys.includes("C-A-Delete")`)
	b.click(t, `#keys [data-mod="ctrl"]`)
	if got := b.eval(t, `document.querySelector('#keys [data-mod="ctrl"]').getAttribute("aria-pressed")`); got != "true" {
		t.Fatalf("Ctrl not held: aria-pressed %s", got)
	}
	b.click(t, `#keys [data-key="Right"]`)
	b.click(t, `#keys [data-key="Escape"]`)
	waitDesktop(t, pg, `keys.includes("C-ArrowRight") && keys[keys.length-1] === "Escape"`)
	if got := b.eval(t, `document.querySelector('#keys [data-mod="ctrl"]').getAttribute("aria-pressed")`); got != "false" {
		t.Fatalf("sticky Ctrl not released after one key: aria-pressed %s", got)
	}
	t.Logf("extra keys reached X: %s", desktopEval(t, pg, `keys.join(" ")`))

	// The on-screen keyboard's input (what a phone's keyboard types into
	// the hidden field) goes out as keys, non-Latin ones included.
	desktopEval(t, pg, `(document.getElementById("i").value = "", document.getElementById("i").focus(), true)`)
	b.click(t, "#kbdbtn")
	b.waitJS(t, `document.activeElement === document.getElementById("kbd")`)
	if err := chromedp.Do(b.ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: "hé€"})
		return err
	})); err != nil {
		t.Fatal(err)
	}
	waitDesktopOr(t, pg, `document.getElementById("i").value === "hé€"`, `document.getElementById("i").value + " / " + keys.join(" ")`)

	// An input method (Chinese, Japanese): the composition shows in the
	// page at the pointer and nothing reaches the desktop until it is
	// committed; then the text arrives exactly, without the Latin keys
	// the input method consumed. Through the desktop's own keyboard focus
	// (what a click on the canvas gives), then through the ⌨ field.
	cdpDo := func(call func(ctx context.Context, tg *chromedp.Target) error) {
		t.Helper()
		if err := chromedp.Do(b.ctx, chromedp.Func(call)); err != nil {
			t.Fatal(err)
		}
	}
	type composition struct {
		focus, commit string
		steps         []string
	}
	var compositions []composition
	for _, focus := range []string{`(window.deskd.rfb.focus(), "ok")`, `(document.getElementById("kbdbtn").click(), "ok")`} {
		compositions = append(compositions,
			composition{focus, "你好世界", []string{"n", "ni", "nih", "niha", "nihao", "你好", "你好s", "你好shi", "你好shijie", "你好世界"}},
			composition{focus, "こんにちは", []string{"k", "こ", "こn", "こん", "こんにちは"}})
	}
	for _, c := range compositions {
		desktopEval(t, pg, `(document.getElementById("i").value = "", document.getElementById("i").focus(), true)`)
		b.eval(t, c.focus)
		b.waitJS(t, `document.activeElement === document.getElementById("kbd")`)
		for _, step := range c.steps {
			n := int64(len([]rune(step)))
			// What a real input method sends with each key it takes:
			// keyCode 229, key "Process".
			for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeKeyDown, input.DispatchKeyEventTypeKeyUp} {
				cdpDo(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, input.DispatchKeyEventParams{Type: typ, Key: "Process", Code: "KeyN", WindowsVirtualKeyCode: 229, NativeVirtualKeyCode: 229})
					return err
				})
			}
			cdpDo(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, input.ImeSetComposition, input.ImeSetCompositionParams{Text: step, SelectionStart: n, SelectionEnd: n})
				return err
			})
		}
		b.waitJS(t, `document.getElementById("kbd").classList.contains("composing")`)
		// The composition sits under the remote caret (from the
		// accessibility snapshot): inside the remote field, mapped
		// through the canvas.
		b.waitJS(t, `document.getElementById("kbd").dataset.at === "caret"`)
		var field []float64 // the remote field on the desktop's screen: x, y, width, height
		if err := json.Unmarshal([]byte(desktopEval(t, pg, `(() => { const r = document.getElementById("i").getBoundingClientRect(); const top = window.screenY + window.outerHeight - window.innerHeight; return [r.x + window.screenX, r.y + top, r.width, r.height]; })()`)), &field); err != nil || len(field) != 4 {
			t.Fatalf("the remote field's place: %v", err)
		}
		if got := b.eval(t, fmt.Sprintf(`(() => { const c = document.querySelector("#screen canvas"), b = c.getBoundingClientRect(), k = document.getElementById("kbd");
			const fx = b.width / c.width, fy = b.height / c.height, x = parseFloat(k.style.left), y = parseFloat(k.style.top);
			const inX = x >= b.left + %f * fx - 2 && x <= b.left + (%f + %f) * fx + 2, lim = window.innerHeight - 40 /* kept on the page */, inY = y >= Math.min(b.top + %f * fy, lim) && y <= Math.min(b.top + (%f + %f) * fy + 8, lim);
			return inX && inY ? "ok" : "composition at " + x + "," + y + " in a canvas at " + b.left + "," + b.top + " scaled " + fx; })()`,
			field[0], field[0], field[2], field[1], field[1], field[3])); got != "ok" {
			t.Fatalf("the composition is not at the remote field %v: %s", field, got)
		}
		if got := desktopEval(t, pg, `document.getElementById("i").value`); got != `""` {
			t.Fatalf("the composition reached the desktop before its commit: %q", got)
		}
		cdpDo(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: c.commit})
			return err
		})
		waitDesktopOr(t, pg, `document.getElementById("i").value === `+strconv.Quote(c.commit), `document.getElementById("i").value + " / " + keys.join(" ")`)
		b.waitJS(t, `!document.getElementById("kbd").classList.contains("composing") && document.getElementById("kbd").value === ""`)
		time.Sleep(300 * time.Millisecond) // stray keys would come after the text: nothing else marks their absence
		var got string
		if err := json.Unmarshal([]byte(desktopEval(t, pg, `document.getElementById("i").value`)), &got); err != nil || got != c.commit {
			t.Fatalf("after the commit of %q the desktop's field holds %q", c.commit, got)
		}
	}

	// View only: the toggle stops input; off again, input flows.
	b.click(t, "#viewonly")
	b.waitJS(t, `window.deskd.rfb.viewOnly === true && document.getElementById("viewonly").getAttribute("aria-pressed") === "true"`)
	clicks := desktopEval(t, pg, `clicks`)
	b.clickCanvas(t, 0.3, 0.3)
	time.Sleep(500 * time.Millisecond) // a click that should not arrive has no event to wait for
	if got := desktopEval(t, pg, `clicks`); got != clicks {
		t.Fatalf("a click in view-only mode reached the desktop (%s -> %s)", clicks, got)
	}
	b.showBar(t)
	b.click(t, "#viewonly")
	b.waitJS(t, `window.deskd.rfb.viewOnly === false`)
	b.clickCanvas(t, 0.3, 0.3)
	waitDesktop(t, pg, fmt.Sprintf(`clicks > %s`, clicks))

	// Full screen, on and off.
	b.showBar(t)
	b.click(t, "#full")
	b.waitJS(t, `!!document.fullscreenElement && document.getElementById("full").getAttribute("aria-pressed") === "true"`)
	b.showBar(t)
	b.click(t, "#full")
	b.waitJS(t, `!document.fullscreenElement`)

	// Settings: quality by keyboard, 1:1 scaling.
	b.showBar(t)
	b.click(t, "#setbtn")
	if err := chromedp.Do(b.ctx, chromedp.Focus(chromedp.CSS("#quality"))); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(b.ctx, chromedp.KeyEvent(kb.ArrowLeft)); err != nil {
		t.Fatal(err)
	}
	b.waitJS(t, `window.deskd.rfb.qualityLevel === 5 && localStorage.getItem("deskd.quality") === "5"`)
	if err := chromedp.Do(b.ctx, chromedp.SetValue(chromedp.CSS("#resize"), "off")); err != nil {
		t.Fatal(err)
	}
	b.eval(t, `(document.getElementById("resize").dispatchEvent(new Event("change")), "ok")`)
	b.waitJS(t, `window.deskd.rfb.clipViewport === true && window.deskd.rfb.scaleViewport === false`)
	b.eval(t, `(document.getElementById("resize").value = "scale", document.getElementById("resize").dispatchEvent(new Event("change")), "ok")`)
	b.waitJS(t, `window.deskd.rfb.scaleViewport === true`)

	// The clipboard: explicit by default (no text crosses without the
	// person's say-so), then automatic once turned on in the settings.
	explicitClipboard(t, b, display)
	autoClipboard(t, b, display)

	// Files: a 200 MiB upload from the page into ~/Downloads and its
	// download back, with deskd's resident memory sampled throughout.
	files(t, b, home, deskdPid)

	// A file the desktop's Chromium downloads shows up in the panel.
	desktopEval(t, pg, `(() => { const a = document.createElement("a"); a.href = "data:text/plain;base64,ZnJvbSBjaHJvbWl1bQ=="; a.download = "from-chromium.txt"; document.body.append(a); a.click(); return true; })()`)
	b.showBar(t)
	if b.eval(t, `String(document.getElementById("files").hidden)`) == "true" {
		b.click(t, "#filesbtn")
	}
	listed := ""
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(listed, "from-chromium.txt"); time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			ls, _ := exec.Command("ls", "-la", filepath.Join(home, "Downloads")).CombinedOutput()
			t.Fatalf("the desktop's download never showed in the panel (%q); ~/Downloads:\n%s", listed, ls)
		}
		// (Chromium renames its .crdownload when done; the page lists on demand)
		listed = b.eval(t, `window.deskd.listFiles().then(() => [...document.querySelectorAll("#filelist li")].map(li => li.textContent).join("|"))`)
	}
	if b, err := os.ReadFile(filepath.Join(home, "Downloads", "from-chromium.txt")); err != nil || string(b) != "from chromium" {
		t.Fatalf("Chromium's download in the home: %q %v", b, err)
	}

	// HiDPI: with "resize the desktop" and "sharp on high-DPI screens",
	// a 640x400 window at devicePixelRatio 2 gets a 1280x800 desktop shown
	// scaled down; without it, 640x400.
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(640, 400, chromedp.EmulateScale(2))); err != nil {
		t.Fatal(err)
	}
	b.eval(t, `(document.getElementById("hidpi").checked = true, document.getElementById("hidpi").dispatchEvent(new Event("change")), document.getElementById("resize").value = "remote", document.getElementById("resize").dispatchEvent(new Event("change")), "ok")`)
	waitDisplaySize(t, display, "1280x800")
	b.waitJS(t, `(() => { const c = document.querySelector("#screen canvas"); return c.width === 1280 && Math.round(c.getBoundingClientRect().width) === 640; })()`)
	b.eval(t, `(document.getElementById("hidpi").checked = false, document.getElementById("hidpi").dispatchEvent(new Event("change")), "ok")`)
	waitDisplaySize(t, display, "640x400")
	b.eval(t, `(document.getElementById("hidpi").checked = true, document.getElementById("hidpi").dispatchEvent(new Event("change")), "ok")`)
	waitDisplaySize(t, display, "1280x800")
	b.eval(t, `(document.getElementById("resize").value = "scale", document.getElementById("resize").dispatchEvent(new Event("change")), "ok")`)
	t.Logf("HiDPI: a 640x400 window at devicePixelRatio 2 sized the desktop 1280x800 (640x400 without the setting)")

	// The screenshot README shows: the desktop page with its toolbar and
	// file panel open (DESKD_SCREENSHOT names where to keep it).
	b.showBar(t)
	screenshot(t, b)

	// A view token: the badge, no input, no uploads.
	view, err := panel.Mint([]byte(e2eKey), panel.Claims{SID: "sb1", Port: deskdPort(deskd), Exp: time.Now().Add(time.Hour).Unix(), Scope: panel.ScopeView})
	if err != nil {
		t.Fatal(err)
	}
	b.load(gw+"/panel/"+view+"/vnc.html?autoconnect=true&resize=scale", `document.body.dataset.state === "connected"`)
	b.waitJS(t, `!document.getElementById("viewbadge").hidden && document.getElementById("viewonly").hidden && window.deskd.rfb.viewOnly === true && getComputedStyle(document.getElementById("upload")).display === "none" && document.getElementById("devbtn").hidden`)
	if got := b.eval(t, `fetch("files/Downloads/x.txt", {method: "PUT", body: "x"}).then(r => String(r.status))`); got != "403" {
		t.Fatalf("a view token's upload: %s", got)
	}
	if got := b.eval(t, `fetch("files/Downloads/").then(r => r.json()).then(j => j.entries.map(e => e.name).join("|"))`); !strings.Contains(got, "from-chromium.txt") {
		t.Fatalf("a view token's listing: %s", got)
	}

	// The terminal page: its addons load, the font size is settable,
	// search finds output, and a dropped connection shows the banner and
	// reattaches the same session.
	tu, _ := url.Parse(sr.TerminalURL)
	q := tu.Query()
	q.Set("fontSize", "18")
	tu.RawQuery = q.Encode()
	b.load(tu.String(), `document.body.dataset.state === "connected"`)
	b.forget("/files/Downloads/")
	b.check(t)
	var addons struct {
		Renderer string `json:"renderer"`
		WebLinks bool   `json:"webLinks"`
		Unicode  string `json:"unicode"`
		Search   bool   `json:"search"`
		Image    bool   `json:"image"`
	}
	json.Unmarshal([]byte(b.eval(t, `JSON.stringify(deskdTerm.addons)`)), &addons)
	if (addons.Renderer != "webgl" && addons.Renderer != "dom") || !addons.WebLinks || addons.Unicode != "11" || !addons.Search || !addons.Image {
		t.Fatalf("terminal addons: %+v", addons)
	}
	if got := b.eval(t, `String(deskdTerm.term.options.fontSize)`); got != "18" {
		t.Fatalf("font size %s, want 18", got)
	}
	if got := b.eval(t, `String(deskdTerm.term.unicode.getStringCellWidth ? deskdTerm.term.unicode.getStringCellWidth("漢") : 2)`); got != "2" {
		t.Errorf("a CJK character is %s cells wide", got)
	}
	b.typeLine(t, "echo needle-$((40+2))")
	b.waitScreen(t, "needle-42")
	if got := b.eval(t, `String(deskdTerm.search.findNext("needle-42"))`); got != "true" {
		t.Fatalf("search did not find the output: %s", got)
	}
	session := b.eval(t, `deskdTerm.session`)
	if got := b.eval(t, `new Promise(r => { const ws = deskdTerm.socket; ws.addEventListener("close", () => setTimeout(() => r(String(!document.getElementById("banner").hidden)), 0)); ws.close(); })`); got != "true" {
		t.Fatalf("no reconnect banner after the connection dropped")
	}
	b.waitJS(t, `document.body.dataset.state === "connected" && document.getElementById("banner").hidden`)
	if got := b.eval(t, `deskdTerm.session`); got != session || session == "" {
		t.Fatalf("reconnected to session %q, was %q", got, session)
	}
	b.waitScreen(t, "needle-42")
	t.Logf("terminal: renderer %s, web links, unicode %s, search, image; banner and reattach to session %s", addons.Renderer, addons.Unicode, session)
}

// infobarCheck finds where the page starts in an X capture of the
// desktop's maximized Chromium.
func infobarCheck(t *testing.T, display string) {
	t.Helper()
	scr, err := x11.OpenScreen(display, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scr.Close()
	w, h := scr.Size()
	buf := make([]byte, w*h*4)
	top := -1
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if err := scr.Capture(image.Rect(0, 0, w, h), buf, w*4); err != nil {
			t.Fatal(err)
		}
		x := w * 3 / 4
		top = -1
		for y := 0; y < h/2; y++ {
			p := buf[4*(y*w+x):]
			if p[0] == 0x80 && p[1] == 0x40 && p[2] == 0x20 { // #204080 as BGRX
				top = y
				break
			}
		}
		if top >= 0 {
			break
		}
	}
	if top < 0 {
		t.Fatal("the page never showed in the X capture")
	}
	if top > 120 {
		t.Fatalf("the page starts %d px down: an infobar above it (no infobar: ~91 px)", top)
	}
	t.Logf("X capture: the page starts %d px down (tab strip and toolbar only, no infobar)", top)
}

// xClipboard is the X CLIPBOARD's text.
func xClipboard(t *testing.T, display string) (string, error) {
	xclip := testenv.LookPath(t, "xclip")
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(c, xclip, "-display", display, "-o", "-selection", "clipboard", "-target", "UTF8_STRING").Output()
	return string(out), err
}

// explicitClipboard: with the default settings a desktop copy does not
// reach the browser's clipboard and the browser's clipboard (a password,
// say) does not reach the desktop on focus; the two buttons move text
// each way when the person asks.
func explicitClipboard(t *testing.T, b *browser, display string) {
	t.Helper()
	xclip := testenv.LookPath(t, "xclip")
	if got := b.eval(t, `String(window.deskd.autoClipboard)`); got != "false" {
		t.Fatalf("automatic clipboard is %s by default", got)
	}
	const password, planted = "the person's password 7413", "planted by a page on the desktop"
	pw, _ := json.Marshal(password)
	b.eval(t, `navigator.clipboard.writeText(`+string(pw)+`).then(() => "ok")`)
	ctx, cancel := context.WithCancel(t.Context())
	cmd := exec.CommandContext(ctx, xclip, "-display", display, "-quiet", "-selection", "clipboard", "-i")
	cmd.Stdin = strings.NewReader(planted)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	want, _ := json.Marshal(planted)
	b.waitJS(t, `document.getElementById("cliptext").value === `+string(want)) // shown in the box
	b.eval(t, `(window.dispatchEvent(new Event("focus")), "ok")`)
	time.Sleep(time.Second) // what automatic sync would have done by now, it would have done
	if got := b.eval(t, `navigator.clipboard.readText()`); got != password {
		t.Fatalf("the desktop's copy reached the browser's clipboard unasked: %q", got)
	}
	if got, err := xClipboard(t, display); err != nil || got != planted {
		t.Fatalf("X clipboard %q (%v): the browser's clipboard went to the desktop unasked", got, err)
	}
	b.eval(t, `(document.getElementById("clipcopy").click(), "ok")`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got := b.eval(t, `navigator.clipboard.readText()`)
		if got == planted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("browser clipboard %q after Copy from desktop, want %q", got, planted)
		}
	}
	b.eval(t, `navigator.clipboard.writeText(`+string(pw)+`).then(() => (document.getElementById("clipsend").click(), "ok"))`)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		got, err := xClipboard(t, display)
		if err == nil && got == password {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("X clipboard %q (%v) after Send to desktop, want %q", got, err, password)
		}
	}
	b.eval(t, `(document.getElementById("autoclip").click(), "ok")`) // on, for what follows
	b.waitJS(t, `window.deskd.autoClipboard === true && localStorage.getItem("deskd.clipboard") === "auto"`)
	t.Logf("explicit clipboard: nothing crossed unasked; Copy from desktop and Send to desktop moved it")
}

func autoClipboard(t *testing.T, b *browser, display string) {
	t.Helper()
	xclip := testenv.LookPath(t, "xclip")
	const fromX = "copied in X, pasted in the browser: € ß 漢字"
	ctx, cancel := context.WithCancel(t.Context())
	cmd := exec.CommandContext(ctx, xclip, "-display", display, "-quiet", "-selection", "clipboard", "-i")
	cmd.Stdin = strings.NewReader(fromX)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	want, _ := json.Marshal(fromX)
	b.waitJS(t, `document.getElementById("cliptext").value === `+string(want))
	if got := b.eval(t, `navigator.clipboard.readText()`); got != fromX {
		t.Fatalf("browser clipboard %q, want %q (automatic: %s)", got, fromX, b.eval(t, `String(window.deskd.autoClipboard)`))
	}
	const fromBrowser = "copied in the browser: ñ ✓ 日本"
	js, _ := json.Marshal(fromBrowser)
	b.eval(t, `navigator.clipboard.writeText(`+string(js)+`).then(() => (window.dispatchEvent(new Event("focus")), "ok"))`)
	var got string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		out, err := exec.CommandContext(c, xclip, "-display", display, "-o", "-selection", "clipboard", "-target", "UTF8_STRING").Output()
		cancel()
		if got = string(out); err == nil && got == fromBrowser {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("X clipboard %q (%v), want %q", got, err, fromBrowser)
		}
	}
	t.Logf("automatic clipboard: X -> browser and browser -> X, no clipboard box involved")
}

// files uploads a 200 MiB file by the page's picker and downloads it back
// by its link, checking bytes, owner and deskd's memory.
func files(t *testing.T, b *browser, home string, deskdPid int) {
	t.Helper()
	const size = 200 << 20
	src := filepath.Join(testenv.TempDir(t), "big upload.bin")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.NewChaCha8([32]byte{'d', 'e', 's', 'k', 'd'})
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rng, size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	sum := fmt.Sprintf("%x", h.Sum(nil))

	// deskd's resident memory, sampled while the bytes go through.
	before := rssKiB(deskdPid)
	var peak int
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				mu.Lock()
				peak = max(peak, rssKiB(deskdPid))
				mu.Unlock()
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	b.showBar(t)
	if b.eval(t, `String(document.getElementById("files").hidden)`) == "true" {
		b.click(t, "#filesbtn")
	}
	t0 := time.Now()
	if err := chromedp.Do(b.ctx, chromedp.SetUploadFiles(chromedp.CSS("#picker"), []string{src})); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(home, "Downloads", "big upload.bin")
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if fi, err := os.Stat(dst); err == nil && fi.Size() == size {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("upload never arrived; page says %q", b.eval(t, `document.getElementById("filenote").textContent`))
		}
	}
	up := time.Since(t0)
	if got := fileSum(t, dst); got != sum {
		t.Fatalf("uploaded file's sha256 %s, want %s", got, sum)
	}
	if os.Geteuid() == 0 {
		fi, _ := os.Stat(dst)
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 {
			t.Fatalf("uploaded file owned by uid %d, want the GUI user's 1000", st.Uid)
		}
	}
	b.waitJS(t, `[...document.querySelectorAll("#filelist a")].some(a => a.textContent === "big upload.bin")`)

	// Download by the list's link.
	dl := testenv.TempDir(t)
	done := make(chan string, 1)
	if err := chromedp.ListenBrowser(b.ctx, func(ev any) {
		if e, ok := ev.(*cdpbrowser.EventDownloadProgress); ok && e.State == cdpbrowser.DownloadProgressStateCompleted {
			select {
			case done <- e.GUID:
			default:
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	yes := true
	if _, err := chromedp.CallBrowser(b.ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dl, EventsEnabled: &yes,
	}); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	b.click(t, `#filelist a[download="big upload.bin"]`)
	var guid string
	select {
	case guid = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the download never completed")
	}
	down := time.Since(t1)
	if got := fileSum(t, filepath.Join(dl, guid)); got != sum {
		t.Fatalf("downloaded file's sha256 %s, want %s", got, sum)
	}
	mu.Lock()
	p := peak
	mu.Unlock()
	t.Logf("files: 200 MiB up in %v (%.0f MiB/s), down in %v (%.0f MiB/s); deskd RSS %d MiB before, peak %d MiB",
		up.Round(time.Millisecond), 200/up.Seconds(), down.Round(time.Millisecond), 200/down.Seconds(), before>>10, p>>10)
	if p-before > 64<<10 {
		t.Fatalf("deskd's RSS grew by %d MiB moving a 200 MiB file (bound 64 MiB)", (p-before)>>10)
	}
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func screenshot(t *testing.T, b *browser) {
	t.Helper()
	if err := chromedp.Do(b.ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatal(err)
	}
	b.waitJS(t, `(() => { const c = document.querySelector("#screen canvas"); return c && c.getBoundingClientRect().height > 700; })()`)
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(testenv.TempDir(t), "panel.png")
	if p := os.Getenv("DESKD_SCREENSHOT"); p != "" {
		out = p
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("panel screenshot: %s (%d bytes)", out, len(png))
}

// waitDesktopOr is waitDesktop that reports show's value on failure.
func waitDesktopOr(t *testing.T, pg *cdpConn, cond, show string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if desktopEval(t, pg, cond) == "true" {
			return
		}
	}
	t.Fatalf("desktop page never met %s; %s = %s", cond, show, desktopEval(t, pg, show))
}
