package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/computer"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/x11"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// eventsPage records what the desktop's Chromium sees, in screen
// coordinates: mouse buttons and clicks with their modifiers, the wheel,
// keys, and a box that can be dragged.
const eventsPage = `<!doctype html><body style="margin:0;height:4000px;background:#fff">
<input id="i" style="position:fixed;left:600px;top:300px;width:400px;font-size:20px">
<div id="box" style="position:fixed;left:100px;top:100px;width:80px;height:80px;background:#f00"></div>
<script>
window.log = [];
const rec = e => log.push({t: e.type, x: e.screenX, y: e.screenY, b: e.button, d: e.detail, s: e.shiftKey, c: e.ctrlKey, a: e.altKey});
for (const n of ["mousedown", "mouseup", "click", "dblclick", "contextmenu", "auxclick"]) addEventListener(n, rec, true);
addEventListener("contextmenu", e => e.preventDefault(), true);
addEventListener("wheel", e => { log.push({t: "wheel", x: e.screenX, y: e.screenY, dy: e.deltaY, dx: e.deltaX, c: e.ctrlKey}); if (e.ctrlKey) e.preventDefault(); }, {capture: true, passive: false});
addEventListener("keydown", e => log.push({t: "keydown", k: e.key, c: e.ctrlKey, s: e.shiftKey}), true);
let drag = null;
box.addEventListener("mousedown", e => { drag = {x: e.clientX - box.offsetLeft, y: e.clientY - box.offsetTop}; });
addEventListener("mousemove", e => { window.lastMove = {sx: e.screenX, sy: e.screenY, cx: e.clientX, cy: e.clientY}; if (drag) { box.style.left = (e.clientX - drag.x) + "px"; box.style.top = (e.clientY - drag.y) + "px"; } });
addEventListener("mouseup", () => { drag = null; });
</script></body>`

type computerEnv struct {
	t    *testing.T
	base string
	page *cdpConn
}

func (c *computerEnv) post(path, body string, hdr ...string) (int, map[string]any) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &v); err != nil {
		c.t.Fatalf("POST %s: %d %.300s", path, resp.StatusCode, b)
	}
	return resp.StatusCode, v
}

// act runs Anthropic actions and fails the test unless all went well.
func (c *computerEnv) act(actions string) map[string]any {
	c.t.Helper()
	code, v := c.post("/computer/actions", `{"actions":`+actions+`}`)
	if code != 200 || v["ok"] != true {
		c.t.Fatalf("actions %s: %d %v", actions, code, v)
	}
	return v
}

// eval evaluates js in the test page and decodes its JSON value.
func (c *computerEnv) eval(js string, v any) {
	c.t.Helper()
	res, err := c.page.call(c.t.Context(), "Runtime.evaluate", map[string]any{"expression": "JSON.stringify(" + js + ")", "returnByValue": true})
	if err != nil {
		c.t.Fatal(err)
	}
	var r struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
	}
	json.Unmarshal(res, &r)
	if err := json.Unmarshal([]byte(r.Result.Value), v); err != nil {
		c.t.Fatalf("%s: %v (%s)", js, err, res)
	}
}

type domEvent struct {
	T       string
	ID      string // the target's id
	X, Y    int
	B, D    int
	S, C, A bool
	K       string
	DX, DY  float64
}

// events waits until the page logged n more events than before and
// returns the new ones.
func (c *computerEnv) events(from int, until func([]domEvent) bool) []domEvent {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var all []domEvent
		c.eval("log", &all)
		if len(all) > from && until(all[from:]) {
			return all[from:]
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("page events after %d: %+v", from, all[min(from, len(all)):])
		}
		time.Sleep(20 * time.Millisecond) // the page is polled: it has no way to call us
	}
}

func (c *computerEnv) logLen() int {
	var n int
	c.eval("log.length", &n)
	return n
}

func has(evs []domEvent, typ string) bool {
	for _, e := range evs {
		if e.T == typ {
			return true
		}
	}
	return false
}

func find(evs []domEvent, typ string) domEvent {
	for _, e := range evs {
		if e.T == typ {
			return e
		}
	}
	return domEvent{}
}

// geometry is what computer/info says.
type geometry struct {
	ScreenWidth  int `json:"screen_width"`
	ScreenHeight int `json:"screen_height"`
	ImageWidth   int `json:"image_width"`
	ImageHeight  int `json:"image_height"`
}

// img maps a screen pixel to the screenshot pixel that shows it.
func (g geometry) img(x, y int) (int, int) {
	return int((float64(x) + 0.5) * float64(g.ImageWidth) / float64(g.ScreenWidth)),
		int((float64(y) + 0.5) * float64(g.ImageHeight) / float64(g.ScreenHeight))
}

// near: a scaled screenshot pixel covers up to 2 screen pixels here.
func near(a, b int) bool { return a-b <= 1 && b-a <= 1 }

// TestComputerUse drives a real Chromium page on a real Xvfb through the
// computer endpoints, in each vendor's vocabulary, and checks what the
// page saw: positions (through the screenshot scaling), buttons,
// modifiers, keys and Unicode text, wheel and drag.
func TestComputerUse(t *testing.T) {
	e := newInstall(t)
	e.flags = append(e.flags, "--resolution", "1920x1080x24") // scaled screenshots: 1429x804
	pageURL := "data:text/html," + url.PathEscape(eventsPage)
	if out, code := e.run("start", "--url", pageURL); code != 0 {
		t.Fatalf("start: %v", out)
	}
	base := "http://" + e.listen
	c := &computerEnv{t: t, base: base, page: desktopPage(t, base+"/cdp")}
	waitDesktop(t, c.page, `!!window.log`)

	var g geometry
	getJSON(t, base+"/computer/info", &g)
	if g.ScreenWidth != 1920 || g.ImageWidth != 1429 || g.ImageHeight != 804 {
		t.Fatalf("info %+v", g)
	}
	// Where the page's client area is on the screen: from a move.
	ix, iy := g.img(960, 700)
	var mv struct{ SX, SY, CX, CY int }
	c.eval("window.lastMove = null", &mv)
	c.act(fmt.Sprintf(`[{"action":"mouse_move","coordinate":[%d,%d]}]`, ix, iy))
	deadline := time.Now().Add(10 * time.Second)
	for c.eval("window.lastMove || {}", &mv); !near(mv.SX, 960) && time.Now().Before(deadline); c.eval("window.lastMove || {}", &mv) {
		time.Sleep(20 * time.Millisecond)
	}
	if !near(mv.SX, 960) || !near(mv.SY, 700) {
		t.Fatalf("pointer moved to screen (%d,%d), want (960,700)", mv.SX, mv.SY)
	}
	offX, offY := mv.SX-mv.CX, mv.SY-mv.CY
	screen := func(cx, cy int) (int, int) { return cx + offX, cy + offY } // client -> screen
	at := func(cx, cy int) string {
		x, y := g.img(screen(cx, cy))
		return fmt.Sprintf("[%d,%d]", x, y)
	}
	checkAt := func(ev domEvent, cx, cy int) {
		t.Helper()
		sx, sy := screen(cx, cy)
		if !near(ev.X, sx) || !near(ev.Y, sy) {
			t.Fatalf("%s at screen (%d,%d), want (%d,%d)", ev.T, ev.X, ev.Y, sx, sy)
		}
	}

	// Anthropic: clicks with modifiers, right, double, triple.
	n := c.logLen()
	c.act(`[{"action":"left_click","coordinate":` + at(140, 140) + `,"text":"shift+ctrl"}]`)
	evs := c.events(n, func(e []domEvent) bool { return has(e, "click") })
	click := find(evs, "click")
	if click.B != 0 || !click.S || !click.C || click.A {
		t.Fatalf("left_click with shift+ctrl: %+v", click)
	}
	checkAt(click, 140, 140)
	n = c.logLen()
	c.act(`[{"action":"right_click","coordinate":` + at(300, 500) + `}]`)
	evs = c.events(n, func(e []domEvent) bool { return has(e, "contextmenu") })
	if cm := find(evs, "contextmenu"); cm.B != 2 {
		t.Fatalf("right_click: %+v", evs)
	} else {
		checkAt(cm, 300, 500)
	}
	n = c.logLen()
	c.act(`[{"action":"double_click","coordinate":` + at(700, 600) + `},{"action":"triple_click","coordinate":` + at(700, 600) + `}]`)
	evs = c.events(n, func(e []domEvent) bool {
		d := 0
		for _, x := range e {
			if x.T == "click" {
				d = max(d, x.D)
			}
		}
		return has(e, "dblclick") && d >= 3
	})

	// Typing: umlauts, ß, €, CJK land in the input as typed.
	text := "Grüße € 漢字 ß ok"
	c.act(`[{"action":"left_click","coordinate":` + at(700, 312) + `},{"action":"type","text":"` + text + `"}]`)
	var value string
	for deadline := time.Now().Add(10 * time.Second); ; {
		c.eval(`document.getElementById("i").value`, &value)
		if value == text || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if value != text {
		t.Fatalf("typed %q, the input holds %q", text, value)
	}
	// Keys: select all, delete; then paste mode.
	c.act(`[{"action":"key","text":"ctrl+a BackSpace"},{"action":"type","text":"pasted ✓ 日本","mode":"paste"}]`)
	for deadline := time.Now().Add(10 * time.Second); ; {
		c.eval(`document.getElementById("i").value`, &value)
		if value == "pasted ✓ 日本" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if value != "pasted ✓ 日本" {
		t.Fatalf("after ctrl+a BackSpace and a paste the input holds %q", value)
	}

	// Wheel: three steps down scroll the page.
	n = c.logLen()
	c.act(`[{"action":"scroll","coordinate":` + at(300, 600) + `,"scroll_direction":"down","scroll_amount":3}]`)
	evs = c.events(n, func(e []domEvent) bool { // Chromium coalesces wheel events: count their deltas
		dy := 0.0
		for _, x := range e {
			if x.T == "wheel" {
				dy += x.DY
			}
		}
		return dy >= 3*120
	})
	checkAt(find(evs, "wheel"), 300, 600)
	waitScroll := func(want float64) {
		t.Helper()
		var y float64
		for deadline := time.Now().Add(5 * time.Second); y != want && time.Now().Before(deadline); c.eval("scrollY", &y) {
			time.Sleep(20 * time.Millisecond)
		}
		if y != want {
			t.Fatalf("page scrolled to %.0f px, want %.0f (computer.WheelPixels = %d a step)", y, want, computer.WheelPixels)
		}
	}
	waitScroll(3 * computer.WheelPixels)

	// Drag: the box follows the pointer.
	c.act(`[{"action":"left_click_drag","start_coordinate":` + at(140, 140) + `,"coordinate":` + at(340, 240) + `}]`)
	var box struct{ L, T int }
	boxAt := func(l, tp int) { // the page moves it as the events arrive
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			c.eval(`({l: box.offsetLeft, t: box.offsetTop})`, &box)
			if box.L >= l-2 && box.L <= l+2 && box.T >= tp-2 && box.T <= tp+2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("box at (%d,%d), want about (%d,%d)", box.L, box.T, l, tp)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	boxAt(300, 200)

	// OpenAI's vocabulary.
	n = c.logLen()
	x, y := g.img(screen(500, 650))
	code, v := c.post("/computer/compat/openai", fmt.Sprintf(`{"actions":[{"type":"scroll","x":%d,"y":%d,"scroll_x":0,"scroll_y":%d},{"type":"click","x":%d,"y":%d,"button":"right"},{"type":"keypress","keys":["CTRL","SHIFT","K"]}]}`,
		x, y, 2*computer.WheelPixels, x, y))
	if code != 200 || v["ok"] != true {
		t.Fatalf("openai: %d %v", code, v)
	}
	evs = c.events(n, func(e []domEvent) bool { return has(e, "contextmenu") && has(e, "keydown") })
	checkAt(find(evs, "contextmenu"), 500, 650)
	waitScroll(5 * computer.WheelPixels) // scroll_y pixels, as OpenAI gives them
	// The last key down (Chromium may dispatch the second wheel step
	// after the keys: wheel events go through its compositor thread).
	var kd domEvent
	for _, e := range evs {
		if e.T == "keydown" {
			kd = e
		}
	}
	if !kd.C || !kd.S || (kd.K != "K" && kd.K != "k") {
		t.Fatalf("openai keypress: %+v", evs)
	}

	// AIO's vocabulary: a click, then a relative move.
	n = c.logLen()
	x, y = g.img(screen(450, 620))
	code, v = c.post("/computer/compat/aio", fmt.Sprintf(`{"action_type":"CLICK","x":%d,"y":%d,"button":"middle"}`, x, y))
	if code != 200 || v["ok"] != true {
		t.Fatalf("aio: %d %v", code, v)
	}
	evs = c.events(n, func(e []domEvent) bool { return has(e, "mouseup") })
	if md := find(evs, "mousedown"); md.B != 1 {
		t.Fatalf("aio middle CLICK: %+v", evs)
	} else {
		checkAt(md, 450, 620)
	}

	// Coordinates off the screenshot: a clear 400, nothing done.
	code, v = c.post("/computer/actions", `{"actions":[{"action":"left_click","coordinate":[1429,10]}]}`)
	if code != 400 || !strings.Contains(fmt.Sprint(v["error"]), "outside the 1429x804 screenshot") {
		t.Fatalf("out of range: %d %v", code, v)
	}

	// Lease: another agent gets 409 while this one drives.
	code, v = c.post("/computer/actions", `{"actions":[{"action":"mouse_move","coordinate":[5,5]}]}`, "X-Agent-Id", "agent-b")
	if code != http.StatusConflict || !strings.Contains(fmt.Sprint(v["error"]), "busy") {
		t.Fatalf("second agent during the lease: %d %v", code, v)
	}

	// Every other form, each checked by what the page saw.
	xyAt := func(cx, cy int) string {
		x, y := g.img(screen(cx, cy))
		return fmt.Sprintf(`"x":%d,"y":%d`, x, y)
	}
	move := func(cx, cy int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			c.eval("window.lastMove || {}", &mv)
			sx, sy := screen(cx, cy)
			if near(mv.SX, sx) && near(mv.SY, sy) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("pointer at screen (%d,%d), want (%d,%d)", mv.SX, mv.SY, sx, sy)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	inputIs := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			c.eval(`document.getElementById("i").value`, &value)
			if value == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("input holds %q, want %q", value, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	lastKey := func(from int, key string, ctrl, shift bool) {
		t.Helper()
		evs := c.events(from, func(e []domEvent) bool {
			for _, x := range e {
				if x.T == "keydown" && x.K == key {
					return true
				}
			}
			return false
		})
		for _, x := range evs {
			if x.T == "keydown" && x.K == key && (x.C != ctrl || x.S != shift) {
				t.Fatalf("keydown %s: ctrl %v shift %v, want %v %v", key, x.C, x.S, ctrl, shift)
			}
		}
	}
	vendor := func(path, body string) {
		t.Helper()
		if code, v := c.post(path, body); code != 200 || v["ok"] != true {
			t.Fatalf("%s %s: %d %v", path, body, code, v)
		}
	}
	const oa, aio = "/computer/compat/openai", "/computer/compat/aio"
	// OpenAI: move, double_click, drag, type, wait.
	vendor(oa, `{"actions":[{"type":"move",`+xyAt(410, 610)+`}]}`)
	move(410, 610)
	n = c.logLen()
	vendor(oa, `{"actions":[{"type":"double_click",`+xyAt(420, 620)+`},{"type":"wait","ms":50}]}`)
	checkAt(find(c.events(n, func(e []domEvent) bool { return has(e, "dblclick") }), "dblclick"), 420, 620)
	vendor(oa, `{"actions":[{"type":"drag","path":[{`+xyAt(340, 240)+`},{`+xyAt(390, 240)+`},{`+xyAt(390, 290)+`}]}]}`)
	boxAt(350, 250)
	vendor(oa, `{"actions":[{"type":"click",`+xyAt(700, 312)+`},{"type":"keypress","keys":["ctrl","a"]},{"type":"type","text":"openai ß€"}]}`)
	inputIs("openai ß€")
	// AIO: MOVE_TO, MOVE_REL, RIGHT_CLICK, DOUBLE_CLICK, MOUSE_DOWN/UP,
	// DRAG_TO, DRAG_REL, TYPING, PRESS, KEY_DOWN/KEY_UP, HOTKEY, SCROLL, WAIT.
	vendor(aio, `{"action_type":"MOVE_TO",`+xyAt(430, 630)+`}`)
	move(430, 630)
	dx, _ := g.img(100, 0)
	vendor(aio, fmt.Sprintf(`{"action_type":"MOVE_REL","x_offset":%d,"y_offset":0}`, dx))
	for sx, deadline := mv.SX, time.Now().Add(10*time.Second); mv.SX < sx+97 || mv.SX > sx+103; c.eval("window.lastMove || {}", &mv) {
		if time.Now().After(deadline) {
			t.Fatalf("MOVE_REL by 100 screen px: pointer at %d, from %d", mv.SX, sx)
		}
		time.Sleep(20 * time.Millisecond)
	}
	n = c.logLen()
	vendor(aio, `{"actions":[{"action_type":"RIGHT_CLICK",`+xyAt(440, 640)+`},{"action_type":"DOUBLE_CLICK",`+xyAt(450, 650)+`}]}`)
	evs = c.events(n, func(e []domEvent) bool { return has(e, "contextmenu") && has(e, "dblclick") })
	checkAt(find(evs, "contextmenu"), 440, 640)
	checkAt(find(evs, "dblclick"), 450, 650)
	n = c.logLen()
	vendor(aio, `{"actions":[{"action_type":"MOVE_TO",`+xyAt(460, 660)+`},{"action_type":"MOUSE_DOWN","button":"left"},{"action_type":"MOUSE_UP","button":"left"}]}`)
	evs = c.events(n, func(e []domEvent) bool { return has(e, "mouseup") })
	if md := find(evs, "mousedown"); md.B != 0 {
		t.Fatalf("MOUSE_DOWN: %+v", evs)
	}
	checkAt(find(evs, "mouseup"), 460, 660)
	vendor(aio, `{"actions":[{"action_type":"MOVE_TO",`+xyAt(390, 290)+`},{"action_type":"DRAG_TO",`+xyAt(440, 290)+`}]}`)
	boxAt(400, 250)
	vendor(aio, fmt.Sprintf(`{"action_type":"DRAG_REL","x_offset":0,"y_offset":%d}`, func() int { _, y := g.img(0, 100); return y }()))
	boxAt(400, 350)
	vendor(aio, `{"actions":[{"action_type":"CLICK",`+xyAt(700, 312)+`},{"action_type":"HOTKEY","keys":["ctrl","a"]},{"action_type":"TYPING","text":"aio 漢"}]}`)
	inputIs("aio 漢")
	n = c.logLen()
	vendor(aio, `{"actions":[{"action_type":"KEY_DOWN","key":"shift"},{"action_type":"PRESS","key":"b"},{"action_type":"KEY_UP","key":"shift"},{"action_type":"PRESS","key":"Return"},{"action_type":"WAIT","duration":0.05}]}`)
	lastKey(n, "B", false, true)
	lastKey(n, "Enter", false, false)
	var before float64
	c.eval("scrollY", &before)
	vendor(aio, fmt.Sprintf(`{"action_type":"SCROLL",%s,"dx":0,"dy":%d}`, xyAt(300, 600), -computer.WheelPixels))
	waitScroll(before - computer.WheelPixels)
	// Anthropic's remaining forms: mouse down/up, hold_key, zoom,
	// cursor_position, wait.
	n = c.logLen()
	c.act(`[{"action":"left_mouse_down","coordinate":` + at(470, 670) + `},{"action":"left_mouse_up"},{"action":"wait","duration":0.05}]`)
	checkAt(find(c.events(n, func(e []domEvent) bool { return has(e, "mouseup") }), "mouseup"), 470, 670)
	n = c.logLen()
	c.act(`[{"action":"left_click","coordinate":` + at(700, 312) + `},{"action":"hold_key","text":"ctrl","duration":0.1}]`)
	lastKey(n, "Control", true, false)
	v = c.act(`[{"action":"cursor_position"},{"action":"zoom","region":[0,0,200,100]}]`)
	res := v["results"].([]any)
	if pos := res[0].(map[string]any)["coordinate"].([]any); fmt.Sprint(pos) != fmt.Sprint([]any{float64(func() int { x, _ := g.img(screen(700, 312)); return x }()), float64(func() int { _, y := g.img(screen(700, 312)); return y }())}) {
		t.Fatalf("cursor_position %v after a click at %s", pos, at(700, 312))
	}
	if zoom := res[1].(map[string]any)["image"].(map[string]any); zoom["width"].(float64) < 200 || zoom["format"] != "png" {
		t.Fatalf("zoom: %v", zoom["width"])
	}

	// Screenshots: 1:1 matches an X capture; the default is scaled.
	c.act(`[{"action":"mouse_move","coordinate":[1400,790]},{"action":"left_click","coordinate":` + at(50, 900) + `}]`) // blur the input: no caret
	resp, err := http.Get(base + "/computer/screenshot?max_long_edge=8192&max_pixels=10000000&settle_ms=300")
	if err != nil {
		t.Fatal(err)
	}
	shot, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("X-Image-Width") != "1920" || resp.Header.Get("X-Screen-Width") != "1920" || resp.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("1:1 screenshot headers %v", resp.Header)
	}
	pic, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatal(err)
	}
	e.useDisplay(t)
	scr, err := x11.OpenScreen(statusDisplay(t, e), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scr.Close()
	want := make([]byte, 1920*1080*4)
	scr.Capture(image.Rect(0, 0, 1920, 1080), want, 1920*4)
	got := make([]byte, len(want))
	rgba := pic.(*image.RGBA)
	for i := 0; i < 1920*1080; i++ {
		got[4*i], got[4*i+1], got[4*i+2] = rgba.Pix[4*i+2], rgba.Pix[4*i+1], rgba.Pix[4*i]
	}
	if m := match(got, want, 0); m < 0.999 {
		dumpBGRX(t.TempDir()+"/got.png", got, 1920, 1080)
		t.Fatalf("1:1 screenshot matches the X capture at %.4f", m)
	}
	resp, err = http.Get(base + "/computer/screenshot?format=jpeg&quality=70")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "image/jpeg" || resp.Header.Get("X-Image-Width") != "1429" || resp.Header.Get("X-Image-Height") != "804" {
		t.Fatalf("default screenshot headers %v", resp.Header)
	}
}

func statusDisplay(t *testing.T, e *install) string {
	st, _ := e.run("status")
	return e.status(st).Display
}

// An MCP client (the official Go SDK's) lists the tools and drives the
// desktop through the gateway's panel URL: screenshot, left_click, type;
// shell_exec runs as the desktop's user. A view token gets the tools
// that look, and nothing else.
func TestMCPThroughGateway(t *testing.T) {
	e := newInstall(t)
	deskd := serveDeskd(t, e)
	gw := gateway(t, map[string]*url.URL{"sb1": deskd})
	code, body := post(t, gw+"/sandboxes/sb1/desktop/start")
	if code != 200 {
		t.Fatalf("start: %d %s", code, body)
	}
	var sr panel.StartResponse
	json.Unmarshal(body, &sr)
	panelBase := strings.TrimSuffix(sr.TerminalURL, "/terminal/")

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	connect := func(base string) *mcp.ClientSession {
		cl := mcp.NewClient(&mcp.Implementation{Name: "deskd-e2e", Version: "1"}, nil)
		s, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", DisableStandaloneSSE: true}, nil)
		if err != nil {
			t.Fatalf("connect %s/mcp: %v", base, err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	full := connect(panelBase)
	tools, err := full.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = true
	}
	for _, want := range []string{"screenshot", "zoom", "cursor_position", "left_click", "right_click", "double_click", "triple_click",
		"left_click_drag", "left_mouse_down", "left_mouse_up", "mouse_move", "scroll", "type", "key", "hold_key", "wait", "shell_exec", "browser_cdp_url", "a11y_snapshot"} {
		if !names[want] {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}
	call := func(s *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	r := call(full, "screenshot", nil)
	img, ok := r.Content[0].(*mcp.ImageContent)
	if r.IsError || !ok || img.MIMEType != "image/png" {
		t.Fatalf("screenshot: %+v", r)
	}
	if _, err := png.Decode(bytes.NewReader(img.Data)); err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	page := desktopPage(t, "http://"+e.listen+"/panel/"+mintKey(t, deskdPort(deskd))+"/cdp")
	waitDesktop(t, page, `!!document.getElementById("i")`)
	var rect struct{ X, Y int }
	res, _ := page.call(ctx, "Runtime.evaluate", map[string]any{"returnByValue": true,
		"expression": `(() => { const r = document.getElementById("i").getBoundingClientRect(); return {x: Math.round(r.x + r.width/2 + window.screenX), y: Math.round(r.y + r.height/2 + window.screenY + window.outerHeight - window.innerHeight)}; })()`})
	var ev struct {
		Result struct{ Value struct{ X, Y int } } `json:"result"`
	}
	json.Unmarshal(res, &ev)
	rect.X, rect.Y = ev.Result.Value.X, ev.Result.Value.Y
	r = call(full, "left_click", map[string]any{"coordinate": []int{rect.X, rect.Y}}) // 1024x768: 1:1
	if r.IsError || len(r.Content) < 2 {
		t.Fatalf("left_click: %+v", r)
	}
	if _, ok := r.Content[1].(*mcp.ImageContent); !ok {
		t.Fatalf("left_click answers without the screenshot after: %+v", r.Content)
	}
	call(full, "type", map[string]any{"text": "via mcp ü"})
	waitDesktop(t, page, `document.getElementById("i").value === "via mcp ü"`)
	if r := call(full, "left_click", map[string]any{"coordinate": []int{5000, 5}}); !r.IsError {
		t.Fatalf("out-of-range click: %+v", r)
	}
	r = call(full, "shell_exec", map[string]any{"command": "id -u; echo $DISPLAY", "timeout": 10})
	out := r.Content[0].(*mcp.TextContent).Text
	wantUID := "0"
	if os.Geteuid() == 0 {
		wantUID = "1000"
	}
	if r.IsError || !strings.HasPrefix(out, wantUID+"\r\n:") || !strings.Contains(out, "[exit code 0]") {
		t.Fatalf("shell_exec: %+v %q", r, out)
	}
	r = call(full, "browser_cdp_url", nil)
	if u := r.Content[0].(*mcp.TextContent).Text; !strings.HasPrefix(u, "ws://"+strings.TrimPrefix(gw, "http://")+"/panel/") {
		t.Fatalf("browser_cdp_url %q is not under the gateway's panel", u)
	}

	// A view token: the looking tools only; input tools are not there.
	viewTok, err := panel.Mint([]byte(e2eKey), panel.Claims{SID: "sb1", Port: deskdPort(deskd), Exp: time.Now().Add(time.Hour).Unix(), Scope: panel.ScopeView})
	if err != nil {
		t.Fatal(err)
	}
	view := connect(gw + "/panel/" + viewTok)
	vt, err := view.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range vt.Tools {
		switch tl.Name {
		case "screenshot", "zoom", "cursor_position", "wait", "a11y_snapshot":
		default:
			t.Errorf("a view token lists %s", tl.Name)
		}
	}
	if r := call(view, "screenshot", nil); r.IsError {
		t.Fatalf("view screenshot: %+v", r)
	}
	// The accessibility snapshot, for view tokens too: the browser's own
	// UI is there, each element with its centre.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r := call(view, "a11y_snapshot", map[string]any{"interactive_only": true})
		text := ""
		if len(r.Content) > 0 {
			text = r.Content[0].(*mcp.TextContent).Text
		}
		if !r.IsError && strings.Contains(text, `entry "Address and search bar"`) && strings.Contains(text, " @ ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a11y_snapshot: %+v %s", r, text)
		}
	}
	if _, err := view.CallTool(ctx, &mcp.CallToolParams{Name: "left_click", Arguments: map[string]any{"coordinate": []int{1, 1}}}); err == nil {
		t.Fatal("a view token clicked")
	}
}

func mintKey(t *testing.T, port int) string {
	tok, err := panel.Mint([]byte(e2eKey), panel.Claims{SID: "sb1", Port: port, Exp: time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
