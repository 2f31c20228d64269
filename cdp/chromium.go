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
	// Locale (BCP 47, e.g. "de-DE") sets --lang and --accept-lang;
	// Timezone (IANA, e.g. "Europe/Berlin") is the browser's TZ.
	Locale, Timezone string
	// KeepURL opens URL even on a profile that has run before; otherwise
	// URL opens on a fresh profile only and a used one restores its tabs.
	KeepURL    bool
	ExtraFlags []string
	// Accessibility, when its Mode is set, has Chromium export its tree
	// (the browser's own and the pages') on an AT-SPI bus.
	Accessibility Accessibility
	// ReadyTimeout bounds the wait for the DevTools endpoint (default 30 s).
	ReadyTimeout time.Duration
}

// Accessibility is how Chromium exports its accessibility tree. It
// needs all of: ACCESSIBILITY_ENABLED=1, the bus's address in
// AT_SPI_BUS_ADDRESS, a private XDG_RUNTIME_DIR and
// --force-renderer-accessibility (any one missing: nothing shows); and it
// decides at launch.
type Accessibility struct {
	// Mode is --force-renderer-accessibility's value: "basic",
	// "form-controls" or "complete"; "" or "off": none.
	Mode       string
	Bus        string // the bus's D-Bus address
	RuntimeDir string // XDG_RUNTIME_DIR, the GUI user's alone
}

func (a Accessibility) on() bool { return a.Mode != "" && a.Mode != "off" && a.Bus != "" }

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
		// Composite in software: the browser then presents only what
		// changed (a typed line: DAMAGE says 1122x35 px) instead of
		// swapping the whole window per frame through SwiftShader, which
		// made every keystroke a full-screen capture and compare for the
		// VNC server. WebGL still runs on SwiftShader.
		"--disable-gpu-compositing",
		"--password-store=basic",
		"--window-position=0,0",
		"--start-maximized",
		// A panel people look at: no "unsupported command-line flag"
		// infobar for --no-sandbox, no crash-restore bubble, no translate
		// prompt; and navigator.webdriver stays false for sites that
		// check for automation.
		"--test-type",
		"--disable-blink-features=AutomationControlled",
		"--disable-session-crashed-bubble",
		"--hide-crash-restore-bubble",
		"--disable-features=TranslateUI",
	}
	if cfg.Width > 0 && cfg.Height > 0 {
		f = append(f, fmt.Sprintf("--window-size=%d,%d", cfg.Width, cfg.Height))
	}
	if cfg.NoSandbox {
		f = append(f, "--no-sandbox")
	}
	if cfg.Locale != "" {
		f = append(f, "--lang="+cfg.Locale, "--accept-lang="+cfg.Locale)
	}
	if cfg.Accessibility.on() {
		f = append(f, "--force-renderer-accessibility="+cfg.Accessibility.Mode)
	}
	f = append(f, cfg.ExtraFlags...)
	if cfg.URL == "" {
		return f
	}
	// After "--" nothing is taken for a switch, whatever it looks like.
	return append(f, "--", cfg.URL)
}

// MaxLocale bounds a --locale value.
const MaxLocale = 35

// CheckLocale accepts a BCP 47 language tag of letters, digits and
// dashes (or underscores), e.g. "en", "de-DE", "zh-Hans-CN".
func CheckLocale(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > MaxLocale {
		return fmt.Errorf("locale of %d bytes (max %d)", len(s), MaxLocale)
	}
	for i, part := range strings.FieldsFunc(s, func(r rune) bool { return r == '-' || r == '_' }) {
		ok := len(part) >= 1 && len(part) <= 8
		for _, r := range part {
			ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9')
		}
		if !ok || i == 0 && len(part) < 2 {
			return fmt.Errorf("locale %q is not a language tag such as en or de-DE", s)
		}
	}
	if strings.HasPrefix(s, "-") || strings.HasSuffix(s, "-") || strings.Contains(s, "--") || strings.HasSuffix(s, "_") || strings.HasPrefix(s, "_") {
		return fmt.Errorf("locale %q is not a language tag such as en or de-DE", s)
	}
	return nil
}

// CheckTimezone accepts an IANA zone name the system's zoneinfo knows.
func CheckTimezone(s string) error {
	if s == "" {
		return nil
	}
	if len(s) > 64 || strings.Contains(s, "..") || strings.HasPrefix(s, "/") {
		return fmt.Errorf("time zone %.80q is not a zone name such as Europe/Berlin", s)
	}
	if _, err := time.LoadLocation(s); err != nil {
		return fmt.Errorf("time zone %q: %w", s, err)
	}
	return nil
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
	if err := CheckLocale(cfg.Locale); err != nil {
		return nil, fmt.Errorf("chromium: %w", err)
	}
	if err := CheckTimezone(cfg.Timezone); err != nil {
		return nil, fmt.Errorf("chromium: %w", err)
	}
	fresh := FreshProfile(cfg.ProfileDir)
	if err := prepareProfile(cfg.ProfileDir, cfg.Credential); err != nil {
		return nil, err
	}
	if !fresh && !cfg.KeepURL {
		cfg.URL = ""
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
	if cfg.Timezone != "" {
		env = append(env, "TZ="+cfg.Timezone)
	}
	if a := cfg.Accessibility; a.on() {
		env = append(env, "ACCESSIBILITY_ENABLED=1", "AT_SPI_BUS_ADDRESS="+a.Bus, "XDG_RUNTIME_DIR="+a.RuntimeDir)
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
	// is the user's alone. The profile lives where that user writes (its
	// home): it is opened as a directory of its own, never through a
	// link, and everything below it through that root (os.Root), so a
	// planted link cannot point deskd's writes elsewhere.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	if fi, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("chromium: profile: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("chromium: profile %s is not a directory (a link?)", dir)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	defer root.Close()
	if cred != nil {
		if err := root.Lchown(".", int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("chromium: profile: %w", err)
		}
	}
	if err := killProfile(dir, 5*time.Second); err != nil {
		return err
	}
	if err := restoreOnStartup(root, cred); err != nil {
		return err
	}
	return removeSingletons(root)
}

// FreshProfile reports whether no Chromium has run with the profile yet
// (it writes "Local State" on its first start).
func FreshProfile(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, "Local State"))
	return errors.Is(err, os.ErrNotExist)
}

// restoreOnStartup gives a new profile the "continue where you left off"
// setting, so a restarted browser (after a crash, a kill or deskd stop)
// comes back with the tabs it had. A profile with preferences of its own
// (or anything else at that name, a link included) is left alone.
func restoreOnStartup(root *os.Root, cred *syscall.Credential) error {
	const def, prefs = "Default", "Default/Preferences"
	if _, err := root.Lstat(prefs); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := root.Mkdir(def, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	f, err := root.OpenFile(prefs, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	_, err = f.Write([]byte(`{"session":{"restore_on_startup":1}}` + "\n"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	if cred != nil {
		for _, p := range []string{def, prefs} {
			if err := root.Lchown(p, int(cred.Uid), int(cred.Gid)); err != nil {
				return fmt.Errorf("chromium: profile: %w", err)
			}
		}
	}
	return nil
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
	root, err := os.OpenRoot(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("chromium: profile: %w", err)
	}
	defer root.Close()
	return removeSingletons(root)
}

func removeSingletons(root *os.Root) error {
	for _, name := range SingletonFiles {
		if err := root.Remove(name); err != nil && !errors.Is(err, os.ErrNotExist) {
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

// Ask sends method path?query to the DevTools endpoint on 127.0.0.1:port,
// with the Host Chromium accepts (an IP or localhost, never an agent's).
func Ask(ctx context.Context, port int, method, path, query string) (*http.Response, error) {
	host := "127.0.0.1:" + strconv.Itoa(port)
	u := &neturl.URL{Scheme: "http", Host: host, Path: path, RawQuery: query}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Host = host
	return HTTP.Do(req)
}

// GetVersion asks the DevTools endpoint on 127.0.0.1:port for /json/version.
func GetVersion(ctx context.Context, port int) (Version, error) {
	resp, err := Ask(ctx, port, http.MethodGet, "/json/version", "")
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
