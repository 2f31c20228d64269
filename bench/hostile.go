package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/klauspost/compress/zlib"

	"github.com/cubepod/deskd/panel"
)

// HostileReport is every entry point of one deskd (behind panel tokens,
// as in production) tried with input meant to hurt it.
type HostileReport struct {
	Cases    []HostileCase `json:"cases"`
	Passed   int           `json:"passed"`
	Limits   []string      `json:"limits"`
	Problems []string      `json:"problems"`
}

// HostileCase is one attempt: what deskd should do and what it did.
type HostileCase struct {
	Entry string `json:"entry"`
	Name  string `json:"name"`
	Want  string `json:"want"`
	Got   string `json:"got"`
	OK    bool   `json:"ok"`
}

// hostileSID is the sandbox the suite's deskd serves.
const hostileSID = "sb-hostile"

// hostile is the suite's state: one deskd and the tokens for it.
type hostile struct {
	in                 *instance
	port               int
	key, master        []byte
	full, view         string
	fullBase, viewBase string
}

func (h *hostile) mint(key []byte, c panel.Claims) string {
	if c.Exp == 0 {
		c.Exp = time.Now().Add(time.Hour).Unix()
	}
	tok, err := panel.Mint(key, c)
	if err != nil {
		panic(err) // claims built here are always valid
	}
	return tok
}

// do sends one request and returns its status and body (at most 64 KiB).
func do(ctx context.Context, method, u string, hdr map[string]string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(b), nil
}

// rawStatus sends a request line as written (no client-side cleaning of
// the path) and returns the response's status line and body.
func rawStatus(addr, path string) (string, string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return strconv.Itoa(resp.StatusCode), string(b), nil
}

// wsStatus tries a WebSocket upgrade and returns the HTTP status deskd
// answered (101 when it accepted).
func wsStatus(ctx context.Context, u string, hdr http.Header, sub ...string) int {
	c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: hdr, Subprotocols: sub})
	if err == nil {
		c.CloseNow()
		return 101
	}
	if resp != nil {
		return resp.StatusCode
	}
	return 0
}

// wsClose sends msg on a WebSocket at u and returns the close code it
// ends with.
func wsClose(ctx context.Context, u string, sub string, first, msg []byte) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{Subprotocols: []string{sub}})
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.CloseNow()
	if first != nil {
		c.Write(ctx, websocket.MessageBinary, first)
	}
	if err := c.Write(ctx, websocket.MessageBinary, msg); err != nil && websocket.CloseStatus(err) == -1 {
		// the server may close before the whole message is in
		return closeText(err)
	}
	for {
		if _, _, err := c.Read(ctx); err != nil {
			return closeText(err)
		}
	}
}

func closeText(err error) string {
	if st := websocket.CloseStatus(err); st != -1 {
		return "close " + strconv.Itoa(int(st))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "still open"
	}
	return "closed"
}

// rfbEnds connects a viewer at u, sends msg after the handshake and
// reports whether deskd ended the connection.
func rfbEnds(ctx context.Context, u string, msg []byte) string {
	v, err := dialViewer(ctx, u, viewerEncodings)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer v.conn.Close()
	if _, err := v.conn.Write(msg); err != nil {
		return "closed"
	}
	// (a deadline ends a WebSocket NetConn's read as a cancellation, not
	// as a timeout: time tells the two apart)
	t0 := time.Now()
	v.conn.SetReadDeadline(t0.Add(5 * time.Second))
	for {
		if _, err := v.br.ReadByte(); err != nil {
			if time.Since(t0) > 4500*time.Millisecond {
				return "still open"
			}
			return "closed"
		}
	}
}

// Hostile runs the suite against a deskd of its own.
func Hostile(ctx context.Context, bin string, log io.Writer) (*HostileReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if log == nil {
		log = io.Discard
	}
	rep := &HostileReport{Cases: []HostileCase{}, Problems: []string{}}
	h := &hostile{master: make([]byte, 32)}
	rand.Read(h.master)
	h.key = []byte(panel.SandboxKey(h.master, hostileSID))
	dir, err := os.MkdirTemp("", "deskd-hostile-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	keyFile := filepath.Join(dir, "panel.key")
	if err := os.WriteFile(keyFile, h.key, 0o600); err != nil {
		return rep, err
	}
	const maxConns = 64
	in, err := newInstance(bin, "--panel-secret-file", keyFile, "--sandbox-id", hostileSID, "--max-conns", strconv.Itoa(maxConns))
	if err != nil {
		return rep, err
	}
	defer in.close()
	h.in = in
	h.port, _ = strconv.Atoi(in.addr[strings.LastIndexByte(in.addr, ':')+1:])
	h.full = h.mint(h.key, panel.Claims{SID: hostileSID, Port: h.port})
	h.view = h.mint(h.key, panel.Claims{SID: hostileSID, Port: h.port, Scope: panel.ScopeView})
	h.fullBase = "http://" + in.addr + "/panel/" + h.full
	h.viewBase = "http://" + in.addr + "/panel/" + h.view
	if _, err := in.run(ctx, "start"); err != nil {
		return rep, err
	}
	rep.Limits = []string{
		"HTTP: request headers within 10 s (ReadHeaderTimeout), at most 64 KiB; idle keep-alive 120 s; at most --max-conns open connections (default 1024, " + strconv.Itoa(maxConns) + " in this suite): idle keep-alives, then connections silent for 1 s, are closed for new ones; an address that has not shown a valid token holds --max-conns-per-addr (default a quarter of --max-conns, 64 at most; 16 in this suite); a 403 closes its connection",
		"screenshots: 4 in progress for view tokens, 8 for full ones (503 with Retry-After past it), 2 encoding at once; a view token's MCP wait 5 s at most; a view token reads ~/Downloads only",
		"WebSocket messages: terminal 1 MiB + 1, CDP 256 MiB (streamed, never held whole); RFB is a byte stream whose messages are bounded one by one: clipboard text 1 MiB (longer is read and dropped), 512 encodings, fence 64 B, 16 screens, 8192 px",
		"desktop and terminal WebSockets pinged every 20 s, dropped after two missed; any WebSocket under a token closed 1008 at its expiry",
		"32 VNC viewers (--max-viewers); a viewer that stops reading is dropped after 30 s",
	}
	check := func(entry, name, want, got string) {
		c := HostileCase{Entry: entry, Name: name, Want: want, Got: got, OK: got == want}
		rep.Cases = append(rep.Cases, c)
		if c.OK {
			rep.Passed++
		} else {
			p := fmt.Sprintf("%s: %s: got %q, want %q", entry, name, got, want)
			rep.Problems = append(rep.Problems, p)
			fmt.Fprintln(log, "  PROBLEM:", p)
		}
	}
	status := func(method, u string, hdr map[string]string, body string) string {
		code, _, err := do(ctx, method, u, hdr, []byte(body))
		if err != nil {
			return err.Error()
		}
		return strconv.Itoa(code)
	}
	alive := func() bool {
		code, _, err := do(ctx, "GET", h.fullBase+"/healthz", nil, nil)
		return err == nil && code == 200
	}

	// Tokens.
	other := h.mint([]byte(panel.SandboxKey(h.master, "sb-other")), panel.Claims{SID: "sb-other", Port: h.port})
	mark := func(tok string) string { return "http://" + in.addr + "/panel/" + tok + "/vnc.html" }
	tampered := []byte(h.full)
	tampered[len(tampered)/2] ^= 1
	for _, tc := range []struct{ name, u string }{
		{"no token", "http://" + in.addr + "/vnc.html"},
		{"tampered", mark(string(tampered))},
		{"expired", mark(h.mint(h.key, panel.Claims{SID: hostileSID, Port: h.port, Exp: time.Now().Add(-time.Second).Unix()}))},
		{"other sandbox's token", mark(other)},
		{"our sid signed with another sandbox's key", mark(h.mint([]byte(panel.SandboxKey(h.master, "sb-other")), panel.Claims{SID: hostileSID, Port: h.port}))},
		{"signed with the gateway's master secret", mark(h.mint(h.master, panel.Claims{SID: hostileSID, Port: h.port}))},
		{"another port of the sandbox", mark(h.mint(h.key, panel.Claims{SID: hostileSID, Port: h.port + 1}))},
		{"unknown scope, signed", mark(signRaw(h.key, fmt.Sprintf(`{"sid":%q,"port":%d,"exp":%d,"scope":"root"}`, hostileSID, h.port, time.Now().Add(time.Hour).Unix())))},
		{"no expiry, signed", mark(signRaw(h.key, fmt.Sprintf(`{"sid":%q,"port":%d}`, hostileSID, h.port)))},
		{"claims not JSON, signed", mark(signRaw(h.key, `sid=`+hostileSID))},
		{"3 KiB of token", mark(strings.Repeat("A", 3000))},
	} {
		check("token", tc.name, "403", status("GET", tc.u, nil, ""))
	}
	check("token", "valid", "200", status("GET", mark(h.full), nil, ""))

	// Scope view: every write path.
	jsonCT := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct{ name, method, path, body string }{
		{"desktop start", "POST", "/api/desktop/start", "{}"},
		{"desktop stop", "POST", "/api/desktop/stop", "{}"},
		{"desktop status", "GET", "/api/desktop/status", ""},
		{"CDP discovery", "GET", "/cdp/json/version", ""},
		{"CDP new tab", "PUT", "/cdp/json/new?about:blank", ""},
		{"computer actions", "POST", "/computer/actions", `{"actions":[{"action":"left_click","coordinate":[10,10]}]}`},
		{"clipboard write", "PUT", "/computer/clipboard", `{"text":"pwned"}`},
		{"OpenAI actions", "POST", "/computer/compat/openai", `{"actions":[{"type":"click","x":1,"y":1}]}`},
		{"AIO actions", "POST", "/computer/compat/aio", `{"action_type":"CLICK","x":1,"y":1}`},
	} {
		check("view scope", tc.name, "403", status(tc.method, h.viewBase+tc.path, jsonCT, tc.body))
	}
	check("view scope", "screenshot (allowed)", "200", status("GET", h.viewBase+"/computer/screenshot", nil, ""))
	check("view scope", "32 concurrent screenshots", "200 or 503 with Retry-After", h.viewShots(ctx, 32))
	check("view scope", "upload to ~/Downloads (full token, for what follows)", "201", status("PUT", h.fullBase+"/files/Downloads/hostile.txt", nil, "shared"))
	check("view scope", "files: ~/Downloads listed", "200", status("GET", h.viewBase+"/files/Downloads/", nil, ""))
	check("view scope", "files: a file in ~/Downloads", "200", status("GET", h.viewBase+"/files/Downloads/hostile.txt", nil, ""))
	check("view scope", "files: the home listed", "403", status("GET", h.viewBase+"/files/", nil, ""))
	check("view scope", "files: ~/.bash_history", "403", status("GET", h.viewBase+"/files/.bash_history", nil, ""))
	check("view scope", "files: ~/.ssh/", "403", status("GET", h.viewBase+"/files/.ssh/", nil, ""))
	for _, tool := range []string{`"left_click","arguments":{"coordinate":[5,5]}`, `"shell_exec","arguments":{"command":"id"}`, `"wait","arguments":{"duration":30}`} {
		call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":` + tool + `}}`
		_, body, _ := do(ctx, "POST", h.viewBase+"/mcp", map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, []byte(call))
		check("view scope", "MCP tool "+tool[1:strings.IndexByte(tool[1:], '"')+1], "refused", refusedMCP(body))
	}
	for _, tc := range []struct{ name, path, sub string }{
		{"CDP browser socket", "/cdp", ""},
		{"new terminal session", "/terminal/ws", "tty"},
	} {
		check("view scope", tc.name, "403", strconv.Itoa(wsStatus(ctx, "ws"+strings.TrimPrefix(h.viewBase, "http")+tc.path, nil, tc.sub)))
	}
	check("view scope", "terminal input to an existing session", "not run", h.viewTerminal(ctx))
	for _, tc := range h.viewDesktop(ctx) {
		check("view scope", tc[0], tc[1], tc[2])
	}

	// Origin on every WebSocket route, and CSRF on the POST ones.
	evil := http.Header{"Origin": {"http://evil.example"}}
	ws := "ws" + strings.TrimPrefix(h.fullBase, "http")
	for _, tc := range []struct{ path, sub string }{
		{"/websockify", "binary"}, {"/terminal/ws", "tty"}, {"/cdp", ""}, {"/cdp/devtools/browser/x", ""},
	} {
		check("origin", "WebSocket "+tc.path+" from another origin", "403", strconv.Itoa(wsStatus(ctx, ws+tc.path, evil, tc.sub)))
	}
	check("origin", "POST start from another origin", "403", status("POST", h.fullBase+"/api/desktop/start",
		map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, "{}"))
	check("origin", "POST start as a form", "415", status("POST", h.fullBase+"/api/desktop/start",
		map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "url=x"))

	// Paths.
	for _, p := range []string{
		"/panel/" + h.full + "/../../../../etc/passwd",
		"/panel/" + h.full + "/vendor/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
		"/panel/" + h.full + "/..%2f..%2f..%2fetc%2fpasswd",
		"/panel/" + h.full + "/vendor/novnc/..%5c..%5c..%5cetc%5cpasswd",
		"/panel/" + h.full + "/%00",
	} {
		code, body, err := rawStatus(in.addr, p)
		got := code
		if err != nil {
			got = err.Error()
		}
		if strings.Contains(body, "root:") {
			got = "leaked /etc/passwd"
		} else if code != "" && code != "200" {
			got = "refused"
		}
		check("paths", "traversal "+strings.TrimPrefix(p, "/panel/"+h.full), "refused", got)
	}
	check("paths", "start URL with a flag", "400", status("POST", h.fullBase+"/api/desktop/start", jsonCT, `{"url":"--renderer-cmd-prefix=/bin/sh"}`))
	check("paths", "start URL javascript:", "400", status("POST", h.fullBase+"/api/desktop/start", jsonCT, `{"url":"javascript:alert(1)"}`))

	// WebSocket messages just over their limits.
	check("frames", "terminal message of 1 MiB + 2", "close 1009",
		wsClose(ctx, ws+"/terminal/ws", "tty", []byte(`{"AuthToken":"","columns":80,"rows":24}`), append([]byte{'0'}, make([]byte, 1<<20+1)...)))

	// RFB messages with lengths and counts past their bounds.
	be := binary.BigEndian
	rss0 := rssKiB(h.daemonPid(ctx))
	for _, tc := range []struct {
		name, want string
		msg        []byte
	}{
		// Over-long clipboard text is read and dropped (TigerVNC does the
		// same): the connection waits for the bytes it announced.
		{"cut text claiming 2 GiB, 10 bytes sent", "still open", append([]byte{6, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff}, "0123456789"...)},
		{"cut text of 4 MiB, sent in full", "still open", append(be.AppendUint32([]byte{6, 0, 0, 0}, 4<<20), make([]byte, 4<<20)...)},
		{"extended cut text of -2^31", "closed", []byte{6, 0, 0, 0, 0x80, 0, 0, 0}},
		{"extended clipboard item claiming 1 GiB", "still open", extClipBomb(1<<30, 1<<20)},
		{"extended clipboard of 1 MiB inflating to 256 MiB", "still open", extClipBomb(1<<20, 256<<20)},
		{"SetEncodings with 65535 entries", "closed", []byte{2, 0, 0xff, 0xff}},
		{"fence with 255 bytes", "closed", []byte{248, 0, 0, 0, 0, 0, 0, 0, 255}},
		{"SetDesktopSize with 255 screens", "closed", []byte{251, 0, 4, 0, 3, 0, 255, 0}},
		{"SetDesktopSize 65535x65535", "closed", append([]byte{251, 0, 0xff, 0xff, 0xff, 0xff, 1, 0}, make([]byte, 16)...)},
		{"unknown message type", "closed", []byte{99, 1, 2, 3}},
	} {
		check("rfb", tc.name, tc.want, rfbEnds(ctx, ws+"/websockify", tc.msg))
	}
	check("rfb", "deskd RSS after the cases above", "within 24 MiB", within(rssKiB(h.daemonPid(ctx))-rss0, 24<<10))

	// Listening beyond loopback without a secret.
	out, _ := exec.CommandContext(ctx, bin, "serve", "--listen", "0.0.0.0:0").CombinedOutput()
	got := "started"
	if strings.Contains(string(out), "loopback only") {
		got = "refused"
	}
	check("flags", "non-loopback --listen without a secret", "refused", got)

	// Slowloris and a flood of idle connections, last: while the flood
	// lasts, new connections wait.
	var slow sync.WaitGroup
	var slowGot, idleGot string
	slow.Go(func() { slowGot = slowloris(ctx, in.addr) })
	slow.Go(func() { idleGot = idleFlood(ctx, in.addr, maxConns, h.fullBase+"/healthz") })
	slow.Wait()
	check("http", "slowloris: headers one byte a second", "closed by deskd within 12 s", slowGot)
	check("http", strconv.Itoa(maxConns)+" idle connections, then a request", "served within 2 s", idleGot)
	check("http", "a 403 closes its connection", "closed", closedAfter403(ctx, in.addr))
	check("http", "2,000 connections from 127.0.0.2, idle or answered 403, then a request with a token from 127.0.0.1", "served within 1 s",
		floodFromAnother(ctx, in.addr, 2000, h.fullBase+"/vnc.html"))
	check("http", "deskd still serves", "yes", okText(alive()))

	// Last (the lease lasts 10 s): the lease is the token's, not the
	// X-Agent-Id's: another token sending the holder's id is refused.
	a := "http://" + in.addr + "/panel/" + h.mint(h.key, panel.Claims{SID: hostileSID, Port: h.port, Exp: time.Now().Add(2 * time.Hour).Unix()})
	b := "http://" + in.addr + "/panel/" + h.mint(h.key, panel.Claims{SID: hostileSID, Port: h.port, Exp: time.Now().Add(3 * time.Hour).Unix()})
	move := `{"actions":[{"action":"mouse_move","coordinate":[30,30]}]}`
	agentA := map[string]string{"Content-Type": "application/json", "X-Agent-Id": "agent-a"}
	check("lease", "the holder's action", "200", status("POST", a+"/computer/actions", agentA, move))
	check("lease", "another token with the holder's X-Agent-Id", "409", status("POST", b+"/computer/actions", agentA, move))
	return rep, nil
}

// signRaw signs any payload as the gateway signs claims
// (base64url(payload) "." base64url(HMAC-SHA256)), for claims the
// gateway itself would never mint.
func signRaw(key []byte, payload string) string {
	p := base64.RawURLEncoding.EncodeToString([]byte(payload))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(p))
	return p + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func within(deltaKiB float64, maxKiB float64) string {
	if deltaKiB <= maxKiB {
		return "within " + strconv.Itoa(int(maxKiB/1024)) + " MiB"
	}
	return fmt.Sprintf("grew %.1f MiB", deltaKiB/1024)
}

// daemonPid is the daemon's pid from its pid file.
func (h *hostile) daemonPid(ctx context.Context) int {
	b, _ := os.ReadFile(filepath.Join(h.in.runDir, "deskd.pid"))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// refusedMCP reads a JSON-RPC answer: an error, or a tool result marked
// isError, is a refusal.
func refusedMCP(body string) string {
	var r struct {
		Error  *json.RawMessage `json:"error"`
		Result struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	if json.Unmarshal([]byte(body), &r) != nil {
		return "unreadable answer: " + body
	}
	if r.Error != nil || r.Result.IsError {
		return "refused"
	}
	return "ran: " + body
}

// extClipBomb is an ExtendedClipboard provide message (as ClientCutText
// with a negative length) whose text item claims size bytes and whose
// zlib stream inflates to n zero bytes.
func extClipBomb(size uint32, n int) []byte {
	var z bytes.Buffer
	binary.Write(&z, binary.BigEndian, uint32(1<<28|1)) // provide | text
	w, _ := zlib.NewWriterLevel(&z, zlib.BestCompression)
	binary.Write(w, binary.BigEndian, size)
	zero := make([]byte, 1<<20)
	for i := 0; i < n; i += len(zero) {
		w.Write(zero)
	}
	w.Close()
	msg := binary.BigEndian.AppendUint32([]byte{6, 0, 0, 0}, uint32(-int32(z.Len())))
	return append(msg, z.Bytes()...)
}

// viewTerminal: a full token starts a session, a view token attaches to
// it and types; the command must not run.
func (h *hostile) viewTerminal(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	wsURL := func(base string) string { return "ws" + strings.TrimPrefix(base, "http") + "/terminal/ws" }
	owner, id, err := dialSession(ctx, wsURL(h.fullBase), "")
	if err != nil {
		return "owner: " + err.Error()
	}
	defer owner.c.CloseNow()
	go owner.readUntil(ctx, "\x00never") // keep reading, as a page does
	watcher, _, err := dialSession(ctx, wsURL(h.viewBase), id)
	if err != nil {
		return "watcher: " + err.Error()
	}
	defer watcher.c.CloseNow()
	marker := filepath.Join(os.TempDir(), "deskd-hostile-"+hex.EncodeToString([]byte(h.view[:6])))
	os.Remove(marker)
	watcher.input(ctx, "touch "+marker+"\r")
	// The owner then runs a command of its own: once its output is
	// there, the watcher's earlier input would have run too.
	probe, _, err := dialSession(ctx, wsURL(h.fullBase), id)
	if err != nil {
		return "probe: " + err.Error()
	}
	defer probe.c.CloseNow()
	probe.input(ctx, "echo done-$((40+2))\r")
	if err := probe.readUntil(ctx, "done-42"); err != nil {
		return "owner's command did not run: " + err.Error()
	}
	if _, err := os.Stat(marker); err == nil {
		os.Remove(marker)
		return "ran"
	}
	return "not run"
}

// viewDesktop: a view-only viewer sends a pointer move, a key, cut text
// and a resize; none of them may reach the X display.
func (h *hostile) viewDesktop(ctx context.Context) [][3]string {
	info := func() (cursor []int, w, hgt int, clip string) {
		var i struct {
			Cursor       []int `json:"cursor"`
			ScreenWidth  int   `json:"screen_width"`
			ScreenHeight int   `json:"screen_height"`
		}
		getJSON(ctx, h.fullBase+"/computer/info", &i)
		var c struct{ Text string }
		getJSON(ctx, h.fullBase+"/computer/clipboard", &c)
		return i.Cursor, i.ScreenWidth, i.ScreenHeight, c.Text
	}
	fail := func(err error) [][3]string { return [][3]string{{"desktop input", "ignored", err.Error()}} }
	// A known state first, set with the full token.
	body := []byte(`{"actions":[{"action":"mouse_move","coordinate":[20,20]}]}`)
	if err := postJSON(ctx, h.fullBase+"/computer/actions", body, nil); err != nil {
		return fail(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, h.fullBase+"/computer/clipboard", strings.NewReader(`{"text":"before"}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		return fail(err)
	} else {
		resp.Body.Close()
	}
	cur0, w0, h0, clip0 := info()
	v, err := dialViewer(ctx, "ws"+strings.TrimPrefix(h.viewBase, "http")+"/websockify", viewerEncodings)
	if err != nil {
		return fail(err)
	}
	defer v.conn.Close()
	be := binary.BigEndian
	msg := []byte{5, 0, 300 >> 8, 300 & 0xff, 0, 200}                     // pointer to (300,200)
	msg = append(msg, 4, 1, 0, 0, 0, 0, 0, 'x', 4, 0, 0, 0, 0, 0, 0, 'x') // key x down, up
	msg = append(be.AppendUint32(append(msg, 6, 0, 0, 0), 5), "pwned"...) // cut text
	// SetDesktopSize 400x300, one screen of that size.
	msg = be.AppendUint16(be.AppendUint16(append(msg, 251, 0), 400), 300)
	msg = append(msg, 1, 0)
	msg = be.AppendUint32(msg, 0)
	msg = be.AppendUint16(be.AppendUint16(be.AppendUint16(be.AppendUint16(msg, 0), 0), 400), 300)
	msg = be.AppendUint32(msg, 0)
	if _, err := v.conn.Write(msg); err != nil {
		return fail(err)
	}
	v.request(false)
	v.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	v.next() // the messages before the request have been handled
	time.Sleep(300 * time.Millisecond)
	cur1, w1, h1, clip1 := info()
	res := func(changed bool) string {
		if changed {
			return "reached X"
		}
		return "ignored"
	}
	return [][3]string{
		{"desktop pointer from a view-only viewer", "ignored", res(fmt.Sprint(cur0) != fmt.Sprint(cur1))},
		{"desktop cut text from a view-only viewer", "ignored", res(clip0 != clip1)},
		{"desktop resize from a view-only viewer", "ignored", res(w0 != w1 || h0 != h1)},
	}
}

// slowloris trickles a request's headers one byte a second and reports
// when deskd hung up.
func slowloris(ctx context.Context, addr string) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	t0 := time.Now()
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n", addr)
	buf := make([]byte, 1)
	for time.Since(t0) < 30*time.Second && ctx.Err() == nil {
		c.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("X")); err != nil {
			break
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			break
		}
	}
	if d := time.Since(t0); d < 12*time.Second {
		return "closed by deskd within 12 s"
	} else {
		return fmt.Sprintf("open for %v", d.Round(time.Second))
	}
}

// idleFlood opens n connections that send nothing, then makes a request:
// it must be served once deskd has timed the idle ones out.
func idleFlood(ctx context.Context, addr string, n int, u string) string {
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err.Error()
		}
		conns = append(conns, c)
	}
	return servedWithin(ctx, u, 2*time.Second, "2 s")
}

// servedWithin asks u on a fresh connection and says whether a 200 came
// within d (named say).
func servedWithin(ctx context.Context, u string, d time.Duration, say string) string {
	t0 := time.Now()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := client.Do(req)
	if err != nil {
		return "not served: " + err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "status " + resp.Status
	}
	if took := time.Since(t0); took > d {
		return fmt.Sprintf("served after %v", took.Round(10*time.Millisecond))
	}
	return "served within " + say
}

// closedAfter403 sends a request without a token on a keep-alive
// connection and reports whether deskd closed it after its 403.
func closedAfter403(ctx context.Context, addr string) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /vnc.html HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err.Error()
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 {
		return "status " + resp.Status
	}
	if _, err := br.ReadByte(); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return "kept open"
		}
		return "closed"
	}
	return "more bytes after the 403"
}

// floodFromAnother opens n connections from 127.0.0.2, every other one
// answered 403 and all left open, then asks u from 127.0.0.1 (where the
// gateway would be).
func floodFromAnother(ctx context.Context, addr string, n int, u string) string {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return
			}
			if i%2 == 1 {
				fmt.Fprintf(c, "GET /vnc.html HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				c.Read(make([]byte, 512))
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		})
	}
	wg.Wait()
	return servedWithin(ctx, u, time.Second, "1 s")
}

// viewShots takes n screenshots with the view token at once: each must
// be a picture or a 503 that says when to come back.
func (h *hostile) viewShots(ctx context.Context, n int) string {
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]int{}
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.viewBase+"/computer/screenshot", nil)
			k := "error"
			if resp, err := probeClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				k = resp.Status
				if resp.StatusCode == 503 && resp.Header.Get("Retry-After") == "" {
					k += " without Retry-After"
				}
			}
			mu.Lock()
			got[k]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for k := range got {
		if k != "200 OK" && k != "503 Service Unavailable" {
			return fmt.Sprint(got)
		}
	}
	return "200 or 503 with Retry-After"
}
