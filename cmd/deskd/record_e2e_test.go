package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/record"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// termSession opens a terminal session on base and returns a function
// that types a line and one that waits for text in the output.
func termSession(t *testing.T, base string) (typ func(string), wait func(string), resize func(cols, rows int), conn *websocket.Conn) {
	t.Helper()
	ctx := t.Context()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/terminal/ws", &websocket.DialOptions{Subprotocols: []string{"tty"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	c.Write(ctx, websocket.MessageBinary, []byte(`{"columns":80,"rows":24}`))
	var got bytes.Buffer
	typ = func(s string) { c.Write(ctx, websocket.MessageBinary, []byte("0"+s)) }
	resize = func(cols, rows int) {
		b, _ := json.Marshal(map[string]int{"columns": cols, "rows": rows})
		c.Write(ctx, websocket.MessageBinary, append([]byte("1"), b...))
	}
	wait = func(want string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for !strings.Contains(got.String(), want) {
			_, b, err := c.Read(wctx)
			if err != nil {
				t.Fatalf("terminal: %v waiting for %q (output %q)", err, want, got.String())
			}
			if len(b) > 0 && b[0] == '0' {
				got.Write(b[1:])
			}
		}
	}
	return typ, wait, resize, c
}

func apiDo(t *testing.T, method, u, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type recList struct {
	Recordings []record.Info `json:"recordings"`
	Recording  struct {
		Terminal bool `json:"terminal"`
	} `json:"recording"`
}

func recordings(t *testing.T, base string) recList {
	t.Helper()
	code, b := apiDo(t, "GET", base+"/record/", "")
	var l recList
	if code != 200 || json.Unmarshal(b, &l) != nil {
		t.Fatalf("record/: %d %s", code, b)
	}
	return l
}

// TestTerminalRecording: a terminal session recorded through the API
// plays in asciinema and in the panel's terminal page with the session's
// output (Unicode, a resize), keeps
// no keystrokes unless asked, is listed, downloaded and deleted through
// the panel; view tokens see none of it; hostile ids are refused; a
// daemon killed mid-recording leaves a file that plays up to its last
// write.
func TestTerminalRecording(t *testing.T) {
	e := newInstall(t)
	deskd := serveDeskd(t, e)
	full, view := panelURL(t, deskd, panel.ScopeFull), panelURL(t, deskd, panel.ScopeView)
	if code, b := apiDo(t, "POST", full+"/record/start", `{"terminal":true}`); code != 200 || !strings.Contains(string(b), `"terminal":true`) {
		t.Fatalf("record/start: %d %s", code, b)
	}
	typ, wait, resize, conn := termSession(t, full)
	typ("echo beta-$((6*7)); printf '\\346\\227\\245\\346\\234\\254 ok\\n'\r")
	wait("日本 ok")
	resize(100, 30)
	typ("tput cols\r")
	wait("100")
	l := recordings(t, full)
	if len(l.Recordings) != 1 || !l.Recordings[0].Active || l.Recordings[0].Kind != "terminal" || !l.Recording.Terminal {
		t.Fatalf("recordings while recording: %+v", l)
	}
	id := l.Recordings[0].ID
	if code, _ := apiDo(t, "DELETE", full+"/record/"+id, ""); code != http.StatusConflict {
		t.Fatalf("delete of an active recording: %d", code)
	}
	typ("exit\r")
	conn.Read(t.Context()) // the session ends; the recording with it
	for deadline := time.Now().Add(10 * time.Second); recordings(t, full).Recordings[0].Active; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the recording is still active after the session ended")
		}
	}
	code, cast := apiDo(t, "GET", full+"/record/"+id, "")
	if code != 200 {
		t.Fatalf("download: %d %s", code, cast)
	}
	file := filepath.Join(testenv.TempDir(t), id+".cast")
	os.WriteFile(file, cast, 0o600)
	out := testenv.Asciinema(t, "cat", file)
	for _, want := range []string{"beta-42", "日本 ok", "100"} {
		if !strings.Contains(out, want) {
			t.Fatalf("asciinema cat lacks %q: %q", want, out)
		}
	}
	if !bytes.Contains(cast, []byte(`"r", "100x30"`)) || bytes.Contains(cast, []byte(`, "i", `)) {
		t.Fatalf("the cast: resize missing or keystrokes recorded unasked:\n%s", cast)
	}
	// The panel's terminal page plays it: the output, at the size it
	// had (the resize to 100 columns).
	br := newBrowser(t, testenv.Chromium(t))
	br.load(full+"/terminal/?cast="+id+"&speed=16", `!!(window.deskdTerm && deskdTerm.replay && deskdTerm.replay.ended)`)
	if got := br.eval(t, `deskdTerm.replay.error + " " + deskdTerm.term.cols + "x" + deskdTerm.term.rows`); got != " 100x30" {
		t.Fatalf("the terminal page's replay ended with %q (want no error, 100x30)", got)
	}
	if screen := br.eval(t, screenJS); !strings.Contains(screen, "beta-42") || !strings.Contains(screen, "日本 ok") {
		t.Fatalf("the terminal page's replay shows:\n%s", screen)
	}
	if len(br.bad) > 0 {
		t.Fatalf("the terminal page's replay: %v", br.bad)
	}

	// View tokens: nothing, by default.
	if code, _ := apiDo(t, "GET", view+"/record/", ""); code != http.StatusForbidden {
		t.Fatalf("a view token listed recordings: %d", code)
	}
	if code, _ := apiDo(t, "GET", view+"/record/"+id, ""); code != http.StatusForbidden {
		t.Fatalf("a view token downloaded a recording: %d", code)
	}
	// Hostile ids and requests.
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/record/..%2F..%2Fdeskd.log", "", 403}, // the panel refuses an escaped traversal
		{"GET", "/record/terminal-20261207T120000Z-0a1b2c3d", "", 404},
		{"GET", "/record/" + strings.Repeat("x", 5000), "", 400},
		{"DELETE", "/record/..%2Fxauthority", "", 403},
		{"DELETE", "/record/terminal-..-x", "", 400},
		{"POST", "/record/start", `{"desktop":"yes"}`, 400},
		{"POST", "/record/start", `{}`, 400},
		{"POST", "/record/stop", `{"terminal":true,"input":true}`, 400},
	} {
		if code, b := apiDo(t, c.method, full+c.path, c.body); code != c.want {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.path, c.body, code, b, c.want)
		}
	}
	if code, _ := apiDo(t, "DELETE", full+"/record/"+id, ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if l := recordings(t, full); len(l.Recordings) != 0 {
		t.Fatalf("after delete: %+v", l)
	}

	// Keystrokes when asked; then the daemon is killed mid-recording.
	apiDo(t, "POST", full+"/record/start", `{"terminal":true,"input":true}`)
	typ, wait, _, _ = termSession(t, full)
	typ("echo gamma-$((2*4))\r")
	wait("gamma-8")
	id = recordings(t, full).Recordings[0].ID
	var st struct{ Pids map[string]int }
	_, b := apiDo(t, "GET", full+"/api/desktop/status", "")
	json.Unmarshal(b, &st)
	if st.Pids["deskd"] == 0 {
		t.Fatalf("no deskd pid: %s", b)
	}
	syscall.Kill(st.Pids["deskd"], syscall.SIGKILL)
	path := filepath.Join(e.runDir, "recordings", id+".cast")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := http.Get(full + "/healthz"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("deskd still answers after SIGKILL")
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	lines := 0
	for sc.Scan() {
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %d of a recording cut by SIGKILL: %q", lines+1, sc.Text())
		}
		lines++
	}
	if !bytes.Contains(raw, []byte("gamma-8")) || !bytes.Contains(raw, []byte(`, "i", "echo`)) && !bytes.Contains(raw, []byte(`, "i", "e"`)) {
		t.Fatalf("the cut recording lacks the output or the keystrokes asked for:\n%s", raw)
	}
	if out := testenv.Asciinema(t, "cat", path); !strings.Contains(out, "gamma-8") {
		t.Fatalf("asciinema cat of the cut recording: %q", out)
	}
}

// TestActionLog: with the action log on, an agent's computer action (a
// click at a coordinate and one on an accessibility element), its CDP
// navigation, an upload and a download, and a terminal session opened
// land in the JSONL log in order, on one clock, typed text by its length
// only; stopping it finishes the file.
func TestActionLog(t *testing.T) {
	e := newInstall(t)
	deskd := serveDeskd(t, e)
	full := panelURL(t, deskd, panel.ScopeFull)
	if code, b := apiDo(t, "POST", full+"/api/desktop/start", `{"url":"data:text/html,<title>log</title><input id=i>"}`); code != 200 {
		t.Fatalf("start: %d %s", code, b)
	}
	code, b := apiDo(t, "POST", full+"/record/start", `{"actions":true}`)
	var st struct{ Actions string }
	if json.Unmarshal(b, &st); code != 200 || st.Actions == "" {
		t.Fatalf("record/start actions: %d %s", code, b)
	}
	if code, b := apiDo(t, "POST", full+"/computer/actions", `{"actions":[{"action":"left_click","coordinate":[500,400]},{"action":"type","text":"hunter2"}]}`); code != 200 {
		t.Fatalf("actions: %d %s", code, b)
	}
	page := desktopPage(t, full+"/cdp")
	if _, err := page.call(t.Context(), "Page.navigate", map[string]any{"url": "data:text/html,<title>next</title>"}); err != nil {
		t.Fatal(err)
	}
	if code, b := apiDo(t, "PUT", full+"/files/Downloads/log.txt", "payload"); code != 201 {
		t.Fatalf("upload: %d %s", code, b)
	}
	if code, _ := apiDo(t, "GET", full+"/files/Downloads/log.txt", ""); code != 200 {
		t.Fatalf("download: %d", code)
	}
	typ, wait, _, _ := termSession(t, full)
	typ("echo ok-$((1+1))\r")
	wait("ok-2")
	if code, b := apiDo(t, "POST", full+"/record/stop", `{"actions":true}`); code != 200 || strings.Contains(string(b), `"actions":"`) {
		t.Fatalf("record/stop: %d %s", code, b)
	}
	code, raw := apiDo(t, "GET", full+"/record/"+st.Actions, "")
	if code != 200 {
		t.Fatalf("download of the log: %d %s", code, raw)
	}
	var kinds []string
	var last float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if ts, _ := ev["t"].(float64); ts < last {
			t.Fatalf("time goes back in the log:\n%s", raw)
		} else {
			last = ts
		}
		if _, err := time.Parse(time.RFC3339Nano, ev["time"].(string)); err != nil {
			t.Fatalf("time %v: %v", ev["time"], err)
		}
		kinds = append(kinds, ev["kind"].(string))
	}
	got := strings.Join(kinds, " ")
	for _, want := range []string{"start", "computer", "cdp", "file", "terminal"} {
		if !strings.Contains(got, want) {
			t.Fatalf("no %s event in %q:\n%s", want, got, raw)
		}
	}
	if strings.Index(got, "computer") > strings.Index(got, "cdp") || strings.Index(got, "cdp") > strings.Index(got, "file") || strings.Index(got, "file") > strings.Index(got, "terminal") {
		t.Fatalf("events out of order: %q", got)
	}
	if bytes.Contains(raw, []byte("hunter2")) || !bytes.Contains(raw, []byte(`"text_bytes":7`)) || !bytes.Contains(raw, []byte(`"at":[500,400]`)) {
		t.Fatalf("the computer event: typed text must appear by length only, the click with its place:\n%s", raw)
	}
	if !bytes.Contains(raw, []byte(`"method":"Page.navigate"`)) || !bytes.Contains(raw, []byte(`"op":"upload"`)) || !bytes.Contains(raw, []byte(`"op":"download"`)) {
		t.Fatalf("cdp or file events:\n%s", raw)
	}
}

// liveHashJS is the SHA-256 of noVNC's canvas on the desktop page, as
// replay.js's hash computes it for the replay's.
const liveHashJS = `(async () => { const c = document.querySelector("#screen canvas"); const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data; const h = await crypto.subtle.digest("SHA-256", d); return c.width + "x" + c.height + ":" + Array.from(new Uint8Array(h), b => b.toString(16).padStart(2, "0")).join(""); })()`

// TestDesktopRecording: a person types through noVNC and an agent
// through MCP while the desktop is recorded; the replay page, seeked to
// the markers of the action log, shows the pixels the live viewer showed
// then, and a keyframe reproduces the picture before it.
func TestDesktopRecording(t *testing.T) {
	chromium := testenv.Chromium(t)
	e := newInstall(t, "--record-keyframe", "2s", "--record-keyframe-kib", "0")
	deskd := serveDeskd(t, e)
	full := panelURL(t, deskd, panel.ScopeFull)
	// A page that holds still: no caret blinking.
	page := `data:text/html,<title>rec</title><style>html,body{margin:0;height:100%}textarea{box-sizing:border-box;width:100%;height:100%;font:48px monospace;caret-color:transparent;border:0;outline:0;resize:none}</style><textarea id=i></textarea>`
	if code, b := apiDo(t, "POST", full+"/api/desktop/start", `{"url":"`+page+`"}`); code != 200 {
		t.Fatalf("start: %d %s", code, b)
	}
	code, b := apiDo(t, "POST", full+"/record/start", `{"desktop":true,"actions":true}`)
	var st struct {
		Desktop   bool
		DesktopID string `json:"desktop_id"`
		Actions   string
	}
	if json.Unmarshal(b, &st); code != 200 || !st.Desktop || !strings.HasPrefix(st.DesktopID, "desktop-") || st.Actions == "" {
		t.Fatalf("record/start: %d %s", code, b)
	}

	br := newBrowser(t, chromium)
	br.load(full+"/vnc.html?autoconnect=true&resize=scale", `document.body.dataset.state === "connected"`)
	desk := desktopPage(t, full+"/cdp")
	// The person: a click into the field and keys through noVNC.
	br.clickCanvas(t, 0.5, 0.5)
	// Keys sent before the click has focused the field would be lost.
	waitDesktop(t, desk, `document.activeElement === document.getElementById("i")`)
	if err := chromedp.Do(br.ctx, chromedp.KeyEvent("person")); err != nil {
		t.Fatal(err)
	}
	waitDesktop(t, desk, `document.getElementById("i").value === "person"`)
	// Its burst ends 2 s after the last key: the marker of its end, on a
	// screen that holds still from then on.
	logHas := func(s string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if _, raw := apiDo(t, "GET", full+"/record/"+st.Actions, ""); bytes.Contains(raw, []byte(s)) {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("the action log never had %s:\n%s", s, raw)
			}
		}
	}
	logHas(`"phase":"end"`)
	time.Sleep(300 * time.Millisecond)
	person := br.eval(t, liveHashJS)

	// The agent, through MCP.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := mcp.NewClient(&mcp.Implementation{Name: "deskd-e2e", Version: "1"}, nil)
	sess, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: full + "/mcp", DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if r, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "type", Arguments: map[string]any{"text": " agent"}}); err != nil || r.IsError {
		t.Fatalf("MCP type: %v %+v", err, r)
	}
	waitDesktop(t, desk, `document.getElementById("i").value === "person agent"`)
	time.Sleep(time.Second) // JPEG made exact, at the latest 150 ms after the last change
	agentAt := time.Now()
	agent := br.eval(t, liveHashJS)
	if agent == person {
		t.Fatal("the agent's typing changed nothing on the viewer's canvas")
	}
	time.Sleep(2500 * time.Millisecond) // a keyframe on the still screen
	if code, b := apiDo(t, "POST", full+"/record/stop", `{"desktop":true,"actions":true}`); code != 200 || bytes.Contains(b, []byte(`"desktop":true`)) {
		t.Fatalf("record/stop: %d %s", code, b)
	}
	for _, r := range recordings(t, full).Recordings {
		if r.ID == st.DesktopID && r.Active {
			t.Fatalf("%s is still being written after the stop", r.ID)
		}
	}

	br.load(full+"/replay.html?id="+st.DesktopID, `!!window.replay`)
	br.check(t)
	var info struct {
		Start    time.Time
		Duration float64
		Segments []struct {
			Start  float64
			Usable *float64 // nil: never (its predecessor went on to the end)
		}
		Markers []struct {
			MS    float64
			Kind  string
			Label string
		}
	}
	if err := json.Unmarshal([]byte(br.eval(t, `JSON.stringify({start: replay.header.start, duration: replay.duration, segments: replay.segments, markers: replay.markers})`)), &info); err != nil {
		t.Fatal(err)
	}
	t.Logf("replay: %.1f s, %d segments, markers %+v", info.Duration/1000, len(info.Segments), info.Markers)
	seek := func(ms float64) string {
		t.Helper()
		return br.eval(t, fmt.Sprintf(`replay.seek(%f).then(() => replay.hash())`, ms))
	}
	var takeoverEnd, mcpAt float64 = -1, -1
	for _, m := range info.Markers {
		switch {
		case m.Kind == "takeover" && strings.Contains(m.Label, "ended"):
			takeoverEnd = m.MS
		case m.Kind == "mcp" && mcpAt < 0:
			mcpAt = m.MS
		}
	}
	if takeoverEnd < 0 || mcpAt < 0 || mcpAt < takeoverEnd {
		t.Fatalf("markers: want the person's input ending, then the agent's MCP call: %+v", info.Markers)
	}
	agentMS := float64(agentAt.Sub(info.Start).Milliseconds())
	if got := seek(takeoverEnd); got != person {
		t.Errorf("seeked to the end of the person's input (%.0f ms): %s, the live viewer showed %s", takeoverEnd, got, person)
	}
	if got := seek(agentMS); got != agent {
		t.Errorf("seeked to %.0f ms after the agent typed: %s, the live viewer showed %s", agentMS, got, agent)
	}
	if got := seek(takeoverEnd); got != person { // back again, across segments
		t.Errorf("seeked back to %.0f ms: %s, want %s", takeoverEnd, got, person)
	}
	// A keyframe on the still screen (by time alone here:
	// --record-keyframe-kib 0), from where playback uses it, shows what
	// the updates before it had drawn.
	kf := -1.0
	for _, s := range info.Segments {
		if s.Usable != nil && *s.Usable > agentMS+100 && *s.Usable-s.Start < 1500 {
			kf = *s.Usable
			break
		}
	}
	if kf < 0 || len(info.Segments) < 3 {
		t.Fatalf("segments %+v: want one every 2 s, used a second after it starts, one after %.0f ms", info.Segments, agentMS)
	}
	// The recorder started on a connection of its own (no viewer yet),
	// then followed the viewer: those segments are used from their start.
	if last := info.Segments[len(info.Segments)-1]; last.Usable == nil || *last.Usable != last.Start {
		t.Errorf("the last segment %+v: the recorder does not follow the live viewer", last)
	}
	before, after := seek(kf-50), seek(kf+50)
	if before != agent || after != agent {
		t.Errorf("around the keyframe at %.0f ms: %s before, %s after; live %s", kf, before, after, agent)
	}
	// Played, not seeked: from the start at 16x to the end.
	br.eval(t, `(replay.seek(0), replay.speed(8), replay.play(), "ok")`)
	br.waitJS(t, `replay.position() >= replay.duration`)
	if got := br.eval(t, `replay.seek(replay.duration).then(() => replay.hash())`); got != agent {
		t.Errorf("played to the end: %s, want %s", got, agent)
	}

	// The MP4 export (x264 on the server) plays in Chromium's <video>:
	// its size and length are the recording's, and at the person's and
	// the agent's moments it shows what the replay does (H.264 is lossy:
	// pixels far apart are counted), not the other moment's picture.
	br.waitJS(t, `!document.getElementById("mp4").hidden`) // x264 is there: the page offers the export
	br.eval(t, `(async () => {
		const v = document.createElement("video");
		v.muted = true;
		v.src = replay.mp4;
		document.body.append(v);
		await new Promise((ok, bad) => { v.onloadeddata = ok; v.onerror = () => bad(new Error("video: " + (v.error && v.error.message))); });
		window.mp4 = v;
		window.frameAt = async (ms) => {
			await new Promise((ok) => { v.onseeked = ok; v.currentTime = ms / 1000; });
			const c = document.createElement("canvas");
			c.width = v.videoWidth;
			c.height = v.videoHeight;
			const g = c.getContext("2d");
			g.drawImage(v, 0, 0);
			return g.getImageData(0, 0, c.width, c.height).data;
		};
		window.replayAt = async (ms) => {
			await replay.seek(ms);
			const c = document.querySelector("#stage canvas");
			return c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
		};
		window.far = (a, b) => { let n = 0; for (let i = 0; i < a.length; i += 4) if (Math.abs(a[i] - b[i]) + Math.abs(a[i+1] - b[i+1]) + Math.abs(a[i+2] - b[i+2]) > 96) n++; return n; };
		return "ok";
	})()`)
	var video struct {
		W, H, Duration                    float64
		Person, Agent, PersonVsAgent, Gap float64
	}
	js := fmt.Sprintf(`(async () => {
		const p = await replayAt(%[1]f), a = await replayAt(%[2]f);
		const vp = await frameAt(%[1]f), va = await frameAt(%[2]f);
		return JSON.stringify({w: mp4.videoWidth, h: mp4.videoHeight, duration: mp4.duration * 1000,
			person: far(vp, p), agent: far(va, a), personVsAgent: far(p, a), gap: far(va, p)});
	})()`, takeoverEnd, agentMS)
	if err := json.Unmarshal([]byte(br.eval(t, js)), &video); err != nil {
		t.Fatal(err)
	}
	t.Logf("MP4: %+v", video)
	if video.W != 1024 || video.H != 768 || math.Abs(video.Duration-info.Duration) > 250 {
		t.Errorf("the MP4 is %vx%v, %.0f ms; the recording 1024x768, %.0f ms", video.W, video.H, video.Duration, info.Duration)
	}
	if video.PersonVsAgent < 200 || video.Person > video.PersonVsAgent/4 || video.Agent > video.PersonVsAgent/4 || video.Gap < video.PersonVsAgent/2 {
		t.Errorf("the MP4's pictures (pixels far from the replay's): %+v", video)
	}
}
