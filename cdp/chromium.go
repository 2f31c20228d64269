// Package cdp runs the sandbox's Chromium and relays the Chrome DevTools
// Protocol to agents.
package cdp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cubepod/deskd/proc"
)

// ChromiumConfig configures the Chromium child.
type ChromiumConfig struct {
	Path       string // executable
	Port       int    // remote debugging port on 127.0.0.1 (default 9222)
	ProfileDir string // dedicated --user-data-dir
	URL        string // first page (default about:blank)
	Display    string // X display, e.g. ":1"
	Width      int    // window size; the window is placed at 0,0
	Height     int
	// NoSandbox passes --no-sandbox. Chromium refuses to run as root
	// without it, so StartChromium adds it for root regardless.
	NoSandbox  bool
	Credential *syscall.Credential
	Home       string // HOME for the child (default ProfileDir)
	XAuthority string // the display's authority file, when it has one
	LogPath    string
	ExtraFlags []string
	// ReadyTimeout bounds the wait for the DevTools endpoint (default 30 s).
	ReadyTimeout time.Duration
}

// Chromium is a running browser.
type Chromium struct {
	*proc.Process
	Port    int
	Version Version
}

// Version is Chromium's /json/version answer.
type Version struct {
	Browser              string `json:"Browser"`
	ProtocolVersion      string `json:"Protocol-Version"`
	UserAgent            string `json:"User-Agent"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

// SingletonFiles are the profile-lock files Chromium leaves behind when it
// dies; a stale SingletonLock naming another host makes it refuse to start.
var SingletonFiles = []string{"SingletonLock", "SingletonCookie", "SingletonSocket"}

// Flags returns the command line for cfg, without the program name.
func Flags(cfg ChromiumConfig) []string {
	f := []string{
		"--user-data-dir=" + cfg.ProfileDir,
		"--remote-debugging-port=" + strconv.Itoa(cfg.Port),
		"--remote-debugging-address=127.0.0.1",
		"--no-first-run",
		"--no-default-browser-check",
		"--disable-background-networking",
		"--disable-component-update",
		"--disable-sync",
		"--disable-dev-shm-usage",
		"--use-angle=swiftshader",
		"--enable-unsafe-swiftshader",
		"--password-store=basic",
		"--window-position=0,0",
	}
	if cfg.Width > 0 && cfg.Height > 0 {
		f = append(f, fmt.Sprintf("--window-size=%d,%d", cfg.Width, cfg.Height))
	}
	if cfg.NoSandbox {
		f = append(f, "--no-sandbox")
	}
	f = append(f, cfg.ExtraFlags...)
	url := cfg.URL
	if url == "" {
		url = "about:blank"
	}
	// After "--" nothing is taken for a switch, whatever it looks like.
	return append(f, "--", url)
}

// MaxStartURL bounds a start URL (data: URLs can be long, argv is not).
const MaxStartURL = 64 << 10

// CheckStartURL accepts the pages Chromium may be started on: http(s),
// file, data and about URLs. "" means about:blank.
func CheckStartURL(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxStartURL {
		return fmt.Errorf("start URL of %d bytes (max %d)", len(s), MaxStartURL)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("start URL %.80q holds a control character", s)
		}
	}
	u, err := neturl.Parse(s)
	if err != nil {
		return fmt.Errorf("start URL %.80q: %w", s, err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https", "file", "data", "about":
		return nil
	case "":
		return fmt.Errorf("start URL %.80q has no scheme: want http(s), file, data or about", s)
	}
	return fmt.Errorf("start URL scheme %q is not allowed: want http(s), file, data or about", u.Scheme)
}

// StartChromium prepares the profile, starts Chromium on cfg.Display and
// returns once its DevTools endpoint answers.
func StartChromium(ctx context.Context, sp *proc.Spawner, cfg ChromiumConfig) (*Chromium, error) {
	if cfg.Port == 0 {
		cfg.Port = 9222
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.ProfileDir == "" {
		return nil, errors.New("chromium: no profile dir")
	}
	if runningAsRoot(cfg.Credential) {
		cfg.NoSandbox = true
	}
	if cfg.Home == "" {
		cfg.Home = cfg.ProfileDir
	}
	if err := CheckStartURL(cfg.URL); err != nil {
		return nil, fmt.Errorf("chromium: %w", err)
	}
	if err := prepareProfile(cfg.ProfileDir, cfg.Credential); err != nil {
		return nil, err
	}
	if err := portFree(cfg.Port); err != nil {
		return nil, err
	}
	env := []string{
		"DISPLAY=" + cfg.Display,
		"HOME=" + cfg.Home,
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"LANG=C.UTF-8",
		"XDG_CONFIG_HOME=" + filepath.Join(cfg.Home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(cfg.Home, ".cache"),
	}
	if cfg.XAuthority != "" {
		env = append(env, "XAUTHORITY="+cfg.XAuthority)
	}
	p, err := sp.Start(proc.Spec{
		Name: "chromium", Path: cfg.Path, Args: Flags(cfg), Env: env,
		Dir: cfg.Home, LogPath: cfg.LogPath, Credential: cfg.Credential,
	})
	if err != nil {
		return nil, err
	}
	c := &Chromium{Process: p, Port: cfg.Port}
	rctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	v, err := waitReady(rctx, cfg.Port, p)
	if err != nil {
		_ = p.Stop(context.Background(), 5*time.Second)
		return nil, err
	}
	c.Version = v
	return c, nil
}

func runningAsRoot(cred *syscall.Credential) bool {
	if cred != nil {
		return cred.Uid == 0
	}
	return os.Geteuid() == 0
}

// prepareProfile creates the profile dir owned by the child's user and
// removes Singleton* files when no Chromium of this profile runs. If one
// does run (left over from an earlier daemon), it is stopped: the profile
// is dedicated to deskd and two browsers cannot share it.
func prepareProfile(dir string, cred *syscall.Credential) error {
	// Parents made here must let the GUI user through; the profile itself
	// is the user's alone.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("chromium: profile: %w", err)
		}
	}
	if err := killProfile(dir, 5*time.Second); err != nil {
		return err
	}
	return RemoveSingletons(dir)
}

// killProfile kills browsers of the profile that are not ours to wait on
// and watches /proc until they are gone.
func killProfile(dir string, timeout time.Duration) error {
	pids := ProfilePids(dir)
	if len(pids) == 0 {
		return nil
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(timeout)
	for len(ProfilePids(dir)) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("chromium: stale browser of profile %s (pids %v) did not exit", dir, pids)
		}
		time.Sleep(20 * time.Millisecond) // no exit notification for a non-child
	}
	return nil
}

// RemoveSingletons deletes the Singleton* lock files of a profile. Call it
// only when no Chromium of that profile runs.
func RemoveSingletons(dir string) error {
	for _, name := range SingletonFiles {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("chromium: remove stale %s: %w", name, err)
		}
	}
	return nil
}

// ProfilePids lists the browser processes (not their helpers) running
// with --user-data-dir=dir, by reading /proc.
func ProfilePids(dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte("--user-data-dir=" + dir + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cl, want) || bytes.Contains(cl, []byte("--type=")) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func portFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("chromium: debugging port %d is taken: %w", port, err)
	}
	return l.Close()
}

// waitReady polls /json/version until Chromium answers, the child exits or
// ctx ends. Chromium opens the port only after its profile is loaded, so
// polling is the readiness signal it offers.
func waitReady(ctx context.Context, port int, p *proc.Process) (Version, error) {
	// A flat, short interval: each try is one refused loopback connect,
	// and a backoff would add up to its cap to every start.
	const interval = 10 * time.Millisecond
	var last error
	for {
		v, err := GetVersion(ctx, port)
		if err == nil {
			return v, nil
		}
		last = err
		t := time.NewTimer(interval)
		select {
		case <-t.C:
		case <-p.Done():
			t.Stop()
			return Version{}, p.ExitError()
		case <-ctx.Done():
			t.Stop()
			return Version{}, fmt.Errorf("chromium: devtools not ready: %w (last: %v); output: %q", ctx.Err(), last, p.Tail())
		}
	}
}

// HTTP is the client for Chromium's DevTools HTTP endpoint on loopback:
// no proxy, and no idle connections kept (a new loopback connection
// costs microseconds; a kept one is a descriptor and two goroutines that
// outlive the agent that caused them).
var HTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}

// GetVersion asks the DevTools endpoint on 127.0.0.1:port for /json/version.
func GetVersion(ctx context.Context, port int) (Version, error) {
	host := "127.0.0.1:" + strconv.Itoa(port)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+"/json/version", nil)
	if err != nil {
		return Version{}, err
	}
	resp, err := HTTP.Do(req)
	if err != nil {
		return Version{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return Version{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return Version{}, fmt.Errorf("chromium: /json/version: %s", resp.Status)
	}
	var v Version
	if err := json.Unmarshal(body, &v); err != nil {
		return Version{}, fmt.Errorf("chromium: /json/version: %w", err)
	}
	if !strings.HasPrefix(v.WebSocketDebuggerURL, "ws://") {
		return Version{}, fmt.Errorf("chromium: /json/version without a ws url: %q", body)
	}
	return v, nil
}
