package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
)

// deskdBin is the deskd binary built once for the end-to-end tests: the
// CLI contract (flock, daemon spawn, exit codes) is about real processes.
var deskdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deskd-bin-")
	if err != nil {
		panic(err)
	}
	// deskd run as root with --user drops to the GUI user and then
	// starts its daemon from this binary: that user must reach it.
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	deskdBin = filepath.Join(dir, "deskd")
	out, err := exec.Command("go", "build", "-o", deskdBin, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build deskd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// install is one deskd installation: a run dir and the flags every command gets.
type install struct {
	t      *testing.T
	runDir string
	listen string
	flags  []string
	cred   *syscall.Credential // run the commands as this user (nil: as the test)
	// daemonLog is what a deskd serve of serveDeskd writes to stderr.
	daemonLog *lockedBuffer
}

func newInstall(t *testing.T, extra ...string) *install {
	testenv.LookPath(t, "Xvfb")
	testenv.Chromium(t)
	e := &install{t: t, runDir: testenv.TempDir(t), listen: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))}
	e.flags = append([]string{"--run-dir", e.runDir, "--listen", e.listen, "--cdp-port", strconv.Itoa(testenv.FreePort(t)),
		"--resolution", "1024x768x24", "--log-level", "debug"}, extra...)
	if os.Geteuid() == 0 {
		e.flags = append(e.flags, "--user", "1000:1000")
	}
	t.Cleanup(func() {
		// Stop whatever the test left; then make sure nothing of ours runs.
		e.run("stop", "--daemon")
		if t.Failed() {
			for _, name := range []string{"deskd.log", "chromium.log", "xvfb.log"} {
				b, _ := os.ReadFile(filepath.Join(e.runDir, "logs", name))
				t.Logf("--- %s (tail):\n%s", name, tail(string(b), 2000))
			}
		}
	})
	return e
}

// useDisplay lets this test process and the X clients it starts connect
// to the installation's display: deskd admits only holders of its cookie.
func (e *install) useDisplay(t *testing.T) {
	t.Setenv("XAUTHORITY", filepath.Join(e.runDir, xauthFile))
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// run runs `deskd cmd flags...` and returns its JSON line and exit code.
func (e *install) run(cmd string, args ...string) (map[string]any, int) {
	e.t.Helper()
	c := exec.Command(deskdBin, append(append([]string{cmd}, e.flags...), args...)...)
	if e.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
		c.Dir = "/"
	}
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("deskd %s: %v", cmd, err)
	}
	out := stdout.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		e.t.Fatalf("deskd %s printed %q (stderr %q); want one line of JSON", cmd, out, stderr.String())
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		e.t.Fatalf("deskd %s printed %q: %v", cmd, out, err)
	}
	return v, code
}

func (e *install) status(v map[string]any) desktop.Status {
	e.t.Helper()
	b, _ := json.Marshal(v)
	var st desktop.Status
	if err := json.Unmarshal(b, &st); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// children lists the live (non-zombie) child processes of pid.
func children(pid int) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[0] != "Z" && f[1] == strconv.Itoa(pid) {
			out = append(out, e.Name()+" "+s[strings.IndexByte(s, '(')+1:strings.LastIndexByte(s, ')')])
		}
	}
	return out
}

func rssKiB(pid int) int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

func TestIdleServeStartsNothing(t *testing.T) {
	e := newInstall(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cmd := exec.CommandContext(ctx, deskdBin, append([]string{"serve"}, e.flags...)...)
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitHTTP(t, "http://"+e.listen+"/healthz")
	// Serve some pages and metrics: still nothing may start.
	for _, p := range []string{"/vnc.html", "/terminal/", "/metrics", "/api/desktop/status"} {
		resp, err := http.Get("http://" + e.listen + p)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %v %v", p, err, resp)
		}
		resp.Body.Close()
	}
	if kids := children(cmd.Process.Pid); len(kids) != 0 {
		t.Fatalf("idle deskd has children %v", kids)
	}
	t.Logf("idle deskd RSS %d KiB (make bench reports it against the peers)", rssKiB(cmd.Process.Pid))
	st, code := e.run("status")
	if code != exitStopped || st["status"] != "stopped" {
		t.Fatalf("status of idle daemon = %v, exit %d; want stopped, exit 3", st, code)
	}
	// SIGTERM: a clean exit that removes the pid file and the socket.
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exited with %v; log:\n%s", err, logs.String())
	}
	for _, f := range []string{pidFile, controlSock} {
		if _, err := os.Stat(filepath.Join(e.runDir, f)); !os.IsNotExist(err) {
			t.Errorf("%s left behind (%v)", f, err)
		}
	}
}

// --debug-addr serves the runtime's profiles on loopback, and only there.
func TestDebugAddr(t *testing.T) {
	e := newInstall(t)
	dbg := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cmd := exec.CommandContext(t.Context(), deskdBin, append([]string{"serve", "--debug-addr", dbg}, e.flags...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	waitHTTP(t, "http://"+e.listen+"/healthz")
	for _, tt := range []struct {
		url  string
		want int
		body string
	}{
		{"http://" + dbg + "/debug/pprof/heap?debug=1", 200, "heap profile"},
		{"http://" + dbg + "/debug/pprof/goroutine?debug=1", 200, "goroutine profile"},
		{"http://" + dbg + "/vnc.html", 404, ""},
		{"http://" + e.listen + "/debug/pprof/", 404, ""},
	} {
		resp, err := http.Get(tt.url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.want || !strings.Contains(string(b), tt.body) {
			t.Errorf("GET %s = %d %.80q; want %d %q", tt.url, resp.StatusCode, b, tt.want, tt.body)
		}
	}
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond) // the daemon's readiness is only visible this way
	}
}

func TestCLIContract(t *testing.T) {
	e := newInstall(t)
	// A profile that came from another host: its SingletonLock names a
	// host that is not this one, which makes Chromium refuse to start.
	profile := filepath.Join(e.runDir, "chromium-profile")
	if err := os.MkdirAll(profile, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("other-host-31337", filepath.Join(profile, "SingletonLock")); err != nil {
		t.Fatal(err)
	}

	if st, code := e.run("status"); code != exitStopped || st["status"] != "stopped" {
		t.Fatalf("status with no daemon: %v exit %d", st, code)
	}
	if st, code := e.run("health"); code != exitFailed || st["status"] != "error" {
		t.Fatalf("health with no daemon: %v exit %d", st, code)
	}

	// Ten starts at once: one daemon, one stack, all report it.
	const n = 10
	t0 := time.Now()
	var wg sync.WaitGroup
	outs := make([]map[string]any, n)
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() { outs[i], codes[i] = e.run("start") })
	}
	wg.Wait()
	t.Logf("%d concurrent starts done in %v", n, time.Since(t0).Round(time.Millisecond))
	first := e.status(outs[0])
	for i := range n {
		st := e.status(outs[i])
		if codes[i] != 0 || st.Status != desktop.StatusRunning {
			t.Fatalf("start %d: exit %d, %v", i, codes[i], outs[i])
		}
		for _, k := range []string{"deskd", desktop.Xvfb, desktop.Chromium} {
			if st.Pids[k] == 0 || st.Pids[k] != first.Pids[k] {
				t.Fatalf("start %d reports %s pid %d, start 0 reports %d", i, k, st.Pids[k], first.Pids[k])
			}
		}
	}
	if st, code := e.run("health"); code != exitOK || st["status"] != "ok" {
		t.Fatalf("health of a running daemon: %v exit %d", st, code)
	}
	// Ten POST /api/desktop/start at once, on the running stack: the same one.
	var posts [n]desktop.Status
	for i := range n {
		wg.Go(func() {
			resp, err := http.Post("http://"+e.listen+"/api/desktop/start", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("POST start %d: %s", i, resp.Status)
			}
			json.NewDecoder(resp.Body).Decode(&posts[i])
		})
	}
	wg.Wait()
	for i, st := range posts {
		if st.Pids[desktop.Xvfb] != first.Pids[desktop.Xvfb] || st.Pids[desktop.Chromium] != first.Pids[desktop.Chromium] {
			t.Fatalf("POST start %d reports pids %v, the CLI %v", i, st.Pids, first.Pids)
		}
	}
	if first.Display == "" || first.Resolution != "1024x768x24" || first.Ports["http"] == 0 || first.Ports["cdp"] == 0 {
		t.Fatalf("status lacks fields: %+v", first)
	}
	if !strings.HasPrefix(first.URLs["desktop"], "http://"+e.listen+"/vnc.html") {
		t.Fatalf("desktop url %q", first.URLs["desktop"])
	}
	for k, pid := range first.Pids {
		if !proc.PidAlive(pid) {
			t.Fatalf("%s pid %d is not alive", k, pid)
		}
	}
	var xvfbs []string
	for _, c := range children(first.Pids["deskd"]) {
		if strings.Contains(c, "Xvfb") {
			xvfbs = append(xvfbs, c)
		}
	}
	if len(xvfbs) != 1 {
		t.Fatalf("daemon runs Xvfb %d times: %v", len(xvfbs), xvfbs)
	}
	if link, _ := os.Readlink(filepath.Join(profile, "SingletonLock")); strings.HasPrefix(link, "other-host") {
		t.Fatalf("stale SingletonLock still there: %q", link)
	}

	// kill -9 Chromium: the next start restarts only Chromium.
	if err := syscall.Kill(first.Pids[desktop.Chromium], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	out, code := e.run("start")
	again := e.status(out)
	if code != 0 || again.Status != desktop.StatusRunning {
		t.Fatalf("start after kill: exit %d %v", code, out)
	}
	if again.Pids[desktop.Chromium] == first.Pids[desktop.Chromium] || again.Pids[desktop.Xvfb] != first.Pids[desktop.Xvfb] ||
		again.Pids["deskd"] != first.Pids["deskd"] || again.Pids[desktop.WM] != first.Pids[desktop.WM] {
		t.Fatalf("after kill -9 chromium: pids %v -> %v; want only chromium new", first.Pids, again.Pids)
	}
	if _, code := e.run("status"); code != 0 {
		t.Fatalf("status exit %d while running", code)
	}

	// stop: the desktop goes, the daemon stays (idle) until --daemon.
	out, code = e.run("stop")
	if code != 0 || out["status"] != "stopped" {
		t.Fatalf("stop: exit %d %v", code, out)
	}
	for _, k := range []string{desktop.Xvfb, desktop.Chromium, desktop.WM} {
		if pid := again.Pids[k]; pid != 0 && proc.PidAlive(pid) {
			t.Fatalf("%s (pid %d) alive after stop", k, pid)
		}
	}
	if !proc.PidAlive(first.Pids["deskd"]) {
		t.Fatal("stop without --daemon ended the daemon")
	}
	if out, code = e.run("stop"); code != 0 || out["status"] != "stopped" {
		t.Fatalf("second stop: exit %d %v", code, out)
	}
	if out, code = e.run("stop", "--daemon"); code != 0 || out["daemon"] != "stopped" {
		t.Fatalf("stop --daemon: exit %d %v", code, out)
	}
	if proc.PidAlive(first.Pids["deskd"]) {
		t.Fatal("daemon alive after stop --daemon")
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:8080"}, "loopback only"},
		{[]string{"start", "--resolution", "99999x1"}, "dimension"},
		{[]string{"status", "--cdp-port", "0"}, "out of range"},
		{[]string{"serve", "extra"}, "unexpected argument"},
		{[]string{"bogus"}, "usage"},
		{[]string{"serve", "--panel-secret", "k"}, "--sandbox-id is required"},
		{[]string{"serve", "--resolution", "1024x768x16"}, "depth must be 24"},
		{[]string{"start", "--url", "--renderer-cmd-prefix=x"}, "no scheme"},
		{[]string{"start", "--url", "chrome://settings"}, "not allowed"},
		{[]string{"serve", "--panel-secret", "k", "--panel-secret-file", "/etc/hostname", "--sandbox-id", "s"}, "give one"},
		{[]string{"serve", "--panel-secret-file", "/nonexistent/key", "--sandbox-id", "s"}, "no such file"},
		{[]string{"serve", "--max-viewers", "0"}, "max-viewers"},
		{[]string{"serve", "--debug-addr", "0.0.0.0:6060"}, "loopback only"},
		{[]string{"serve", "--debug-addr", "6060"}, "missing port"},
		{[]string{"serve", "--display", "-1"}, "--display -1 out of range"},
		{[]string{"serve", "--display", "x"}, "invalid value"},
		{[]string{"start", "--locale", "--lang=x"}, "not a language tag"},
		{[]string{"start", "--timezone", "Mars/Base"}, "time zone"},
		{[]string{"start", "--home", "relative/home"}, "absolute"},
		{[]string{"serve", "--max-upload-mib", "0"}, "max-upload-mib"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := NewMain(&stdout, &stderr).Run(t.Context(), tt.args)
		if code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("deskd %q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr.String(), tt.want)
		}
	}
}

// The image installs the binary as /opt/cubepod/desktop/cubepod-desktop-ctl
// too (CEP's supervisor calls it by that name): same binary, same
// one-line JSON contract.
func TestCtlName(t *testing.T) {
	dir := t.TempDir()
	ctl := filepath.Join(dir, "cubepod-desktop-ctl")
	if err := os.Symlink(deskdBin, ctl); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ctl, "status", "--run-dir", filepath.Join(dir, "run")).Output()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 { // LSB: not running
		err = nil
	}
	var st map[string]any
	if err != nil || strings.Count(string(out), "\n") != 1 || json.Unmarshal(out, &st) != nil || st["status"] != "stopped" {
		t.Fatalf("cubepod-desktop-ctl status: %q %v", out, err)
	}
	df, err := os.ReadFile("../../images/desktop/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ln -s deskd /opt/cubepod/desktop/cubepod-desktop-ctl", "fonts-noto-cjk", "fonts-noto-color-emoji", "\nUSER 1000:1000\n", "HEALTHCHECK", "deskd\", \"health\"]"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("the image's Dockerfile lacks %q", want)
		}
	}
}
