package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/cubepod/deskd/internal/testenv"
)

// deepTextJS is the text of a page, shadow roots included (DevTools
// draws its console inside them).
const deepTextJS = `(() => { const out = []; const walk = n => { if (n.shadowRoot) walk(n.shadowRoot); for (const c of n.childNodes) { if (c.nodeType === 3) out.push(c.data); else walk(c); } }; walk(document.documentElement); return out.join(" "); })()`

// A person opens DevTools on the sandbox's page from the panel: the
// devtoolsFrontendUrl discovery gives (through the gateway), which the
// desktop page's toolbar links, is Chromium's bundled inspector served by
// the relay; headless Chromium loads it with
// every file, it connects to the page through the relay (same origin, so
// the Origin check passes), and its console evaluates in the page.
func TestDevToolsThroughPanel(t *testing.T) {
	chromium := testenv.Chromium(t)
	e := newInstall(t)
	e.useDisplay(t)
	deskd := serveDeskd(t, e)
	gw := gateway(t, map[string]*url.URL{"sb1": deskd})
	sr, _ := startWith(t, gw, keysPage)
	page := desktopPage(t, sr.CDPURL)
	waitDesktop(t, page, `(window.devtoolsMark = "sandbox-page", true)`)

	var list []struct {
		Type, URL           string
		DevtoolsFrontendURL string `json:"devtoolsFrontendUrl"`
	}
	getJSON(t, sr.CDPURL+"/json/list", &list)
	var front string
	for _, tg := range list {
		if tg.Type == "page" && strings.HasPrefix(tg.URL, "data:text/html") {
			front = tg.DevtoolsFrontendURL
		}
	}
	gwURL, _ := url.Parse(sr.CDPURL)
	if !strings.HasPrefix(front, gwURL.Path+"/devtools/inspector.html?ws=") {
		t.Fatalf("devtoolsFrontendUrl %q: want the relay's inspector under %s", front, gwURL.Path)
	}
	fu, _ := url.Parse(front)
	want := gwURL.ResolveReference(fu).String()

	// The desktop page's toolbar lists the tabs, each linking there.
	b := newBrowser(t, chromium)
	b.load(sr.DesktopURL, `document.body.dataset.state === "connected"`)
	b.showBar(t)
	b.click(t, "#devbtn")
	const link = `[...document.querySelectorAll("#devlist a")].find(a => a.title.startsWith("data:text/html"))`
	b.waitJS(t, `!!`+link)
	if href := b.eval(t, link+`.href`); href != want {
		t.Fatalf("the toolbar links the page's DevTools at %s, discovery at %s", href, want)
	}
	b.load(want+"&panel=console", `document.readyState === "complete"`)
	// The console prompt takes focus once the inspector has connected.
	expr := `devtoolsMark + ":" + (1+1)`
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.eval(t, deepTextJS), "Console") {
		if time.Now().After(deadline) {
			t.Fatalf("the inspector never showed its console; it shows: %.500s", b.eval(t, deepTextJS))
		}
		time.Sleep(200 * time.Millisecond) // the inspector builds its UI as it connects
	}
	time.Sleep(time.Second)
	err := chromedp.Do(b.ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, input.InsertText, input.InsertTextParams{Text: expr}); err != nil {
			return err
		}
		for _, typ := range []input.DispatchKeyEventType{input.DispatchKeyEventTypeRawKeyDown, input.DispatchKeyEventTypeChar, input.DispatchKeyEventTypeKeyUp} {
			ev := input.DispatchKeyEventParams{Type: typ, Key: "Enter", Code: "Enter", WindowsVirtualKeyCode: 13, NativeVirtualKeyCode: 13}
			if typ == input.DispatchKeyEventTypeChar {
				ev.Text = "\r"
			}
			if _, err := cdp.Call(ctx, tg, input.DispatchKeyEvent, ev); err != nil {
				return err
			}
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(b.eval(t, deepTextJS), "sandbox-page:2") {
		if time.Now().After(deadline.Add(15 * time.Second)) {
			t.Fatalf("the console never showed the page's answer; it shows: %.2000s", b.eval(t, deepTextJS))
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Every file of the inspector came through the panel (the browser's
	// own /favicon.ico at the gateway's root is not the panel's).
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, bad := range b.bad {
		if strings.Contains(bad, gwURL.Path) {
			t.Errorf("inspector file failed: %s", bad)
		}
	}
	if b.n < 50 {
		t.Errorf("the inspector loaded only %d files", b.n)
	}
	t.Logf("the inspector loaded %d files through the panel and evaluated in the page", b.n)
}
