package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/x11"
)

// runTabs runs one step of testdata/tabs.mjs (real Playwright).
func runTabs(t *testing.T, endpoint string, step ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"testdata/tabs.mjs", endpoint}, step...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("tabs.mjs %v: %v\n%s", step, err, errb.String())
	}
	t.Logf("tabs.mjs %v: %s", step, strings.TrimSpace(out.String()))
}

// screenColor is the colour (RGB) at the middle of the page area of the
// desktop's maximized Chromium, in an X capture.
func screenColor(t *testing.T, display string) [3]byte {
	t.Helper()
	scr, err := x11.OpenScreen(display, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scr.Close()
	w, h := scr.Size()
	x, y := w/2, h*2/3
	buf := make([]byte, w*h*4) // Capture writes at the rectangle's place
	if err := scr.Capture(image.Rect(x, y, x+1, y+1), buf, w*4); err != nil {
		t.Fatal(err)
	}
	p := buf[4*(y*w+x):]
	return [3]byte{p[2], p[1], p[0]} // BGRX
}

// waitColor waits until the X capture shows want; stay: it must show
// want for all of d (no switch happens).
func waitColor(t *testing.T, display string, want [3]byte, name string, d time.Duration, stay bool) {
	t.Helper()
	var got [3]byte
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = screenColor(t, display)
		if stay && got != want {
			t.Fatalf("the desktop switched away from %s (shows %v) while it should not", name, got)
		}
		if !stay && got == want {
			return
		}
	}
	if !stay {
		t.Fatalf("the desktop never showed %s %v; it shows %v", name, want, got)
	}
}

var (
	red    = [3]byte{255, 0, 0}
	green  = [3]byte{0, 255, 0}
	blue   = [3]byte{0, 0, 255}
	yellow = [3]byte{255, 255, 0}
)

// Tab-follow with real Playwright through the gateway: the desktop shows
// the tab the agent works in, a popup it opens, not while a person has
// just used noVNC, and nothing once a start request turns it off.
func TestTabFollow(t *testing.T) {
	testenv.LookPath(t, "node")
	chromium := testenv.Chromium(t)
	e := newInstall(t)
	e.useDisplay(t)
	deskd := serveDeskd(t, e)
	gw := gateway(t, map[string]*url.URL{"sb1": deskd})
	sr, st := startWith(t, gw, keysPage)
	display := st["display"].(string)
	endpoint := strings.TrimSuffix(sr.CDPURL, "/cdp") + "/cdp"

	runTabs(t, endpoint, "open")
	waitColor(t, display, blue, "tab3 (the newest)", 10*time.Second, false)
	runTabs(t, endpoint, "act", "2")
	waitColor(t, display, green, "tab2, where the agent works", 10*time.Second, false)

	// The followed tab, as agents and the panel see it.
	followed(t, sr.CDPURL, true, "tab2")

	// A person moves the mouse in noVNC: the agent's work in tab1 moves
	// nothing for a few seconds; its next act afterwards does.
	b := newBrowser(t, chromium)
	b.load(sr.DesktopURL, `document.body.dataset.state === "connected"`)
	for i := range 5 {
		if err := chromedp.Do(b.ctx, chromedp.MouseEvent("mouseMoved", float64(300+10*i), 300)); err != nil {
			t.Fatal(err)
		}
	}
	runTabs(t, endpoint, "act", "1")
	waitColor(t, display, green, "tab2, while a person used the desktop", time.Second, true)
	time.Sleep(3200 * time.Millisecond) // past the hold (3 s)
	runTabs(t, endpoint, "act", "1")
	waitColor(t, display, red, "tab1 after the person stopped", 10*time.Second, false)

	// The toolbar says so, and its button pauses it: the agent's work in
	// tab2 moves nothing until it is pressed again.
	b.waitJS(t, `!document.getElementById("followbtn").hidden && document.getElementById("followbtn").textContent === "Following the agent"`)
	b.showBar(t)
	b.click(t, "#followbtn")
	b.waitJS(t, `document.getElementById("followbtn").getAttribute("aria-pressed") === "true"`)
	time.Sleep(3200 * time.Millisecond) // the pointer crossed noVNC: past its hold
	runTabs(t, endpoint, "act", "2")
	waitColor(t, display, red, "tab1, with tab-follow paused", time.Second, true)
	b.showBar(t)
	b.click(t, "#followbtn")
	b.waitJS(t, `document.getElementById("followbtn").getAttribute("aria-pressed") === "false"`)
	time.Sleep(3200 * time.Millisecond)
	runTabs(t, endpoint, "act", "2")
	waitColor(t, display, green, "tab2, followed again", 10*time.Second, false)

	// A popup the agent opens is followed.
	runTabs(t, endpoint, "popup")
	waitColor(t, display, yellow, "the popup", 10*time.Second, false)
	followed(t, sr.CDPURL, true, "popup") // deskd followed it (Chromium too shows a popup)

	// Off by a start request: the agent's work moves nothing.
	body, _ := json.Marshal(map[string]any{"tab_follow": false})
	resp, err := http.Post(gw+"/sandboxes/sb1/desktop/start", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("start with tab_follow false: %d", resp.StatusCode)
	}
	followed(t, sr.CDPURL, false, "popup")
	runTabs(t, endpoint, "act", "3")
	waitColor(t, display, yellow, "the popup, with tab-follow off", 2*time.Second, true)
}

// followed checks api/follow: on or off, and the tab it brought forward.
func followed(t *testing.T, cdpURL string, on bool, title string) {
	t.Helper()
	var info struct {
		On  bool
		Tab struct{ ID, URL, Title string }
	}
	u := strings.TrimSuffix(cdpURL, "/cdp") + "/api/follow"
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		getJSON(t, u, &info)
		if info.On == on && info.Tab.Title == title && info.Tab.ID != "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("api/follow = %+v, want on=%v and the tab %q", info, on, title)
		}
	}
}
