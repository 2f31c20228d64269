package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cubepod/deskd/a11y"
	"github.com/cubepod/deskd/cdp"
	"github.com/cubepod/deskd/x11"
)

// recordsTerminal, recordsActions, recordsDesktop: what --record records from the start.
func (c *Config) recordsTerminal() bool { return slices.Contains(splitList(c.Record), "terminal") }
func (c *Config) recordsActions() bool  { return slices.Contains(splitList(c.Record), "actions") }
func (c *Config) recordsDesktop() bool  { return slices.Contains(splitList(c.Record), "desktop") }

// keyframeBytes is record.DesktopOptions.KeyframeBytes for
// --record-keyframe-kib (0: by time alone, which record spells -1).
func (c *Config) keyframeBytes() int64 {
	if c.RecordKeyframeKiB == 0 {
		return -1
	}
	return c.RecordKeyframeKiB << 10
}

// Config is what the flags say.
type Config struct {
	Listen     string
	RunDir     string
	Resolution x11.Resolution
	// MaxResolution bounds what viewers may resize the screen to.
	MaxResolution x11.Resolution
	URL           string
	Xvfb          string
	WM            string
	Chromium      string
	CDPPort       int
	ProfileDir    string
	User          string
	NoSandbox     bool
	PanelSecret   string // this sandbox's panel key (see panel.SandboxKey)
	SandboxID     string
	// PanelSecretFile and VNCPasswordFile hold secrets outside argv and
	// the environment; SecretsFD is how `deskd start` hands them on to
	// the daemon it spawns (an inherited pipe, read once).
	PanelSecretFile string
	VNCPasswordFile string
	SecretsFD       int
	// Proxy is the browser's upstream proxy (scheme://host:port, no
	// credentials), ProxyBypass the hosts it skips; ProxyCredentials
	// ("user:password") come from ProxyCredentialsFile or the secrets fd.
	Proxy                string
	ProxyBypass          string
	ProxyCredentials     string
	ProxyCredentialsFile string
	AllowHost            string
	OpsListen            string
	DebugAddr            string
	MaxConns             int
	MaxConnsPerAddr      int
	WSPing               time.Duration
	MaxViewers           int
	LogLevel             string
	LogFormat            string
	Shell                string
	TermIdle             time.Duration
	AllowOrigin          string
	CDPPing              time.Duration
	VNCListen            string
	VNCPassword          string
	Display              int
	Locale               string
	Timezone             string
	Home                 string
	MaxUploadMiB         int64
	OneCore              bool
	TabFollow            bool
	A11y                 string
	Record               string // what to record from the start: "terminal", "actions", both
	RecordDir            string
	RecordMaxMiB         int64
	RecordMaxAge         time.Duration
	RecordInput          bool
	RecordView           bool
	RecordKeyframe       time.Duration
	RecordKeyframeKiB    int64
	H264                 string // "auto" or "off"
	X264                 string
	StopDaemon           bool // stop --daemon
	set                  map[string]bool
}

var errHelp = errors.New("help")

// ParseFlags parses a subcommand's flags; each flag falls back to the
// environment variable DESKD_<NAME> (dashes as underscores).
func ParseFlags(cmd string, args []string, stderr io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("deskd "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &Config{}
	str := func(p *string, name, def, help string) {
		fs.StringVar(p, name, env(name, def), help+" (env "+envName(name)+")")
	}
	str(&c.Listen, "listen", "127.0.0.1:8080", "HTTP address; non-loopback only with --panel-secret")
	str(&c.RunDir, "run-dir", "/run/cubepod/desktop", "pid files, locks, control socket, logs")
	c.Resolution = x11.Resolution{Width: 1280, Height: 800, Depth: 24}
	if v := os.Getenv(envName("resolution")); v != "" {
		if err := c.Resolution.Set(v); err != nil {
			return nil, fmt.Errorf("%s: %w", envName("resolution"), err)
		}
	}
	fs.Var(&c.Resolution, "resolution", "screen WIDTHxHEIGHTxDEPTH (env DESKD_RESOLUTION)")
	c.MaxResolution = x11.Resolution{Width: 2560, Height: 1600, Depth: 24}
	if v := os.Getenv(envName("max-resolution")); v != "" {
		if err := c.MaxResolution.Set(v); err != nil {
			return nil, fmt.Errorf("%s: %w", envName("max-resolution"), err)
		}
	}
	fs.Var(&c.MaxResolution, "max-resolution", "largest size viewers may resize the screen to; Xvfb cannot grow past its start size, so it starts at this and shrinks (env DESKD_MAX_RESOLUTION)")
	str(&c.URL, "url", "about:blank", "first page Chromium opens")
	str(&c.Xvfb, "xvfb", "Xvfb", "Xvfb binary")
	str(&c.WM, "wm", "auto", `window manager binary, "auto" (openbox if installed) or "none"`)
	str(&c.Chromium, "chromium", "auto", `Chromium binary or "auto"`)
	port := env("cdp-port", "9222")
	cdpPort, err := strconv.Atoi(port)
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not a port", envName("cdp-port"), port)
	}
	fs.IntVar(&c.CDPPort, "cdp-port", cdpPort, "Chromium remote debugging port on 127.0.0.1 (env DESKD_CDP_PORT)")
	str(&c.ProfileDir, "profile-dir", "", "Chromium profile (default RUN_DIR/chromium-profile)")
	str(&c.User, "user", "", "run the GUI as USER or UID:GID (default: deskd's own user)")
	fs.BoolVar(&c.NoSandbox, "no-sandbox", envBool("no-sandbox", "false"), "pass --no-sandbox to Chromium (always done as root) (env DESKD_NO_SANDBOX)")
	str(&c.PanelSecret, "panel-secret", "", "this sandbox's panel key: serve only under valid /panel/<token>/ (prefer --panel-secret-file)")
	str(&c.PanelSecretFile, "panel-secret-file", "", "read the panel key from this file")
	str(&c.SandboxID, "sandbox-id", "", "this sandbox's id; required with a panel key (a token's sid must equal it)")
	str(&c.Shell, "shell", "", "terminal shell (default: the --user's login shell, else /bin/bash)")
	idle, err := time.ParseDuration(env("terminal-idle", "30m"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("terminal-idle"), err)
	}
	fs.DurationVar(&c.TermIdle, "terminal-idle", idle, "end a terminal session this long after its last viewer left (env DESKD_TERMINAL_IDLE)")
	ping, err := time.ParseDuration(env("cdp-ping", "20s"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("cdp-ping"), err)
	}
	fs.DurationVar(&c.CDPPing, "cdp-ping", ping, "heartbeat interval on both legs of a CDP relay (env DESKD_CDP_PING)")
	str(&c.VNCListen, "vnc-listen", "", "also serve native VNC viewers on this loopback address (e.g. 127.0.0.1:5900)")
	str(&c.VNCPassword, "vnc-password", "", "require VNC authentication with this password (prefer --vnc-password-file)")
	str(&c.VNCPasswordFile, "vnc-password-file", "", "read the VNC password from this file")
	str(&c.Proxy, "proxy", "", "send the browser's traffic through this upstream proxy: http://, https:// or socks5://HOST:PORT, no credentials in it (a start request's \"proxy\" changes it)")
	str(&c.ProxyBypass, "proxy-bypass", "", "comma-separated hosts the browser reaches directly, not through --proxy (*.corp, 10.0.0.0/8, <local>)")
	str(&c.ProxyCredentialsFile, "proxy-credentials-file", "", "read the upstream proxy's credentials, one line user:password, from this file")
	fs.IntVar(&c.SecretsFD, "secrets-fd", -1, "read the secrets as JSON from this inherited fd (used by deskd start)")
	str(&c.AllowHost, "allow-host", "", "without a panel key: comma-separated Host names accepted besides loopback ones")
	str(&c.DebugAddr, "debug-addr", "", "serve net/http/pprof on this loopback address (off by default), to profile a live desktop")
	str(&c.OpsListen, "ops-listen", "", "also serve /healthz and /metrics only, without a token, on this address (for probes and Prometheus)")
	maxConns, err := strconv.Atoi(env("max-conns", "1024"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("max-conns"), err)
	}
	fs.IntVar(&c.MaxConns, "max-conns", maxConns, "open HTTP connections at most; idle ones are reclaimed for new ones, then more wait (env DESKD_MAX_CONNS)")
	perAddr, err := strconv.Atoi(env("max-conns-per-addr", "0"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("max-conns-per-addr"), err)
	}
	fs.IntVar(&c.MaxConnsPerAddr, "max-conns-per-addr", perAddr, "open HTTP connections at most from one address that has not shown a valid token (the gateway has); 0: a quarter of --max-conns, 64 at most (env DESKD_MAX_CONNS_PER_ADDR)")
	maxViewers, err := strconv.Atoi(env("max-viewers", "32"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("max-viewers"), err)
	}
	fs.IntVar(&c.MaxViewers, "max-viewers", maxViewers, "concurrent VNC viewers at most (env DESKD_MAX_VIEWERS)")
	wsPing, err := time.ParseDuration(env("ws-ping", "20s"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("ws-ping"), err)
	}
	fs.DurationVar(&c.WSPing, "ws-ping", wsPing, "ping idle desktop and terminal WebSockets this often, so proxies keep them open (env DESKD_WS_PING)")
	str(&c.AllowOrigin, "allow-origin", "", "comma-separated extra origins whose pages may open WebSockets")
	disp, err := strconv.Atoi(strings.TrimPrefix(env("display", "0"), ":"))
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not a display number", envName("display"), env("display", ""))
	}
	fs.IntVar(&c.Display, "display", disp, "pin the X display number (e.g. 99); 0: a free one (env DESKD_DISPLAY)")
	str(&c.A11y, "a11y", a11y.Complete, "what Chromium exports to the accessibility snapshot (computer/a11y): complete (the page and the browser's own UI), basic, form-controls, or off (no accessibility bus either); a start request's \"a11y\" changes it, restarting the browser")
	str(&c.Locale, "locale", "", "Chromium's language and Accept-Language, e.g. de-DE (default: Chromium's)")
	str(&c.Timezone, "timezone", "", "TZ for the desktop and terminal, e.g. Europe/Berlin (default: the system's)")
	str(&c.Home, "home", "", "the GUI user's home: Chromium's HOME, the terminal's, and the root of the files API (default: the --user's home, else RUN_DIR/home)")
	maxUp, err := strconv.ParseInt(env("max-upload-mib", "4096"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("max-upload-mib"), err)
	}
	fs.Int64Var(&c.MaxUploadMiB, "max-upload-mib", maxUp, "largest file the files API accepts, in MiB (env DESKD_MAX_UPLOAD_MIB)")
	fs.BoolVar(&c.TabFollow, "tab-follow", envBool("tab-follow", "true"), "bring the browser tab an agent acts on over CDP to the front, so the desktop shows it (not while a person uses the desktop); a start request's \"tab_follow\" switches it (env DESKD_TAB_FOLLOW)")
	str(&c.Record, "record", "", `record from the start: "desktop" (the desktop whenever it runs, what a viewer is sent), "terminal" (every terminal session, asciicast v2), "actions" (the action log, JSONL), or several ("desktop,terminal,actions"); "" records only what POST record/start asks for`)
	str(&c.RecordDir, "record-dir", "", "where recordings go (default RUN_DIR/recordings)")
	recMax, err := strconv.ParseInt(env("record-max-mib", "1024"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("record-max-mib"), err)
	}
	fs.Int64Var(&c.RecordMaxMiB, "record-max-mib", recMax, "space all recordings together may take, in MiB: the oldest finished ones are dropped first, and a recording that finds none stops (env DESKD_RECORD_MAX_MIB)")
	recAge, err := time.ParseDuration(env("record-max-age", "168h"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("record-max-age"), err)
	}
	fs.DurationVar(&c.RecordMaxAge, "record-max-age", recAge, "finished recordings older than this are dropped (env DESKD_RECORD_MAX_AGE)")
	fs.BoolVar(&c.RecordInput, "record-input", envBool("record-input", "false"), "terminal recordings take keystrokes too (keys can be passwords) (env DESKD_RECORD_INPUT)")
	recKey, err := time.ParseDuration(env("record-keyframe", "30s"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("record-keyframe"), err)
	}
	fs.DurationVar(&c.RecordKeyframe, "record-keyframe", recKey, "desktop recordings start again from a full picture at most this often: replay seeks from there (env DESKD_RECORD_KEYFRAME)")
	recKiB, err := strconv.ParseInt(env("record-keyframe-kib", "4096"), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envName("record-keyframe-kib"), err)
	}
	fs.Int64Var(&c.RecordKeyframeKiB, "record-keyframe-kib", recKiB, "and only once this much was recorded since the last full picture (a still screen gets none), and sooner at eight times this; 0: by time alone (env DESKD_RECORD_KEYFRAME_KIB)")
	fs.BoolVar(&c.RecordView, "record-view", envBool("record-view", "false"), "view tokens may list and download recordings (env DESKD_RECORD_VIEW)")
	fs.BoolVar(&c.OneCore, "one-core", envBool("one-core", "true"), "run deskd's ordinary work on one scheduler thread (fewer thread wake-ups a frame); big encodes still use every core while they run; false: every core always; a GOMAXPROCS in the environment wins (env DESKD_ONE_CORE)")
	str(&c.H264, "h264", "auto", `H.264 (RFB encoding 50) for the part of the screen that keeps moving, to viewers that take it: "auto" (when x264 is installed) or "off"`)
	str(&c.X264, "x264", "x264", "the x264 binary H.264 is encoded with (a child process, started when video is first sent)")
	str(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	str(&c.LogFormat, "log-format", "text", "text or json")
	if cmd == "stop" {
		fs.BoolVar(&c.StopDaemon, "daemon", false, "also stop the daemon")
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	c.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	if err := c.loadSecrets(); err != nil {
		return nil, err
	}
	return c, c.validate()
}

// secretEnv are the variables that may carry secrets: read once, then
// removed from deskd's environment so nothing started later sees them.
var secretEnv = []string{"panel-secret", "vnc-password"}

// maxSecret bounds a secret read from a file or fd.
const maxSecret = 4096

// secrets is what `deskd start` writes to the daemon's secrets fd.
type secrets struct {
	PanelSecret      string `json:"panel_secret,omitempty"`
	VNCPassword      string `json:"vnc_password,omitempty"`
	ProxyCredentials string `json:"proxy_credentials,omitempty"`
}

// loadSecrets reads the secret files and fd and clears the secret
// variables from the environment.
func (c *Config) loadSecrets() error {
	for _, name := range secretEnv {
		_ = os.Unsetenv(envName(name))
	}
	for _, f := range []struct {
		path string
		dst  *string
		flag string
	}{{c.PanelSecretFile, &c.PanelSecret, "panel-secret"}, {c.VNCPasswordFile, &c.VNCPassword, "vnc-password"},
		{c.ProxyCredentialsFile, &c.ProxyCredentials, "proxy-credentials"}} {
		if f.path == "" {
			continue
		}
		if *f.dst != "" {
			return fmt.Errorf("--%s and --%s-file: give one", f.flag, f.flag)
		}
		v, err := readSecret(f.path)
		if err != nil {
			return fmt.Errorf("--%s-file: %w", f.flag, err)
		}
		*f.dst = v
	}
	if c.SecretsFD >= 0 {
		f := os.NewFile(uintptr(c.SecretsFD), "secrets")
		if f == nil {
			return fmt.Errorf("--secrets-fd %d: not an open file", c.SecretsFD)
		}
		b, err := io.ReadAll(io.LimitReader(f, 4*maxSecret))
		f.Close()
		if err != nil {
			return fmt.Errorf("--secrets-fd: %w", err)
		}
		var s secrets
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("--secrets-fd: %w", err)
		}
		c.PanelSecret, c.VNCPassword, c.ProxyCredentials = s.PanelSecret, s.VNCPassword, s.ProxyCredentials
	}
	if len(c.PanelSecret) > maxSecret || len(c.VNCPassword) > maxSecret || len(c.ProxyCredentials) > maxSecret {
		return fmt.Errorf("a secret is longer than %d bytes", maxSecret)
	}
	return nil
}

func readSecret(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecret+2))
	if err != nil {
		return "", err
	}
	v := strings.TrimRight(string(b), "\r\n")
	if len(v) > maxSecret {
		return "", fmt.Errorf("%s: longer than %d bytes", path, maxSecret)
	}
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

func envName(flagName string) string {
	return "DESKD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func env(flagName, def string) string {
	if v, ok := os.LookupEnv(envName(flagName)); ok {
		return v
	}
	return def
}

// envBool is a boolean flag's default from its DESKD_ variable (def
// when unset): "1" and "true" are true, anything else false.
func envBool(flagName, def string) bool {
	v := env(flagName, def)
	return v == "1" || v == "true"
}

func (c *Config) validate() error {
	if c.RunDir == "" {
		return errors.New("--run-dir is empty")
	}
	if c.CDPPort <= 0 || c.CDPPort > 65535 {
		return fmt.Errorf("--cdp-port %d out of range", c.CDPPort)
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	if c.PanelSecret == "" && !isLoopback(host) {
		return fmt.Errorf("--listen %q: without --panel-secret deskd listens on loopback only", c.Listen)
	}
	if c.PanelSecret != "" && c.SandboxID == "" {
		return errors.New("--sandbox-id is required with a panel key: a token's sid must name this sandbox")
	}
	if c.H264 != "auto" && c.H264 != "off" {
		return fmt.Errorf("--h264 %q: auto or off", c.H264)
	}
	if c.OpsListen != "" {
		if _, _, err := net.SplitHostPort(c.OpsListen); err != nil {
			return fmt.Errorf("--ops-listen %q: %w", c.OpsListen, err)
		}
	}
	if c.DebugAddr != "" {
		h, _, err := net.SplitHostPort(c.DebugAddr)
		if err != nil {
			return fmt.Errorf("--debug-addr %q: %w", c.DebugAddr, err)
		}
		if !isLoopback(h) {
			return fmt.Errorf("--debug-addr %q: profiles are served on loopback only", c.DebugAddr)
		}
	}
	if c.MaxConns < 16 {
		return fmt.Errorf("--max-conns %d: want at least 16", c.MaxConns)
	}
	if c.MaxConnsPerAddr < 0 || c.MaxConnsPerAddr > c.MaxConns {
		return fmt.Errorf("--max-conns-per-addr %d: want 0 (a quarter of --max-conns) to --max-conns (%d)", c.MaxConnsPerAddr, c.MaxConns)
	}
	if c.Display < 0 || c.Display > x11.MaxDisplay {
		return fmt.Errorf("--display %d out of range (0-%d)", c.Display, x11.MaxDisplay)
	}
	if err := cdp.CheckLocale(c.Locale); err != nil {
		return fmt.Errorf("--locale: %w", err)
	}
	if err := a11y.CheckMode(c.A11y); err != nil {
		return fmt.Errorf("--a11y: %w", err)
	}
	for _, w := range splitList(c.Record) {
		if w != "terminal" && w != "actions" && w != "desktop" {
			return fmt.Errorf("--record %.60q: want a list of desktop, terminal and actions, or nothing", c.Record)
		}
	}
	if c.RecordMaxMiB < 1 || c.RecordMaxMiB > 1<<30 {
		return fmt.Errorf("--record-max-mib %d: want 1 or more", c.RecordMaxMiB)
	}
	if c.RecordKeyframe < time.Second || c.RecordKeyframe > time.Hour {
		return fmt.Errorf("--record-keyframe %v: want 1s to 1h", c.RecordKeyframe)
	}
	if c.RecordKeyframeKiB < 0 || c.RecordKeyframeKiB > 1<<20 {
		return fmt.Errorf("--record-keyframe-kib %d: want 0 to 1048576", c.RecordKeyframeKiB)
	}
	if c.RecordMaxAge < time.Minute {
		return fmt.Errorf("--record-max-age %v: want a minute or more", c.RecordMaxAge)
	}
	if err := cdp.CheckTimezone(c.Timezone); err != nil {
		return fmt.Errorf("--timezone: %w", err)
	}
	if c.Home != "" && !filepath.IsAbs(c.Home) {
		return fmt.Errorf("--home %q: want an absolute path", c.Home)
	}
	if c.MaxUploadMiB < 1 {
		return fmt.Errorf("--max-upload-mib %d: want at least 1", c.MaxUploadMiB)
	}
	if c.MaxViewers < 1 {
		return fmt.Errorf("--max-viewers %d: want at least 1", c.MaxViewers)
	}
	if c.WSPing <= 0 {
		return fmt.Errorf("--ws-ping %s: want a positive duration", c.WSPing)
	}
	if err := cdp.CheckStartURL(c.URL); err != nil {
		return fmt.Errorf("--url: %w", err)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// credential resolves --user to a uid/gid; nil means "stay as we are".
func (c *Config) credential() (*syscall.Credential, error) {
	if c.User == "" {
		return nil, nil
	}
	uid, gid, err := lookupUser(c.User)
	if err != nil {
		return nil, err
	}
	if uid == uint32(os.Geteuid()) && gid == uint32(os.Getegid()) {
		return nil, nil
	}
	return &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}, nil
}

func lookupUser(s string) (uid, gid uint32, err error) {
	if u, g, ok := strings.Cut(s, ":"); ok {
		ui, err1 := strconv.ParseUint(u, 10, 32)
		gi, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || err2 != nil {
			return 0, 0, fmt.Errorf("--user %q: want NAME or UID:GID", s)
		}
		return uint32(ui), uint32(gi), nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, 0, fmt.Errorf("--user: %w", err)
	}
	ui, _ := strconv.ParseUint(u.Uid, 10, 32)
	gi, _ := strconv.ParseUint(u.Gid, 10, 32)
	return uint32(ui), uint32(gi), nil
}

// account is who the GUI and the shells run as.
type account struct {
	cred  *syscall.Credential // nil: deskd's own user
	name  string
	home  string // "" when the user has no passwd entry
	shell string
}

func (c *Config) account() (account, error) {
	cred, err := c.credential()
	if err != nil {
		return account{}, err
	}
	uid := os.Getuid()
	if cred != nil {
		uid = int(cred.Uid)
	}
	a := account{cred: cred, shell: "/bin/bash"}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		a.name, a.home = u.Username, u.HomeDir
		if sh := loginShell(u.Username); sh != "" {
			a.shell = sh
		}
	}
	if c.Shell != "" {
		a.shell = c.Shell
	}
	return a, nil
}

// loginShell reads the user's shell from /etc/passwd (os/user omits it).
func loginShell(name string) string {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ":")
		if len(f) == 7 && f[0] == name && strings.HasPrefix(f[6], "/") && !strings.HasSuffix(f[6], "nologin") && !strings.HasSuffix(f[6], "/false") {
			return f[6]
		}
	}
	return ""
}

// home is the GUI user's home: --home, else the account's, else one
// under the run dir.
func (c *Config) home(a account) string {
	return cmp.Or(c.Home, a.home, filepath.Join(c.RunDir, "home"))
}

// chromiumPath resolves --chromium auto to an installed browser.
func (c *Config) chromiumPath() string {
	if c.Chromium != "auto" {
		return c.Chromium
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return "chromium"
}

// wmPath resolves --wm; empty means none.
func (c *Config) wmPath() string {
	switch c.WM {
	case "none", "":
		return ""
	case "auto":
		if p, err := exec.LookPath("openbox"); err == nil {
			return p
		}
		return ""
	}
	return c.WM
}

// serveArgs is the command line that makes a daemon with this config;
// the secrets travel through an inherited fd (--secrets-fd), never in
// argv or the environment.
func (c *Config) serveArgs() []string {
	args := []string{"serve",
		"--listen=" + c.Listen, "--run-dir=" + c.RunDir, "--resolution=" + c.Resolution.String(), "--max-resolution=" + c.MaxResolution.String(),
		"--url=" + c.URL, "--xvfb=" + c.Xvfb, "--wm=" + c.WM, "--chromium=" + c.Chromium,
		"--cdp-port=" + strconv.Itoa(c.CDPPort), "--profile-dir=" + c.ProfileDir, "--user=" + c.User,
		"--no-sandbox=" + strconv.FormatBool(c.NoSandbox), "--sandbox-id=" + c.SandboxID,
		"--log-level=" + c.LogLevel, "--log-format=" + c.LogFormat,
		"--shell=" + c.Shell, "--terminal-idle=" + c.TermIdle.String(), "--allow-origin=" + c.AllowOrigin, "--cdp-ping=" + c.CDPPing.String(), "--vnc-listen=" + c.VNCListen,
		"--allow-host=" + c.AllowHost, "--ops-listen=" + c.OpsListen, "--debug-addr=" + c.DebugAddr, "--max-conns=" + strconv.Itoa(c.MaxConns), "--max-conns-per-addr=" + strconv.Itoa(c.MaxConnsPerAddr),
		"--max-viewers=" + strconv.Itoa(c.MaxViewers), "--ws-ping=" + c.WSPing.String(),
		"--display=" + strconv.Itoa(c.Display), "--locale=" + c.Locale, "--timezone=" + c.Timezone, "--home=" + c.Home,
		"--max-upload-mib=" + strconv.FormatInt(c.MaxUploadMiB, 10), "--one-core=" + strconv.FormatBool(c.OneCore),
		"--h264=" + c.H264, "--x264=" + c.X264, "--tab-follow=" + strconv.FormatBool(c.TabFollow), "--a11y=" + c.A11y,
		"--record=" + c.Record, "--record-dir=" + c.RecordDir, "--record-max-mib=" + strconv.FormatInt(c.RecordMaxMiB, 10),
		"--record-max-age=" + c.RecordMaxAge.String(), "--record-input=" + strconv.FormatBool(c.RecordInput), "--record-view=" + strconv.FormatBool(c.RecordView), "--record-keyframe=" + c.RecordKeyframe.String(), "--record-keyframe-kib=" + strconv.FormatInt(c.RecordKeyframeKiB, 10),
		"--proxy=" + c.Proxy, "--proxy-bypass=" + c.ProxyBypass,
	}
	return args
}
