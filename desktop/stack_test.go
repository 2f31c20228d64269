package desktop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/cdp"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/x11"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newStack(t *testing.T, mod func(*Config)) *Stack {
	t.Helper()
	cfg := Config{
		RunDir:       testenv.TempDir(t),
		Resolution:   x11.Resolution{Width: 1024, Height: 768, Depth: 24},
		XvfbPath:     testenv.LookPath(t, "Xvfb"),
		ChromiumPath: testenv.Chromium(t),
		CDPPort:      testenv.FreePort(t),
		NoSandbox:    true,
		StopGrace:    10 * time.Second,
	}
	if wm, err := exec.LookPath("openbox"); err == nil {
		cfg.WMPath = wm
	}
	if os.Geteuid() == 0 {
		cfg.Credential = &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}
	}
	if mod != nil {
		mod(&cfg)
	}
	sp := proc.NewSpawner()
	s := New(cfg, sp)
	t.Cleanup(func() { s.Close(context.Background()); sp.Close() })
	return s
}

// TestLifecycle: idle until asked; start; kill -9 Chromium and start
// again: only Chromium is new; stop leaves nothing running.
func TestLifecycle(t *testing.T) {
	s := newStack(t, func(c *Config) { c.RestartBackoff = time.Hour }) // only Start restarts here
	if st := s.Status(); st.Status != StatusStopped || len(st.Pids) != 0 {
		t.Fatalf("idle stack: %+v", st)
	}
	st, err := s.Start(t.Context(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != StatusRunning || st.Pids[Xvfb] == 0 || st.Pids[Chromium] == 0 || st.Display == "" || st.Resolution != "1024x768x24" {
		t.Fatalf("after start: %+v", st)
	}
	if s.cfg.WMPath != "" && st.Pids[WM] == 0 {
		t.Fatalf("window manager not started: %+v", st)
	}
	again, err := s.Start(t.Context(), StartOptions{})
	if err != nil || !samePids(again.Pids, st.Pids) {
		t.Fatalf("second start changed the stack: %+v -> %+v (%v)", st.Pids, again.Pids, err)
	}

	if err := syscall.Kill(st.Pids[Chromium], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// At once, before the supervisor can have reaped it: Start must
	// see through the zombie.
	after, err := s.Start(t.Context(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Pids[Chromium] == st.Pids[Chromium] || after.Pids[Xvfb] != st.Pids[Xvfb] || after.Pids[WM] != st.Pids[WM] {
		t.Fatalf("restart touched more than Chromium: %v -> %v", st.Pids, after.Pids)
	}
	if after.Restarts[Chromium] != 1 || after.Restarts[Xvfb] != 0 {
		t.Fatalf("restarts %v", after.Restarts)
	}

	stopped := s.Stop(t.Context())
	if stopped.Status != StatusStopped || len(stopped.Pids) != 0 {
		t.Fatalf("after stop: %+v", stopped)
	}
	for name, pid := range after.Pids {
		if proc.PidAlive(pid) {
			t.Errorf("%s (pid %d) still alive after Stop", name, pid)
		}
	}
}

func TestConcurrentStartsOneStack(t *testing.T) {
	s := newStack(t, nil)
	var wg sync.WaitGroup
	sts := make([]Status, 10)
	errs := make([]error, 10)
	for i := range sts {
		wg.Go(func() { sts[i], errs[i] = s.Start(t.Context(), StartOptions{}) })
	}
	wg.Wait()
	for i := range sts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if sts[i].Status != StatusRunning || !samePids(sts[i].Pids, sts[0].Pids) {
			t.Fatalf("start %d saw %+v, start 0 saw %+v", i, sts[i], sts[0])
		}
	}
}

// TestSupervisorRestarts: without any Start call, a dead Chromium comes
// back alone, and a dead Xvfb brings its clients back with it.
func TestSupervisorRestarts(t *testing.T) {
	s := newStack(t, func(c *Config) { c.RestartBackoff = 50 * time.Millisecond })
	st, err := s.Start(t.Context(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(st.Pids[Chromium], syscall.SIGKILL)
	var now Status
	waitFor(t, func() bool {
		now = s.Status()
		return now.Status == StatusRunning && now.Pids[Chromium] != st.Pids[Chromium]
	})
	if now.Pids[Xvfb] != st.Pids[Xvfb] {
		t.Fatalf("Xvfb restarted for a Chromium death: %v -> %v", st.Pids, now.Pids)
	}
	syscall.Kill(now.Pids[Xvfb], syscall.SIGKILL)
	waitFor(t, func() bool {
		n := s.Status()
		return n.Status == StatusRunning && n.Pids[Xvfb] != now.Pids[Xvfb] && n.Pids[Chromium] != now.Pids[Chromium]
	})
}

func TestStartFailureIsReported(t *testing.T) {
	s := newStack(t, func(c *Config) { c.ChromiumPath = "/bin/false"; c.RestartBackoff = time.Hour })
	st, err := s.Start(t.Context(), StartOptions{})
	if err == nil || !strings.Contains(err.Error(), "chromium") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("err = %v", err)
	}
	if st.Status != StatusDegraded || st.Error == "" || st.Pids[Xvfb] == 0 {
		t.Fatalf("status after a failed start: %+v", st)
	}
}

func TestStartOptions(t *testing.T) {
	s := newStack(t, nil)
	r := x11.Resolution{Width: 800, Height: 600, Depth: 24}
	st, err := s.Start(t.Context(), StartOptions{Resolution: &r, URL: "data:text/html,hello"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Resolution != "800x600x24" {
		t.Fatalf("resolution %q", st.Resolution)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(st.Pids[Chromium]) + "/cmdline")
	if err != nil || !strings.Contains(string(b), "data:text/html,hello") || !strings.Contains(string(b), "--window-size=800,600") {
		t.Fatalf("chromium cmdline %q (%v)", b, err)
	}
}

func samePids(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// waitFor polls cond (state changes in other processes have no event to
// wait on) for up to 30 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A start request's size is bounded by MaxResolution (Xvfb starts at the
// larger of the two), and a flag-like URL never reaches Chromium.
func TestStartBounds(t *testing.T) {
	s := newStack(t, func(c *Config) { c.MaxResolution = x11.Resolution{Width: 800, Height: 600, Depth: 24}; c.WMPath = "" })
	if _, err := s.Start(t.Context(), StartOptions{URL: "--renderer-cmd-prefix=/bin/false"}); err == nil || !strings.Contains(err.Error(), "scheme") {
		t.Fatalf("flag-like URL: %v", err)
	}
	if st := s.Status(); st.Status != StatusStopped {
		t.Fatalf("a refused start started something: %+v", st)
	}
	huge := x11.Resolution{Width: 8192, Height: 8192, Depth: 24}
	st, err := s.Start(t.Context(), StartOptions{Resolution: &huge})
	if err != nil {
		t.Fatal(err)
	}
	if st.Resolution != "800x600x24" {
		t.Fatalf("resolution %s, want the 800x600 bound", st.Resolution)
	}
	out, _ := exec.Command("xdpyinfo", "-display", st.Display).Output()
	if !strings.Contains(string(out), "800x600 pixels") {
		t.Fatalf("xdpyinfo: %.300s", out)
	}
}

// The configured URL opens on a fresh profile only; a profile that has run
// restores its own tabs (no duplicate welcome tab per restart); a URL asked
// for by Start opens once. Locale, time zone, display number and home
// reach the GUI.
func TestBrowserStartPolicy(t *testing.T) {
	home := filepath.Join(testenv.TempDir(t), "user home")
	display := 0
	for n := 180 + os.Getpid()%300; n < 1000; n++ { // a display number no server holds
		if _, err := os.Stat(fmt.Sprintf("/tmp/.X11-unix/X%d", n)); errors.Is(err, os.ErrNotExist) {
			display = n
			break
		}
	}
	s := newStack(t, func(c *Config) {
		c.URL = "data:text/html,welcome"
		c.Locale, c.Timezone, c.Home, c.Display = "de-DE", "Asia/Tokyo", home, display
		c.RestartBackoff = time.Hour
	})
	cmdline := func(st Status) (string, string) {
		t.Helper()
		pid := strconv.Itoa(st.Pids[Chromium])
		c, err1 := os.ReadFile("/proc/" + pid + "/cmdline")
		e, err2 := os.ReadFile("/proc/" + pid + "/environ")
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		return strings.ReplaceAll(string(c), "\x00", " "), strings.ReplaceAll(string(e), "\x00", " ")
	}
	st, err := s.Start(t.Context(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Display != fmt.Sprintf(":%d", display) {
		t.Errorf("display %s, want :%d", st.Display, display)
	}
	c, e := cmdline(st)
	for _, want := range []string{"data:text/html,welcome", "--lang=de-DE", "--accept-lang=de-DE"} {
		if !strings.Contains(c, want) {
			t.Errorf("first start: cmdline lacks %q: %s", want, c)
		}
	}
	for _, want := range []string{"TZ=Asia/Tokyo", "HOME=" + home} {
		if !strings.Contains(e, want) {
			t.Errorf("environment lacks %q: %s", want, e)
		}
	}
	prefs, err := os.ReadFile(filepath.Join(s.cfg.ProfileDir, "Default", "Preferences"))
	if err != nil || !bytes.Contains(prefs, []byte(`"restore_on_startup":1`)) {
		t.Errorf("profile preferences %.200s (%v): want restore_on_startup 1", prefs, err)
	}
	// Chromium writes "Local State" once it has run; then a restart
	// (stop/start, as after deskd restarts) restores instead.
	waitFor(t, func() bool { return !cdp.FreshProfile(s.cfg.ProfileDir) })
	s.Stop(t.Context())
	st, err = s.Start(t.Context(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := cmdline(st); strings.Contains(c, "welcome") {
		t.Errorf("a used profile got the welcome URL again: %s", c)
	}
	s.Stop(t.Context())
	st, err = s.Start(t.Context(), StartOptions{URL: "data:text/html,asked"})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := cmdline(st); !strings.Contains(c, "data:text/html,asked") {
		t.Errorf("an asked-for URL did not open: %s", c)
	}
	// Asked once: a restart after a crash restores, it does not reopen it.
	died := s.ChromiumDone()
	if err := syscall.Kill(st.Pids[Chromium], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-died:
	case <-time.After(30 * time.Second):
		t.Fatal("chromium not reaped 30 s after kill -9")
	}
	st, err = s.Start(t.Context(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := cmdline(st); strings.Contains(c, "asked") {
		t.Errorf("a restart reopened the asked-for URL: %s", c)
	}
}

// Without Xvfb installed a start fails as unsupported.
func TestStartUnsupported(t *testing.T) {
	s := newStack(t, func(c *Config) { c.XvfbPath = "/nonexistent/Xvfb" })
	if _, err := s.Start(t.Context(), StartOptions{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
	s = newStack(t, func(c *Config) { c.ChromiumPath = "no-such-chromium"; c.WMPath = "" })
	if _, err := s.Start(t.Context(), StartOptions{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
}

// TestAccessibilityBus: with a mode, the bus starts before Chromium; a bus
// that died takes a new Chromium with it (the browser looks for the bus
// at launch only); another mode restarts the browser alone; off stops
// the bus; a machine without the bus runs the desktop without it.
func TestAccessibilityBus(t *testing.T) {
	testenv.LookPath(t, "dbus-daemon")
	s := newStack(t, func(c *Config) { c.A11y = "complete"; c.RestartBackoff = time.Hour })
	st, err := s.Start(t.Context(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr, mode := s.A11y()
	if st.Status != StatusRunning || st.Pids[A11yBus] == 0 || st.A11y != "complete" || mode != "complete" || !strings.HasPrefix(addr, "unix:path=") {
		t.Fatalf("after start: %+v (%q %q)", st, addr, mode)
	}
	if err := syscall.Kill(st.Pids[A11yBus], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	after, err := s.Start(t.Context(), StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Pids[A11yBus] == st.Pids[A11yBus] || after.Pids[Chromium] == st.Pids[Chromium] || after.Pids[Xvfb] != st.Pids[Xvfb] {
		t.Fatalf("a dead bus: %v -> %v", st.Pids, after.Pids)
	}
	basic, err := s.Start(t.Context(), StartOptions{A11y: "basic"})
	if err != nil || basic.A11y != "basic" || basic.Pids[A11yBus] != after.Pids[A11yBus] || basic.Pids[Chromium] == after.Pids[Chromium] {
		t.Fatalf("another mode: %v -> %v, %q (%v)", after.Pids, basic.Pids, basic.A11y, err)
	}
	off, err := s.Start(t.Context(), StartOptions{A11y: "off"})
	if err != nil || off.A11y != "off" || off.Pids[A11yBus] != 0 || proc.PidAlive(basic.Pids[A11yBus]) {
		t.Fatalf("off: %+v (%v)", off, err)
	}
	if addr, _ := s.A11y(); addr != "" {
		t.Fatalf("off, yet a bus at %q", addr)
	}
	if _, err := s.Start(t.Context(), StartOptions{A11y: "loud"}); err == nil {
		t.Fatal("a bad mode was taken")
	}

	none := newStack(t, func(c *Config) { c.A11y = "complete"; c.DBusDaemonPath = "/nonexistent/dbus-daemon"; c.WMPath = "" })
	st, err = none.Start(t.Context(), StartOptions{})
	if err != nil || st.Status != StatusRunning || st.A11y != "off" {
		t.Fatalf("without dbus-daemon: %+v (%v)", st, err)
	}
}
