// Package desktop supervises the GUI stack: Xvfb, an optional window
// manager and Chromium. Nothing starts until Start is called; a component
// that dies is restarted alone (with the ones that need it: Chromium and
// the window manager follow a restarted Xvfb, nothing follows Chromium).
package desktop

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cubepod/deskd/a11y"
	"github.com/cubepod/deskd/cdp"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/x11"
)

// Component names, as used in status pids, restarts and log file names.
const (
	Xvfb     = "xvfb"
	WM       = "wm"
	A11yBus  = "a11y"
	Chromium = "chromium"
)

// Config configures a Stack.
type Config struct {
	RunDir     string // logs/ and home/ live here
	ProfileDir string // Chromium profile (default RunDir/chromium-profile)
	Resolution x11.Resolution
	// MaxResolution is the largest size viewers may resize the screen to.
	MaxResolution x11.Resolution
	URL           string
	XvfbPath      string
	WMPath        string // empty: no window manager
	ChromiumPath  string
	CDPPort       int
	NoSandbox     bool
	Credential    *syscall.Credential // nil: run as deskd's own user
	// XAuthority, when set, is the authority file Xvfb checks clients
	// against (see x11.WriteAuthority); the window manager and Chromium
	// get it as XAUTHORITY.
	XAuthority string
	// Home is the GUI user's home: HOME for the window manager and
	// Chromium (whose downloads land in Home/Downloads). Default
	// RunDir/home.
	Home string
	// Display pins the X display number (0: Xvfb picks a free one).
	Display int
	// Locale (e.g. "de-DE") sets Chromium's UI and Accept-Language;
	// Timezone (e.g. "Europe/Berlin") is TZ for the GUI.
	Locale, Timezone string
	// A11y is Chromium's accessibility mode (a11y.Off, a11y.Basic,
	// a11y.FormControls, a11y.Complete; "" is Off): anything but Off
	// starts the accessibility bus before Chromium and has Chromium
	// export its tree there. DBusDaemonPath is dbus-daemon (default: on
	// PATH).
	A11y           string
	DBusDaemonPath string
	// ChromiumFlags, when set, gives flags of the moment for each
	// Chromium start (the proxy it goes through, say).
	ChromiumFlags func() []string
	Logger        *slog.Logger
	// RestartBackoff is the first delay before restarting a component
	// that died (default 500 ms), doubled per quick failure up to 30 s.
	RestartBackoff time.Duration
	// StopGrace is how long a component gets to exit after SIGTERM
	// (default 10 s: Chromium flushes its profile on SIGTERM).
	StopGrace time.Duration
	// HealthInterval is how often Chromium is asked Browser.getVersion
	// over a connection of the supervisor's own (default 15 s); two
	// failures in a row restart it. Negative disables the check.
	HealthInterval time.Duration
}

// StartOptions override the configured resolution and URL for one Start;
// they apply to components that Start has to launch.
type StartOptions struct {
	Resolution *x11.Resolution `json:"resolution,omitempty"`
	URL        string          `json:"url,omitempty"`
	// A11y, when set, is the accessibility mode from now on; a running
	// Chromium in another mode is restarted (it decides at launch).
	A11y string `json:"a11y,omitempty"`
}

// Status is the stack's state, as printed by `deskd status`.
type Status struct {
	Status     string            `json:"status"` // stopped, starting, running, degraded
	Display    string            `json:"display,omitempty"`
	Resolution string            `json:"resolution,omitempty"`
	Ports      map[string]int    `json:"ports"`
	Pids       map[string]int    `json:"pids"`
	URLs       map[string]string `json:"urls,omitempty"`
	Browser    string            `json:"browser,omitempty"`
	Restarts   map[string]int    `json:"restarts,omitempty"`
	Health     string            `json:"health,omitempty"` // Chromium's last health check: "ok" or why not
	// Proxy is the upstream proxy the browser goes through and how that
	// went ("http://proxy:3128: ok"); never a credential.
	Proxy string `json:"proxy,omitempty"`
	// A11y is the running Chromium's accessibility mode ("off" when it
	// exports nothing).
	A11y string `json:"a11y,omitempty"`
	// XAuthority is the display's authority file: X clients need it (as
	// XAUTHORITY) to connect.
	XAuthority string `json:"xauthority,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Status values.
const (
	StatusStopped  = "stopped"
	StatusStarting = "starting"
	StatusRunning  = "running"
	StatusDegraded = "degraded"
)

// ErrUnsupported wraps a start that failed because Xvfb or Chromium is not
// installed: no retry will help until the image has them.
var ErrUnsupported = errors.New("desktop: not supported here")

// unsupported marks err as ErrUnsupported when a program was not found.
func unsupported(err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return err
}

// Stack is the supervisor. Its methods are safe for concurrent use.
type Stack struct {
	cfg Config
	sp  *proc.Spawner
	log *slog.Logger

	op sync.Mutex // serialises Start, Stop and restarts

	mu       sync.Mutex // guards the fields below; never held while waiting on a child
	want     bool
	starting bool
	res      x11.Resolution
	url      string // asked for by Start: opened by the next Chromium only
	xvfb     *x11.Xvfb
	wm       *proc.Process
	bus      *a11y.Bus
	chrome   *cdp.Chromium
	a11yMode string // wanted from the next Chromium on
	// chromeA11y is the running Chromium's mode
	chromeA11y string
	restarts   map[string]int
	fails      map[string]int // consecutive quick failures, for backoff
	// stopped are processes stopped on purpose: their exit is no failure
	stopped map[*proc.Process]bool
	lastErr string
	health  string

	poke   chan struct{} // a component exited
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns an idle stack and starts its supervisor goroutine; Close
// stops both.
func New(cfg Config, sp *proc.Spawner) *Stack {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ProfileDir == "" {
		cfg.ProfileDir = filepath.Join(cfg.RunDir, "chromium-profile")
	}
	if cfg.CDPPort == 0 {
		cfg.CDPPort = 9222
	}
	if cfg.RestartBackoff == 0 {
		cfg.RestartBackoff = 500 * time.Millisecond
	}
	if cfg.StopGrace == 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.HealthInterval == 0 {
		cfg.HealthInterval = 15 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Stack{
		cfg: cfg, sp: sp, log: cfg.Logger,
		res:      cfg.Resolution,
		a11yMode: orOff(cfg.A11y),
		restarts: map[string]int{}, fails: map[string]int{}, stopped: map[*proc.Process]bool{},
		poke: make(chan struct{}, 1), ctx: ctx, cancel: cancel,
	}
	s.wg.Add(1)
	go s.supervise()
	if cfg.HealthInterval > 0 {
		s.wg.Add(1)
		go s.checkHealth()
	}
	return s
}

// Start brings up whatever part of the stack is not running and returns
// the resulting status. It is idempotent.
func (s *Stack) Start(ctx context.Context, o StartOptions) (Status, error) {
	if err := cdp.CheckStartURL(o.URL); err != nil {
		return s.Status(), fmt.Errorf("desktop: %w", err)
	}
	if err := a11y.CheckMode(o.A11y); err != nil {
		return s.Status(), fmt.Errorf("desktop: %w", err)
	}
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	s.want = true
	clear(s.fails) // asked for explicitly: no backoff left from before
	if o.Resolution != nil && s.xvfb == nil {
		s.res = s.clamp(*o.Resolution)
	}
	if o.URL != "" && s.chrome == nil {
		s.url = o.URL
	}
	if o.A11y != "" {
		s.a11yMode = o.A11y
	}
	s.mu.Unlock()
	err := s.ensure(ctx)
	return s.Status(), err
}

// RestartChromium stops a running Chromium (politely, as Stop does) and
// starts it again, leaving Xvfb and the window manager: for flags that
// changed (ChromiumFlags). Without a running desktop it does nothing.
func (s *Stack) RestartChromium(ctx context.Context) (Status, error) {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	want, running := s.want, s.chrome != nil
	s.mu.Unlock()
	if !want || !running {
		return s.Status(), nil
	}
	s.stopChromium(ctx)
	err := s.ensure(ctx)
	return s.Status(), err
}

// clamp bounds a requested size by MaxResolution: Xvfb starts at the
// larger of the two, so an unbounded request would be an unbounded screen.
func (s *Stack) clamp(r x11.Resolution) x11.Resolution {
	if m := s.cfg.MaxResolution; m.Width > 0 && m.Height > 0 {
		r.Width, r.Height = min(r.Width, m.Width), min(r.Height, m.Height)
	}
	return r
}

// Stop stops Chromium (politely, so its profile is flushed), the window
// manager and Xvfb. It is idempotent.
func (s *Stack) Stop(ctx context.Context) Status {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	s.want = false
	s.lastErr = ""
	s.mu.Unlock()
	s.stopFrom(ctx, Xvfb)
	return s.Status()
}

// Close stops the stack and the supervisor.
func (s *Stack) Close(ctx context.Context) {
	s.Stop(ctx)
	s.cancel()
	s.wg.Wait()
}

// CDPPort is Chromium's debugging port on 127.0.0.1.
func (s *Stack) CDPPort() int { return s.cfg.CDPPort }

// ChromiumDone is closed when the Chromium running now exits (at once
// when none runs): a caller whose request to the browser failed can tell
// a dying browser from a slow one.
func (s *Stack) ChromiumDone() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chrome == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.chrome.Done()
}

// Status reports the stack's state without waiting for a start in progress.
func (s *Stack) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{
		Ports:    map[string]int{"cdp": s.cfg.CDPPort},
		Pids:     map[string]int{},
		Restarts: map[string]int{},
		Error:    s.lastErr,
	}
	for k, v := range s.restarts {
		st.Restarts[k] = v
	}
	up, total := 0, 2
	if s.xvfb != nil && s.xvfb.Alive() {
		up++
		st.Display = s.xvfb.Display
		st.Resolution = s.xvfb.Resolution.String()
		st.XAuthority = s.cfg.XAuthority
		st.Pids[Xvfb] = s.xvfb.Pid
	}
	if s.cfg.WMPath != "" {
		total++
		if s.wm != nil && s.wm.Alive() {
			up++
			st.Pids[WM] = s.wm.Pid
		}
	}
	if s.a11yMode != a11y.Off {
		total++
		if s.bus != nil && s.bus.Alive() {
			up++
			st.Pids[A11yBus] = s.bus.Pid
		}
	}
	if s.chrome != nil && s.chrome.Alive() {
		up++
		st.Pids[Chromium] = s.chrome.Pid
		st.Browser = s.chrome.Version.Browser
		st.Health = s.health
		st.A11y = s.chromeA11y
	}
	switch {
	case !s.want && up == 0:
		st.Status = StatusStopped
	case s.want && up == total:
		st.Status = StatusRunning
	case s.starting:
		st.Status = StatusStarting
	default:
		st.Status = StatusDegraded
	}
	return st
}

// ensure starts, in order, the components that are not running. Callers
// hold s.op.
func (s *Stack) ensure(ctx context.Context) error {
	s.mu.Lock()
	s.starting = true
	xv, wm, bus, ch := s.xvfb, s.wm, s.bus, s.chrome
	res, url, mode, chMode := s.res, s.url, s.a11yMode, s.chromeA11y
	s.mu.Unlock()
	// A URL asked for is opened once; otherwise the configured one opens
	// on a fresh profile only, and a profile that has run restores its
	// own tabs (no duplicate welcome tab after each restart).
	explicitURL := url != ""
	if !explicitURL {
		url = s.cfg.URL
	}
	// A component counts as restarted when an earlier instance existed,
	// also when it is relaunched because the display under it was.
	hadXvfb, hadWM, hadBus, hadChrome := xv != nil, wm != nil, bus != nil, ch != nil
	defer func() {
		s.mu.Lock()
		s.starting = false
		s.mu.Unlock()
	}()
	fail := func(err error) error {
		s.mu.Lock()
		s.lastErr = err.Error()
		s.mu.Unlock()
		return err
	}

	if ch != nil && ch.Alive() && !s.chromiumAnswers(ctx, ch) {
		// Running but deaf: a hung browser is as good as dead.
		s.log.Warn("chromium does not answer; restarting it", "pid", ch.Pid)
		_ = ch.Stop(ctx, 2*time.Second)
	}
	if xv == nil || !s.settled(xv.Process) {
		if xv != nil {
			// Clients of a dead display die with it; restart them cleanly.
			s.stopFrom(ctx, WM)
			wm, bus, ch = nil, nil, nil
		}
		if err := os.MkdirAll(s.logDir(), 0o755); err != nil {
			return fail(fmt.Errorf("desktop: %w", err))
		}
		x, err := x11.StartXvfb(ctx, s.sp, x11.XvfbConfig{
			Path: s.cfg.XvfbPath, Resolution: res, MaxResolution: s.cfg.MaxResolution, LogPath: s.logPath(Xvfb), Credential: s.cfg.Credential,
			AuthFile: s.cfg.XAuthority, Display: s.cfg.Display,
		})
		if err != nil {
			return fail(unsupported(err))
		}
		s.adopt(Xvfb, x.Process, func() { s.xvfb = x }, hadXvfb)
		xv = x
	}
	if s.cfg.WMPath != "" && (wm == nil || !s.settled(wm)) {
		home, err := s.home()
		if err != nil {
			return fail(err)
		}
		p, err := s.sp.Start(proc.Spec{
			Name: WM, Path: s.cfg.WMPath, LogPath: s.logPath(WM), Credential: s.cfg.Credential,
			Env: s.displayEnv(xv.Display, s.tzEnv("HOME="+home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8")...),
			Dir: home,
		})
		if err != nil {
			return fail(err)
		}
		s.adopt(WM, p, func() { s.wm = p }, hadWM)
	}
	switch {
	case mode != a11y.Off && (bus == nil || !s.settled(bus.Process)):
		// Chromium looks for the bus once, at launch: a new bus means a
		// new browser.
		if ch != nil {
			s.stopChromium(ctx)
			ch = nil
		}
		b, err := a11y.StartBus(ctx, s.sp, a11y.BusConfig{
			Path: s.cfg.DBusDaemonPath, Dir: s.a11yDir(), Credential: s.cfg.Credential,
			Env: s.displayEnv(xv.Display, s.tzEnv()...), LogPath: s.logPath(A11yBus),
		})
		switch {
		case errors.Is(unsupported(err), ErrUnsupported):
			// Not installed: the desktop runs, with nothing exported.
			s.log.Warn("no accessibility bus here (install dbus-daemon and at-spi2-core); the browser runs without accessibility", "err", err)
			s.mu.Lock()
			s.a11yMode = a11y.Off
			s.mu.Unlock()
			mode = a11y.Off
		case err != nil:
			return fail(err)
		default:
			s.adopt(A11yBus, b.Process, func() { s.bus = b }, hadBus)
			bus = b
		}
	case mode == a11y.Off && bus != nil:
		s.stopBus(ctx) // and the browser that used it
		bus, ch = nil, nil
	}
	if ch != nil && chMode != mode {
		s.log.Info("restarting chromium for another accessibility mode", "from", chMode, "to", mode)
		s.stopChromium(ctx)
		ch = nil
	}
	if ch == nil || !s.settled(ch.Process) {
		home, err := s.home()
		if err != nil {
			return fail(err)
		}
		var extra []string
		if s.cfg.ChromiumFlags != nil {
			extra = s.cfg.ChromiumFlags()
		}
		var acc cdp.Accessibility
		if bus != nil {
			acc = cdp.Accessibility{Mode: mode, Bus: bus.Address, RuntimeDir: s.a11yDir()}
		}
		c, err := cdp.StartChromium(ctx, s.sp, cdp.ChromiumConfig{
			Path: s.cfg.ChromiumPath, Port: s.cfg.CDPPort, ProfileDir: s.cfg.ProfileDir, URL: url,
			Display: xv.Display, Width: res.Width, Height: res.Height, NoSandbox: s.cfg.NoSandbox,
			Credential: s.cfg.Credential, Home: home, LogPath: s.logPath(Chromium), XAuthority: s.cfg.XAuthority,
			Locale: s.cfg.Locale, Timezone: s.cfg.Timezone, KeepURL: explicitURL, ExtraFlags: extra,
			Accessibility: acc,
		})
		if err != nil {
			return fail(unsupported(err))
		}
		s.adopt(Chromium, c.Process, func() { s.chrome, s.health, s.url, s.chromeA11y = c, "ok", "", mode }, hadChrome)
	}
	s.mu.Lock()
	s.lastErr = ""
	s.mu.Unlock()
	return nil
}

// settled reports whether p is alive; a child that is not is first
// reaped (a zombie is reaped within moments), so that its exit has been
// recorded before it is replaced.
func (s *Stack) settled(p *proc.Process) bool {
	if p.Alive() {
		return true
	}
	if !p.Reaped(5 * time.Second) {
		s.log.Warn("component dead but not reaped", "component", p.Name, "pid", p.Pid)
	}
	// What it started (Chromium's zygote, renderers and GPU process) may
	// outlive it; they share its process group and go with it.
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx, 0); err != nil {
		s.log.Warn("leftovers of a dead component", "component", p.Name, "err", err)
	}
	return false
}

// chromiumAnswers asks the DevTools endpoint for its version.
func (s *Stack) chromiumAnswers(ctx context.Context, c *cdp.Chromium) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := cdp.GetVersion(ctx, c.Port)
	return err == nil
}

// adopt records a started component and watches for its exit.
func (s *Stack) adopt(name string, p *proc.Process, set func(), restart bool) {
	s.mu.Lock()
	set()
	if restart {
		s.restarts[name]++
	}
	s.mu.Unlock()
	s.log.Info("component started", "component", name, "pid", p.Pid, "restart", restart)
	s.wg.Add(1)
	go func() { // ends when the child exits; children are stopped by Close
		defer s.wg.Done()
		<-p.Done()
		s.mu.Lock()
		want := s.want && !s.stopped[p]
		delete(s.stopped, p)
		switch {
		case !want:
		case time.Since(p.Started) < 30*time.Second:
			s.fails[name]++
		default:
			s.fails[name] = 0
		}
		s.mu.Unlock()
		if want {
			s.log.Warn("component exited", "component", name, "pid", p.Pid, "err", p.ExitError())
		}
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}()
}

// stopChromium stops Chromium alone.
func (s *Stack) stopChromium(ctx context.Context) { s.stopFrom(ctx, Chromium) }

// stopBus stops the accessibility bus and Chromium, which used it.
func (s *Stack) stopBus(ctx context.Context) { s.stopFrom(ctx, A11yBus) }

// A11y is the accessibility bus's address and the mode of the Chromium
// that exports its tree there; "" and a11y.Off when there is none.
func (s *Stack) A11y() (addr, mode string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bus == nil || s.chrome == nil || s.chromeA11y == a11y.Off {
		return "", a11y.Off
	}
	return s.bus.Address, s.chromeA11y
}

// orOff is m, or a11y.Off for "".
func orOff(m string) string {
	if m == "" {
		return a11y.Off
	}
	return m
}

// a11yDir holds the accessibility bus's socket and serves as the GUI's
// XDG_RUNTIME_DIR.
func (s *Stack) a11yDir() string { return filepath.Join(s.cfg.RunDir, "a11y") }

// stopFrom stops the named component and those started after it, newest
// first (Xvfb, WM, A11yBus, Chromium): stopFrom(Xvfb) stops everything,
// stopFrom(WM) leaves Xvfb, stopFrom(A11yBus) leaves both, and
// stopFrom(Chromium) leaves all three.
func (s *Stack) stopFrom(ctx context.Context, from string) {
	s.mu.Lock()
	var ps []*proc.Process
	chrome := s.chrome
	if s.chrome != nil {
		ps = append(ps, s.chrome.Process)
		s.chrome = nil
	}
	if s.bus != nil && from != Chromium {
		ps = append(ps, s.bus.Process)
		s.bus = nil
	}
	if s.wm != nil && from != Chromium && from != A11yBus {
		ps = append(ps, s.wm)
		s.wm = nil
	}
	if from == Xvfb && s.xvfb != nil {
		ps = append(ps, s.xvfb.Process)
		s.xvfb = nil
	}
	for _, p := range ps {
		if p.Alive() { // its exit, still to come, is no failure
			s.stopped[p] = true
		}
	}
	s.mu.Unlock()
	if chrome != nil && chrome.Alive() {
		// Quit through DevTools first: SIGTERM loses the cookies of
		// the last seconds. SIGTERM follows if it has not gone.
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if err := cdp.CloseBrowser(cctx, chrome.Port); err != nil {
			s.log.Debug("chromium did not take Browser.close", "err", err)
		} else if !chrome.Reaped(s.cfg.StopGrace) {
			s.log.Warn("chromium still running after Browser.close", "pid", chrome.Pid)
		}
		cancel()
	}
	for _, p := range ps {
		if err := p.Stop(ctx, s.cfg.StopGrace); err != nil {
			s.log.Error("stop component", "component", p.Name, "err", err)
		} else {
			s.log.Info("component stopped", "component", p.Name, "pid", p.Pid)
		}
	}
}

// supervise restarts components that died while the stack is wanted.
func (s *Stack) supervise() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.poke:
		}
		delay := s.backoff()
		t := time.NewTimer(delay)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.op.Lock()
		s.mu.Lock()
		want := s.want
		s.mu.Unlock()
		if want && s.Status().Status != StatusRunning {
			if err := s.ensure(s.ctx); err != nil && !errors.Is(err, context.Canceled) {
				s.log.Error("restart failed", "err", err)
				select { // try again after the next backoff
				case s.poke <- struct{}{}:
				default:
				}
			}
		}
		s.op.Unlock()
	}
}

// checkHealth asks a running Chromium for its version over a DevTools
// WebSocket of its own (never an agent's session) and restarts it after
// two failures in a row: a browser can hang with its process alive.
func (s *Stack) checkHealth() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.HealthInterval)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		want, ch := s.want, s.chrome
		s.mu.Unlock()
		if !want || ch == nil || !ch.Alive() {
			fails = 0
			continue
		}
		ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		_, err := cdp.Health(ctx, ch.Port)
		cancel()
		s.mu.Lock()
		if err == nil {
			fails, s.health = 0, "ok"
		} else {
			fails++
			s.health = "unhealthy: " + err.Error()
		}
		s.mu.Unlock()
		if fails >= 2 {
			s.log.Warn("chromium failed its health check twice; restarting it", "pid", ch.Pid, "err", err)
			_ = ch.Stop(s.ctx, 5*time.Second) // the supervisor brings it back
			fails = 0
		}
	}
}

func (s *Stack) backoff() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.fails {
		n = max(n, f)
	}
	d := s.cfg.RestartBackoff
	for i := 1; i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// tzEnv adds TZ when a time zone is configured.
func (s *Stack) tzEnv(env ...string) []string {
	if s.cfg.Timezone != "" {
		env = append(env, "TZ="+s.cfg.Timezone)
	}
	return env
}

// displayEnv is DISPLAY (and XAUTHORITY when the display has one) and more.
func (s *Stack) displayEnv(display string, more ...string) []string {
	env := []string{"DISPLAY=" + display}
	if s.cfg.XAuthority != "" {
		env = append(env, "XAUTHORITY="+s.cfg.XAuthority)
	}
	return append(env, more...)
}

func (s *Stack) logDir() string { return filepath.Join(s.cfg.RunDir, "logs") }

func (s *Stack) logPath(name string) string { return filepath.Join(s.logDir(), name+".log") }

// home is the GUI user's HOME, created and owned by that user.
func (s *Stack) home() (string, error) {
	h := s.cfg.Home
	if h == "" {
		h = filepath.Join(s.cfg.RunDir, "home")
	}
	_, err := os.Stat(h)
	made := errors.Is(err, os.ErrNotExist)
	if err := os.MkdirAll(h, 0o700); err != nil {
		return "", fmt.Errorf("desktop: home: %w", err)
	}
	// A home made here is handed to the GUI user; an existing one (the
	// user's own) is left as it is, except deskd's default under RunDir.
	if c := s.cfg.Credential; c != nil && (made || h == filepath.Join(s.cfg.RunDir, "home")) {
		if err := os.Chown(h, int(c.Uid), int(c.Gid)); err != nil {
			return "", fmt.Errorf("desktop: home: %w", err)
		}
	}
	return h, nil
}
