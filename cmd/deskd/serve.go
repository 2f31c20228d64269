package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cubepod/deskd/cores"
	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/proxy"
	"github.com/cubepod/deskd/record"
	"github.com/cubepod/deskd/term"
	"github.com/cubepod/deskd/web"
	"github.com/cubepod/deskd/x11"
)

// Files in the run dir.
const (
	pidFile     = "deskd.pid"
	daemonLock  = "deskd.lock" // held for the daemon's lifetime
	cliLock     = "cli.lock"   // serialises start/stop commands
	controlSock = "control.sock"
	daemonLog   = "deskd.log"  // under logs/
	xauthFile   = "xauthority" // the display's cookie, 0600, the GUI user's
)

// Daemon is `deskd serve`: the HTTP port, the control socket and the stack.
type Daemon struct {
	cfg  *Config
	log  *slog.Logger
	lock *os.File
	tcp  net.Listener
	unix net.Listener
	vnc  net.Listener // optional, loopback
	ops  net.Listener // optional: /healthz, /readyz and /metrics only
	// admit and opsAdmit keep connections without a token from locking
	// the panel and the probes out.
	admit, opsAdmit *web.Admission
	debug           net.Listener // optional: net/http/pprof, loopback only
	sp              *proc.Spawner
	stack           *desktop.Stack
	term            *term.Manager
	recs            *record.Store
	web             *web.Server
	cores           *cores.Cores  // nil: the runtime's own GOMAXPROCS
	proxy           *proxy.Switch // the browser's way out
}

// NewDaemon takes the run dir's lifetime lock and opens the listeners, so
// an error here means nothing is served.
func NewDaemon(cfg *Config, stderr io.Writer) (*Daemon, error) {
	d := &Daemon{cfg: cfg, log: newLogger(cfg, stderr)}
	ok := false
	defer func() {
		if !ok {
			d.closeListeners()
		}
	}()
	acct, err := cfg.account()
	if err != nil {
		return nil, err
	}
	if err := checkAccount(acct.cred); err != nil {
		return nil, err
	}
	// One home for the GUI user: Chromium's (its downloads), the
	// terminal's and the files API's root.
	home := cfg.home(acct)
	drop := needsDrop(acct.cred)
	if drop {
		if err := prepareAsRoot(cfg.RunDir, home, acct.cred); err != nil {
			return nil, err
		}
	}
	if d.tcp, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	d.admit = web.NewAdmission(cfg.MaxConns, cfg.MaxConnsPerAddr)
	d.tcp = d.admit.Listener(d.tcp)
	if cfg.VNCListen != "" {
		if d.vnc, err = net.Listen("tcp", cfg.VNCListen); err != nil {
			return nil, fmt.Errorf("vnc listen: %w", err)
		}
	}
	if cfg.OpsListen != "" {
		if d.ops, err = net.Listen("tcp", cfg.OpsListen); err != nil {
			return nil, fmt.Errorf("ops listen: %w", err)
		}
		// The probes' own budget: panel traffic cannot take it, and one
		// address holds 8 of its 64 connections at most.
		d.opsAdmit = web.NewAdmission(64, 8)
		d.ops = d.opsAdmit.Listener(d.ops)
	}
	if cfg.DebugAddr != "" {
		if d.debug, err = net.Listen("tcp", cfg.DebugAddr); err != nil {
			return nil, fmt.Errorf("debug listen: %w", err)
		}
		d.debug = web.LimitListener(d.debug, 16)
	}
	// Everything from here on runs as the GUI user: the keys are read and
	// the ports bound.
	if drop {
		if err := dropPrivileges(acct.cred); err != nil {
			return nil, err
		}
		acct.cred = nil
	} else if err := notDumpable(); err != nil {
		return nil, err
	}
	cred := acct.cred
	if err := os.MkdirAll(filepath.Join(cfg.RunDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("run dir: %w", err)
	}
	if d.lock, err = tryLock(filepath.Join(cfg.RunDir, daemonLock)); err != nil {
		return nil, fmt.Errorf("another deskd serves %s: %w", cfg.RunDir, err)
	}
	sock := filepath.Join(cfg.RunDir, controlSock)
	_ = os.Remove(sock) // stale: we hold the lifetime lock
	if d.unix, err = net.Listen("unix", sock); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := writeFileNoFollow(filepath.Join(cfg.RunDir, pidFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("pid file: %w", err)
	}
	// The display admits only clients with this cookie: deskd (its xgb
	// connections read $XAUTHORITY), the window manager, Chromium and the
	// terminal's shells; any other process in the sandbox is refused.
	xauth := filepath.Join(cfg.RunDir, xauthFile)
	uid, gid := -1, -1
	if cred != nil {
		uid, gid = int(cred.Uid), int(cred.Gid)
	}
	if err := x11.WriteAuthority(xauth, uid, gid); err != nil {
		return nil, err
	}
	if err := os.Setenv("XAUTHORITY", xauth); err != nil {
		return nil, fmt.Errorf("xauthority: %w", err)
	}
	d.proxy, err = browserProxy(cfg, d.log.With("part", "proxy"))
	if err != nil {
		return nil, err
	}
	d.sp = proc.NewSpawner()
	d.stack = desktop.New(desktop.Config{
		Home: home, Display: cfg.Display, Locale: cfg.Locale, Timezone: cfg.Timezone,
		XAuthority: xauth,
		RunDir:     cfg.RunDir, ProfileDir: cfg.ProfileDir, Resolution: cfg.Resolution, MaxResolution: cfg.MaxResolution, URL: cfg.URL,
		XvfbPath: cfg.Xvfb, WMPath: cfg.wmPath(), ChromiumPath: cfg.chromiumPath(), CDPPort: cfg.CDPPort,
		NoSandbox: cfg.NoSandbox, Credential: cred, Logger: d.log.With("part", "desktop"),
		ChromiumFlags: d.proxy.ChromiumFlags, A11y: cfg.A11y,
	}, d.sp)
	stack := d.stack
	// Recordings, in a directory of the GUI user's (made after the drop).
	d.recs, err = record.Open(cmp.Or(cfg.RecordDir, filepath.Join(cfg.RunDir, "recordings")), cfg.RecordMaxMiB<<20, cfg.RecordMaxAge, d.log.With("part", "record"))
	if err != nil {
		return nil, err
	}
	termRec := &record.Terminals{Store: d.recs}
	termRec.Input.Store(cfg.RecordInput)
	d.term, err = term.NewManager(term.Config{
		Record: func(id string, size term.Size) term.Recording {
			if c := termRec.Start(id, size.Columns, size.Rows); c != nil {
				return c
			}
			return nil // not a nil *Cast in the interface
		},
		Shell: acct.shell, Home: home, User: acct.name, Credential: cred, Spawner: d.sp,
		Logger: d.log.With("part", "term"), IdleTimeout: cfg.TermIdle,
		EnvFunc: func() []string { // shells can open windows on the desktop once it runs
			var env []string
			if cfg.Timezone != "" {
				env = append(env, "TZ="+cfg.Timezone)
			}
			if st := stack.Status(); st.Display != "" {
				env = append(env, "DISPLAY="+st.Display, "XAUTHORITY="+st.XAuthority)
			}
			return env
		},
	})
	if err != nil {
		return nil, err
	}
	port := web.ListenerPort(d.tcp)
	if cfg.OneCore && os.Getenv("GOMAXPROCS") == "" {
		d.cores = cores.Narrow(runtime.GOMAXPROCS(0))
	}
	d.web = web.New(web.Config{
		Stack: d.stack, Terminal: d.term, Logger: d.log.With("part", "web"), PanelSecret: []byte(cfg.PanelSecret),
		SandboxID: cfg.SandboxID, HTTPPort: port, BaseURL: "http://" + d.tcp.Addr().String(), AllowOrigins: splitList(cfg.AllowOrigin),
		AllowHosts: splitList(cfg.AllowHost), CDPPing: cfg.CDPPing, WSPing: cfg.WSPing, VNCPassword: cfg.VNCPassword,
		MaxViewers: cfg.MaxViewers, FilesRoot: home, FilesOwner: cred, MaxUpload: cfg.MaxUploadMiB << 20,
		Recordings: d.recs, TerminalRecorder: termRec, RecordView: cfg.RecordView, RecordActions: cfg.recordsActions(),
		RecordDesktop: cfg.recordsDesktop(), RecordKeyframe: cfg.RecordKeyframe, RecordKeyframeBytes: cfg.keyframeBytes(),
		Cores: d.cores, TabFollow: cfg.TabFollow, Proxy: d.proxy, Video: videoEncoders(cfg, d.sp, cred, d.log), ExportVideo: exportEncoders(cfg, d.sp, cred), ExportDir: cfg.RunDir, FilesDeny: absPaths(cmp.Or(cfg.ProfileDir, filepath.Join(cfg.RunDir, "chromium-profile")), cfg.RunDir, cfg.PanelSecretFile, cfg.VNCPasswordFile, cfg.ProxyCredentialsFile),
	})
	if cfg.recordsTerminal() {
		d.term.SetRecording(true)
	}
	ok = true
	return d, nil
}

// browserProxy is the browser's way out as the flags give it: direct, or
// through --proxy with the credentials read from a file or the fd.
func browserProxy(cfg *Config, log *slog.Logger) (*proxy.Switch, error) {
	sw := proxy.NewSwitch(log)
	if cfg.Proxy == "" {
		if cfg.ProxyCredentials != "" || cfg.ProxyBypass != "" {
			return nil, errors.New("--proxy-credentials-file and --proxy-bypass need --proxy")
		}
		return sw, nil
	}
	c := proxy.Config{Server: cfg.Proxy, Bypass: splitList(cfg.ProxyBypass)}
	if cfg.ProxyCredentials != "" {
		var ok bool
		if c.Username, c.Password, ok = strings.Cut(cfg.ProxyCredentials, ":"); !ok {
			return nil, errors.New("--proxy-credentials-file: want one line user:password")
		}
	}
	if _, err := sw.Set(c); err != nil {
		return nil, fmt.Errorf("--proxy: %w", err)
	}
	return sw, nil
}

// absPaths makes the non-empty paths absolute.
func absPaths(ps ...string) []string {
	var out []string
	for _, p := range ps {
		if p == "" {
			continue
		}
		if a, err := filepath.Abs(p); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func splitList(s string) []string {
	var out []string
	for _, o := range strings.Split(s, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

func newLogger(cfg *Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		lvl = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Addr is the HTTP listener's address.
func (d *Daemon) Addr() net.Addr { return d.tcp.Addr() }

// Run serves until ctx ends, then shuts down: HTTP first, then the
// WebSockets and terminal sessions, then the stack (Chromium gets SIGTERM
// so its profile is flushed), then the spawner.
func (d *Daemon) Run(ctx context.Context) error {
	d.log.Info("deskd serving", "addr", d.tcp.Addr().String(), "run_dir", d.cfg.RunDir,
		"panel", d.cfg.PanelSecret != "", "pid", os.Getpid())
	server := func(h http.Handler, a *web.Admission) *http.Server {
		// Headers within 10 s (slowloris), an idle keep-alive connection
		// 120 s, at most --max-conns open and --max-conns-per-addr from an
		// address without a token (the admission); WebSockets are
		// hijacked (deadlines cleared) and live by their own pings.
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10,
			ErrorLog: slog.NewLogLogger(d.log.Handler(), slog.LevelWarn)}
		if a != nil {
			srv.ConnState, srv.ConnContext = a.ConnState, a.ConnContext
		}
		return srv
	}
	servers := []*http.Server{server(d.web.Handler(), d.admit), server(d.web.ControlHandler(), nil)}
	listeners := []net.Listener{d.tcp, d.unix}
	if d.ops != nil {
		servers = append(servers, server(d.web.OpsHandler(), d.opsAdmit))
		listeners = append(listeners, d.ops)
	}
	if d.debug != nil {
		srv := server(pprofHandler(), nil)
		srv.WriteTimeout = 0 // a CPU profile takes as long as it is asked to
		servers = append(servers, srv)
		listeners = append(listeners, d.debug)
		d.log.Info("profiles served", "addr", d.debug.Addr().String())
	}
	errc := make(chan error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Add(1)
		go func() { // ends when srv is shut down below
			defer wg.Done()
			if err := srv.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	if d.vnc != nil {
		wg.Add(1)
		go func() { // ends when the listener is closed below
			defer wg.Done()
			d.web.ServeVNC(d.vnc)
		}()
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	d.log.Info("deskd shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if d.vnc != nil {
		d.vnc.Close()
	}
	for _, srv := range servers {
		if err := srv.Shutdown(sctx); err != nil {
			d.log.Warn("http shutdown", "err", err)
			srv.Close()
		}
	}
	wg.Wait()
	d.web.Close()  // WebSockets: close 1001 and wait for their handlers
	d.term.Close() // hang up the shells
	d.recs.Close()
	d.stack.Close(sctx)
	d.proxy.Close()
	d.sp.Close()
	_ = os.Remove(filepath.Join(d.cfg.RunDir, controlSock))
	_ = os.Remove(filepath.Join(d.cfg.RunDir, pidFile))
	d.lock.Close()
	d.cores.Restore()
	d.log.Info("deskd stopped")
	return runErr
}

func (d *Daemon) closeListeners() {
	if d.tcp != nil {
		d.tcp.Close()
	}
	if d.unix != nil {
		d.unix.Close()
	}
	if d.vnc != nil {
		d.vnc.Close()
	}
	if d.ops != nil {
		d.ops.Close()
	}
	if d.debug != nil {
		d.debug.Close()
	}
	if d.lock != nil {
		d.lock.Close()
	}
}

// pprofHandler serves the runtime profiles under /debug/pprof/.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
