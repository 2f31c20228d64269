package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/panel"
)

// descendants lists pid and every live process below it.
func descendants(pid int) []int {
	parent := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[0] != "Z" {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		for c, pp := range parent {
			if pp == out[i] {
				out = append(out, c)
			}
		}
	}
	return out
}

func procName(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}

// The panel key and the VNC password reach no child: not Xvfb, the window
// manager, Chromium and its helpers, or a terminal's shell, neither in
// their environment nor on their command line; and the daemon that
// `deskd start` spawns has them in neither either.
func TestSecretsStayOutOfChildren(t *testing.T) {
	key := panel.SandboxKey([]byte("secrets-e2e-master"), "sbx")
	const vncPassword = "vnc-pw-7391"
	t.Setenv("DESKD_PANEL_SECRET", key)
	t.Setenv("DESKD_VNC_PASSWORD", vncPassword)
	e := newInstall(t, "--sandbox-id", "sbx")
	out, code := e.run("start")
	st := e.status(out)
	if code != 0 || st.Status != "running" {
		t.Fatalf("start: exit %d %v", code, out)
	}
	daemon := st.Pids["deskd"]

	// A terminal session, so a shell runs too.
	tok, _ := panel.Mint([]byte(key), panel.Claims{SID: "sbx", Exp: time.Now().Add(time.Hour).Unix()})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+e.listen+"/panel/"+tok+"/terminal/ws", &websocket.DialOptions{Subprotocols: []string{"tty"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.Write(ctx, websocket.MessageBinary, []byte(`{"columns":80,"rows":24}`))
	c.Write(ctx, websocket.MessageBinary, []byte("0echo shell-$((3*7))\r"))
	var got bytes.Buffer
	for !strings.Contains(got.String(), "shell-21") {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("terminal: %v (output %q)", err, got.String())
		}
		if len(b) > 0 && b[0] == '0' {
			got.Write(b[1:])
		}
	}

	seen := noSecretsIn(t, descendants(daemon), map[string]string{"panel key": key, "VNC password": vncPassword})
	for _, want := range []string{"deskd", "Xvfb", "chromium", "bash"} {
		if !seen[want] {
			t.Errorf("no %s among the daemon's processes %v: the check did not see it", want, seen)
		}
	}
}

// noSecretsIn fails the test for each of pids whose environment or
// command line holds one of secrets (what -> secret), and returns the
// names of the processes it read.
func noSecretsIn(t *testing.T, pids []int, secrets map[string]string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, pid := range pids {
		name := procName(pid)
		seen[name] = true
		for _, f := range []string{"environ", "cmdline"} {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + f)
			if err != nil {
				continue // gone meanwhile
			}
			for what, secret := range secrets {
				if bytes.Contains(b, []byte(secret)) {
					t.Errorf("%s (pid %d) has the %s in its %s", name, pid, what, f)
				}
			}
		}
	}
	return seen
}

// A flag-like start URL is refused with a clear 400 and never reaches
// Chromium's command line; a real URL goes after "--".
func TestStartURLIsNotAFlag(t *testing.T) {
	e := newInstall(t)
	// (deskd start --url=--flag is a bad flag: TestBadFlags.)
	if _, code := e.run("start"); code != 0 {
		t.Fatal("start failed")
	}
	e.run("stop")
	for _, tt := range []struct{ url, want string }{
		{"--renderer-cmd-prefix=/bin/touch /tmp/pwned", "no scheme"},
		{"javascript:alert(1)", "not allowed"},
	} {
		b, _ := json.Marshal(map[string]string{"url": tt.url})
		resp, err := http.Post("http://"+e.listen+"/api/desktop/start", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(body["error"], tt.want) {
			t.Fatalf("start with url %q: %d %v; want 400 with %q", tt.url, resp.StatusCode, body, tt.want)
		}
	}
	page := "data:text/html,<title>ok</title>"
	b, _ := json.Marshal(map[string]string{"url": page})
	resp, err := http.Post("http://"+e.listen+"/api/desktop/start", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var st struct{ Pids map[string]int }
	json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	// Chromium rewrites its /proc cmdline, so ask it what it opened.
	var list []struct{ URL string }
	getJSON(t, "http://"+e.listen+"/cdp/json/list", &list)
	opened := false
	for _, p := range list {
		opened = opened || p.URL == page
	}
	if !opened {
		t.Fatalf("chromium did not open the start page (after --): %+v", list)
	}
	for _, pid := range descendants(st.Pids["deskd"]) {
		cl, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if bytes.Contains(cl, []byte("renderer-cmd-prefix")) {
			t.Fatalf("pid %d runs with the refused flag: %q", pid, cl)
		}
	}
}

// An agent whose discovery request meets a slow browser gets an error;
// the browser is not restarted under the other agents (that is the
// health checker's call, after two failed checks).
func TestSlowBrowserNotRestartedByAgent(t *testing.T) {
	e := newInstall(t)
	out, code := e.run("start")
	st := e.status(out)
	if code != 0 {
		t.Fatalf("start: %v", out)
	}
	pid := st.Pids["chromium"]
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resp, err := http.Get("http://" + e.listen + "/cdp/json/version")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("discovery from a stopped browser: %d, want 503", resp.StatusCode)
	}
	t.Logf("answered in %v", time.Since(stopped).Round(time.Millisecond))
	after := e.status(func() map[string]any { v, _ := e.run("status"); return v }())
	if after.Pids["chromium"] != pid || after.Restarts["chromium"] != 0 {
		t.Fatalf("chromium restarted by an agent's request: pid %d -> %d, restarts %v", pid, after.Pids["chromium"], after.Restarts)
	}
	var v struct{ Browser string }
	getJSON(t, "http://"+e.listen+"/cdp/json/version", &v)
	if v.Browser == "" {
		t.Fatal("browser does not answer after SIGCONT")
	}
}

// A desktop viewer left idle behind a proxy that cuts connections quiet
// for 600 ms stays connected (deskd pings it); the ops listener answers
// probes and metrics, and nothing else.
func TestDesktopPingsAndOpsListener(t *testing.T) {
	ops := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	e := newInstall(t, "--ws-ping", "200ms", "--ops-listen", ops)
	if out, code := e.run("start"); code != 0 {
		t.Fatalf("start: %v", out)
	}
	for path, want := range map[string]int{"/healthz": 200, "/livez": 200, "/readyz": 200, "/metrics": 200, "/vnc.html": 404, "/api/desktop/status": 404} {
		resp, err := http.Get("http://" + ops + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("ops %s = %d, want %d", path, resp.StatusCode, want)
		}
	}

	proxy := testenv.IdleProxy(t, e.listen, 600*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+proxy+"/websockify", &websocket.DialOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(64 << 20)
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	defer conn.Close()
	// A reader always waits on the socket, as in a browser: it answers
	// pings while the test itself reads nothing.
	pr, pw := io.Pipe()
	go func() { _, err := io.Copy(pw, conn); pw.CloseWithError(err) }() // ends with conn
	read := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(pr, b); err != nil {
			t.Fatalf("rfb read: %v", err)
		}
		return b
	}
	read(12)
	conn.Write([]byte("RFB 003.008\n"))
	if types := read(int(read(1)[0])); types[0] != 1 {
		t.Fatalf("security types %v", types)
	}
	conn.Write([]byte{1})
	read(4)               // SecurityResult
	conn.Write([]byte{1}) // ClientInit: shared
	init := read(24)
	read(int(binary.BigEndian.Uint32(init[20:])))

	time.Sleep(2 * time.Second)                      // idle on purpose: three proxy timeouts
	conn.Write([]byte{2, 0, 0, 1, 0, 0, 0, 0})       // SetEncodings: Raw
	conn.Write([]byte{3, 0, 0, 0, 0, 0, 0, 8, 0, 8}) // a full 8x8 request
	if h := read(4); h[0] != 0 {
		t.Fatalf("message %d, want a FramebufferUpdate", h[0])
	}

	// Readiness follows the display: an X server that does not answer
	// (stopped) makes /readyz 503 and says why; /livez stays 200.
	out, _ := e.run("status")
	xvfb := e.status(out).Pids["xvfb"]
	ready := func() (int, string) {
		resp, err := http.Get("http://" + ops + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := ready(); code != 200 {
		t.Fatalf("/readyz with the desktop up: %d %s", code, body)
	}
	if err := syscall.Kill(xvfb, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	code, body := ready()
	syscall.Kill(xvfb, syscall.SIGCONT)
	if code != 503 || !strings.Contains(body, "x11") {
		t.Fatalf("/readyz with Xvfb stopped: %d %s; want 503 naming x11", code, body)
	}
	if resp, err := http.Get("http://" + ops + "/livez"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/livez: %v %v", resp, err)
	}
	waitFor(t, 10*time.Second, "/readyz back once Xvfb went on", func() bool { code, _ := ready(); return code == 200 })
}

// The desktop's display admits only holders of deskd's cookie: the file
// is the GUI user's alone, the window manager, Chromium and the shells
// have it, and a client without it is refused.
func TestDisplayNeedsCookie(t *testing.T) {
	xdpyinfo := testenv.LookPath(t, "xdpyinfo")
	e := newInstall(t)
	out, code := e.run("start")
	st := e.status(out)
	if code != 0 {
		t.Fatalf("start: %v", out)
	}
	if st.XAuthority != filepath.Join(e.runDir, xauthFile) {
		t.Fatalf("status xauthority %q", st.XAuthority)
	}
	fi, err := os.Stat(st.XAuthority)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("authority file %v: %v", fi, err)
	}
	if os.Geteuid() == 0 {
		if s := fi.Sys().(*syscall.Stat_t); s.Uid != 1000 || s.Gid != 1000 {
			t.Fatalf("authority file owned by %d:%d, want the GUI user 1000:1000", s.Uid, s.Gid)
		}
	}
	run := func(xauth string) error {
		cmd := exec.Command(xdpyinfo, "-display", st.Display)
		cmd.Env = []string{"XAUTHORITY=" + xauth, "HOME=" + t.TempDir()}
		b, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %.200s", err, b)
		}
		return nil
	}
	if err := run("/nonexistent"); err == nil {
		t.Fatal("a client without the cookie was admitted to the display")
	}
	if err := run(st.XAuthority); err != nil {
		t.Fatalf("a client with the cookie was refused: %v", err)
	}
	for _, name := range []string{"chromium", "wm"} {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(st.Pids[name]) + "/environ")
		if !bytes.Contains(env, []byte("XAUTHORITY="+st.XAuthority+"\x00")) {
			t.Errorf("%s runs without XAUTHORITY", name)
		}
	}
}
