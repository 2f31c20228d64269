package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/computer"
	"github.com/cubepod/deskd/panel"
)

// a11yPage is a form with labels, fields, a check box, a select and a
// button, and an HTML dialog open over it; it records where clicks land.
const a11yPage = `<!doctype html><title>A11y form</title><body style="margin:20px;font-size:18px">
<form onsubmit="return false">
<p><label for="name">Full name</label> <input id="name" value="Ada"></p>
<p><label for="email">Email</label> <input id="email" type="email"></p>
<p><label><input type="checkbox" id="agree"> I agree</label></p>
<p><label for="color">Colour</label> <select id="color"><option>Red</option><option selected>Green</option></select></p>
<p><button id="go" type="button">Submit</button></p>
</form>
<dialog open id="dlg" style="top:340px"><p>Cookie notice</p><button id="ok" type="button">Accept</button></dialog>
<script>
window.log = [];
for (const t of ["mousedown", "click"]) addEventListener(t, e => log.push({t, id: e.target.id}), true);
</script>`

// a11yList fetches computer/a11y from base with query q.
func a11yList(t *testing.T, base, q string) (computer.ElementList, int) {
	t.Helper()
	resp, err := http.Get(base + "/computer/a11y?" + q)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var l computer.ElementList
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatalf("a11y %s: %v: %.300s", q, err, b)
		}
	} else {
		t.Logf("a11y %s: %d %.300s", q, resp.StatusCode, b)
	}
	return l, resp.StatusCode
}

// findElement is the first element of role whose name starts with name.
func findElement(l computer.ElementList, role, name string) (computer.Element, bool) {
	for _, e := range l.Elements {
		if e.Role == role && strings.HasPrefix(e.Name, name) {
			return e, true
		}
	}
	return computer.Element{}, false
}

// waitElement takes snapshots until one lists role/name.
func waitElement(t *testing.T, base, q, role, name string) (computer.Element, computer.ElementList) {
	t.Helper()
	var l computer.ElementList
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		l, _ = a11yList(t, base, q)
		if e, ok := findElement(l, role, name); ok {
			return e, l
		}
	}
	t.Fatalf("no %s %q in the snapshot: %+v", role, name, l.Elements)
	return computer.Element{}, l
}

// TestAccessibilitySnapshot lists a real Chromium's page and UI through
// AT-SPI: the form's fields, check box, select, button and an HTML dialog
// with the right roles and names, the address bar and the tab; a click at
// each listed centre lands in that element; an element id types into a
// field; a JavaScript alert (the browser's own dialog) is listed and closed
// by its id; a view token may take snapshots; a page of 20,000 elements
// is answered within the bounds.
func TestAccessibilitySnapshot(t *testing.T) {
	e := newInstall(t, "--resolution", "1600x900x24")
	deskd := serveDeskd(t, e)
	full, view := panelURL(t, deskd, panel.ScopeFull), panelURL(t, deskd, panel.ScopeView)
	pageURL := "data:text/html," + url.PathEscape(a11yPage)
	body, _ := json.Marshal(map[string]string{"url": pageURL})
	resp, err := http.Post(full+"/api/desktop/start", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	st, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(st), `"a11y":"complete"`) {
		t.Fatalf("start: %d %s", resp.StatusCode, st)
	}
	c := &computerEnv{t: t, base: full, page: desktopPage(t, full+"/cdp")}
	waitDesktop(t, c.page, `!!window.log`)

	// The page's elements, the browser's own; from a view token too.
	_, l := waitElement(t, view, "", "push button", "Accept")
	want := []struct{ role, name, id string }{
		{"entry", "Full name", "name"}, {"entry", "Email", "email"}, {"check box", "I agree", "agree"},
		{"combo box", "Colour", "color"}, {"push button", "Submit", "go"}, {"push button", "Accept", "ok"},
	}
	for _, w := range want {
		if _, ok := findElement(l, w.role, w.name); !ok {
			t.Fatalf("no %s %q in %s", w.role, w.name, text(l))
		}
	}
	for _, w := range []struct{ role, name string }{{"dialog", ""}, {"entry", "Address and search bar"}, {"page tab", "A11y form"}} {
		if _, ok := findElement(l, w.role, w.name); !ok {
			t.Fatalf("no %s %q in %s", w.role, w.name, text(l))
		}
	}
	if e, _ := findElement(l, "entry", "Full name"); e.Value != "Ada" || len(e.Center) != 2 {
		t.Fatalf("Full name: %+v", e)
	}
	if e, _ := findElement(l, "combo box", "Colour"); e.Value != "Green" {
		t.Fatalf("the select's value: %+v", e)
	}

	// A click at each listed centre lands in that element.
	for _, w := range want {
		el, _ := findElement(l, w.role, w.name)
		n := c.logLen()
		c.act(fmt.Sprintf(`[{"action":"left_click","coordinate":[%d,%d]}]`, el.Center[0], el.Center[1]))
		// The first press since: a click event of the element before may
		// still come in after n was read.
		evs := c.events(n, func(e []domEvent) bool { return has(e, "mousedown") })
		if md := find(evs, "mousedown"); md.ID != w.id {
			t.Fatalf("click at the centre of %s %q (%v) pressed #%s (events %+v)", w.role, w.name, el.Center, md.ID, evs)
		}
		if w.id == "color" { // its popup opens: once it has, close it
			expanded := func() bool {
				l, _ := a11yList(t, full, "interactive=1")
				e, _ := findElement(l, "combo box", "Colour")
				return strings.Contains(strings.Join(e.States, ","), "expanded")
			}
			for deadline := time.Now().Add(10 * time.Second); !expanded(); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the select's popup never opened")
				}
			}
			c.act(`[{"action":"key","text":"Escape"}]`)
			for deadline := time.Now().Add(10 * time.Second); expanded(); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the select's popup did not close on Escape")
				}
			}
		}
	}
	// The check box now says so; an element id types into a field.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		l, _ := a11yList(t, full, "interactive=1")
		e, _ := findElement(l, "check box", "I agree")
		if strings.Contains(strings.Join(e.States, ","), "checked") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the check box clicked is not checked: %+v", e)
		}
	}
	email, _ := findElement(l, "entry", "Email")
	n := c.logLen()
	c.act(`[{"action":"type","element":"` + email.ID + `","text":"ada@example.org"}]`)
	if md := find(c.events(n, func(e []domEvent) bool { return has(e, "mousedown") }), "mousedown"); md.ID != "email" {
		t.Fatalf("type on the Email element clicked #%s", md.ID)
	}
	waitDesktopOr(t, c.page, `document.getElementById("email").value === "ada@example.org"`, `document.getElementById("email").value + " / focus: " + (document.activeElement && document.activeElement.id)`)
	if code, v := c.post("/computer/actions", `{"actions":[{"action":"left_click","element":"e999999"}]}`); code == 200 && v["ok"] == true {
		t.Fatalf("a click on an unknown element: %v", v)
	}

	// The browser's own dialog: listed, and closed through its id.
	if _, err := c.page.call(t.Context(), "Runtime.evaluate", map[string]any{"expression": `setTimeout(() => alert("Hello from the page"), 0); 1`}); err != nil {
		t.Fatal(err)
	}
	okBtn, l := waitElement(t, full, "", "push button", "OK")
	if _, ok := findElement(l, "static", "Hello from the page"); !ok {
		if _, ok := findElement(l, "dialog", ""); !ok {
			t.Fatalf("alert not listed: %s", text(l))
		}
	}
	// Chromium's dialogs ignore a click that comes within a double-click
	// interval (500 ms) of their showing or of the click before (input
	// protection against stray double clicks): click, a second apart,
	// until it goes. (Nothing may evaluate in the page meanwhile: the
	// alert blocks it.)
	for try := 0; ; try++ {
		time.Sleep(time.Second) // past Chromium's double-click interval: no event tells when
		c.act(`[{"action":"left_click","element":"` + okBtn.ID + `"}]`)
		if l, _ := a11yList(t, full, "interactive=1"); func() bool { _, ok := findElement(l, "push button", "OK"); return !ok }() {
			break
		}
		if try == 5 {
			l, _ := a11yList(t, full, "")
			resp, _ := http.Get(full + "/computer/screenshot")
			b, _ := io.ReadAll(resp.Body)
			os.WriteFile("/tmp/a11y-fail.png", b, 0o644)
			t.Fatalf("the alert's OK (%+v), clicked by its id, did not close it: %s", okBtn, text(l))
		}
	}
	waitDesktop(t, c.page, `true`)

	// 20,000 elements: the visible ones within the default bounds, the
	// hidden ones cut by max_nodes and the time bound.
	big := `<!doctype html><title>Big</title><body><script>for (let i = 0; i < 20000; i++) { const b = document.createElement("button"); b.textContent = "b" + i; document.body.append(b); }</script>`
	if _, err := c.page.call(t.Context(), "Page.navigate", map[string]any{"url": "data:text/html," + url.PathEscape(big)}); err != nil {
		t.Fatal(err)
	}
	waitElement(t, full, "interactive=1", "push button", "b0")
	start := time.Now()
	l, code := a11yList(t, full, "")
	if code != 200 || len(l.Elements) > 1000 || time.Since(start) > 6*time.Second {
		t.Fatalf("visible snapshot of 20,000 buttons: %d, %d elements, %d visited, in %v", code, len(l.Elements), l.Visited, time.Since(start))
	}
	t.Logf("20,000 buttons, visible: %d elements, %d visited, %.0f ms", len(l.Elements), l.Visited, l.TookMS)
	start = time.Now()
	l, code = a11yList(t, full, "all=1&max_nodes=20000&timeout_ms=1500")
	if code != 200 || l.Truncated == "" || time.Since(start) > 4*time.Second {
		t.Fatalf("whole snapshot of 20,000 buttons in 1.5 s: %d, truncated %q, %d elements in %v", code, l.Truncated, len(l.Elements), time.Since(start))
	}
	t.Logf("20,000 buttons, all, 1.5 s: %d elements, %d visited, truncated %q", len(l.Elements), l.Visited, l.Truncated)
	l, _ = a11yList(t, full, "all=1&max_nodes=50")
	if len(l.Elements) != 50 || l.Truncated == "" {
		t.Fatalf("max_nodes=50: %d elements, truncated %q", len(l.Elements), l.Truncated)
	}
}

func text(l computer.ElementList) string { return l.Text() }
