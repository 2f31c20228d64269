package main

import (
	"bytes"
	"context"
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
	"syscall"
	"time"

	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/proc"
)

// Exit codes of start, status and stop.
const (
	exitOK      = 0
	exitFailed  = 1
	exitStopped = 3 // status: not running (as LSB init scripts say)
)

// client talks to the daemon's control socket.
type client struct {
	http *http.Client
}

func newClient(runDir string) *client {
	sock := filepath.Join(runDir, controlSock)
	return &client{http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}}
}

// call sends method path to the daemon and decodes a status answer.
func (c *client) call(ctx context.Context, method, path string, body any) (desktop.Status, int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return desktop.Status{}, 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://deskd"+path, rd)
	if err != nil {
		return desktop.Status{}, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return desktop.Status{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return desktop.Status{}, resp.StatusCode, err
	}
	var st desktop.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return desktop.Status{}, resp.StatusCode, fmt.Errorf("daemon answered %s: %q", resp.Status, b)
	}
	return st, resp.StatusCode, nil
}

// alive reports whether a daemon answers on the control socket.
func (c *client) alive(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://deskd/healthz", nil)
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// print writes v as one line of JSON.
func (m *Main) print(v any) {
	enc := json.NewEncoder(m.Stdout)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (m *Main) fail(err error) int {
	m.print(map[string]string{"status": "error", "error": err.Error()})
	return exitFailed
}

func (m *Main) cliStart(ctx context.Context, cfg *Config) int {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := os.MkdirAll(filepath.Join(cfg.RunDir, "logs"), 0o755); err != nil {
		return m.fail(fmt.Errorf("run dir: %w", err))
	}
	// One start at a time: the first one may have to launch the daemon,
	// and the others must find it rather than launch their own.
	l, err := lock(ctx, filepath.Join(cfg.RunDir, cliLock))
	if err != nil {
		return m.fail(err)
	}
	defer l.Close()
	c := newClient(cfg.RunDir)
	if !c.alive(ctx) {
		if err := spawnDaemon(ctx, cfg, c); err != nil {
			return m.fail(err)
		}
	}
	var o desktop.StartOptions
	if cfg.set["resolution"] || os.Getenv(envName("resolution")) != "" {
		r := cfg.Resolution
		o.Resolution = &r
	}
	if cfg.set["url"] || os.Getenv(envName("url")) != "" {
		o.URL = cfg.URL
	}
	if cfg.set["a11y"] || os.Getenv(envName("a11y")) != "" {
		o.A11y = cfg.A11y
	}
	st, _, err := c.call(ctx, http.MethodPost, "/api/desktop/start", o)
	if err != nil {
		return m.fail(err)
	}
	m.print(st)
	if st.Status != desktop.StatusRunning {
		return exitFailed
	}
	return exitOK
}

func (m *Main) cliStatus(ctx context.Context, cfg *Config) int {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := newClient(cfg.RunDir)
	st, _, err := c.call(ctx, http.MethodGet, "/api/desktop/status", nil)
	if err != nil {
		if daemonAbsent(err) {
			m.print(map[string]any{"status": desktop.StatusStopped, "daemon": "not running"})
			return exitStopped
		}
		return m.fail(err)
	}
	m.print(st)
	switch st.Status {
	case desktop.StatusRunning:
		return exitOK
	case desktop.StatusStopped:
		return exitStopped
	}
	return exitFailed
}

// cliHealth asks the daemon whether it serves (its /healthz, over the
// control socket): the image's HEALTHCHECK. The desktop starts lazily, so
// a stopped desktop is healthy.
func (m *Main) cliHealth(ctx context.Context, cfg *Config) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !newClient(cfg.RunDir).alive(ctx) {
		return m.fail(errors.New("the daemon does not answer on " + filepath.Join(cfg.RunDir, controlSock)))
	}
	m.print(map[string]string{"status": "ok"})
	return exitOK
}

func (m *Main) cliStop(ctx context.Context, cfg *Config) int {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	l, err := lock(ctx, filepath.Join(cfg.RunDir, cliLock))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			m.print(map[string]any{"status": desktop.StatusStopped, "daemon": "not running"})
			return exitOK
		}
		return m.fail(err)
	}
	defer l.Close()
	c := newClient(cfg.RunDir)
	st, _, err := c.call(ctx, http.MethodPost, "/api/desktop/stop", nil)
	if err != nil {
		if daemonAbsent(err) {
			m.print(map[string]any{"status": desktop.StatusStopped, "daemon": "not running"})
			return exitOK
		}
		return m.fail(err)
	}
	if cfg.StopDaemon {
		if err := stopDaemon(ctx, cfg.RunDir); err != nil {
			return m.fail(err)
		}
		m.print(map[string]any{"status": st.Status, "daemon": "stopped"})
	} else {
		m.print(st)
	}
	if st.Status != desktop.StatusStopped {
		return exitFailed
	}
	return exitOK
}

func daemonAbsent(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// spawnDaemon starts `deskd serve` detached (own session, output to
// logs/deskd.log) and waits until its control socket answers.
func spawnDaemon(ctx context.Context, cfg *Config, c *client) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find deskd binary: %w", err)
	}
	logPath := filepath.Join(cfg.RunDir, "logs", daemonLog)
	out, err := openNoFollow(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND)
	if err != nil {
		return fmt.Errorf("daemon log: %w", err)
	}
	defer out.Close()
	// The secrets go through a pipe the daemon inherits as fd 3: not in
	// its argv or environment, which other local users may read.
	sr, sw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("secrets pipe: %w", err)
	}
	defer sr.Close()
	b, _ := json.Marshal(secrets{PanelSecret: cfg.PanelSecret, VNCPassword: cfg.VNCPassword, ProxyCredentials: cfg.ProxyCredentials})
	_, err = sw.Write(b) // a few KiB at most: the pipe buffer holds it
	sw.Close()
	if err != nil {
		return fmt.Errorf("secrets pipe: %w", err)
	}
	cmd := exec.Command(exe, append(cfg.serveArgs(), "--secrets-fd=3")...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = os.Environ() // the secret variables were removed when the flags were read
	cmd.ExtraFiles = []*os.File{sr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start daemon: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps the daemon if it dies while we wait
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for !c.alive(ctx) {
		t := time.NewTimer(5 * time.Millisecond) // the socket appears within milliseconds
		select {
		case err := <-exited:
			t.Stop()
			return fmt.Errorf("daemon exited at start (%v): %s", err, logTail(logPath, 5))
		case <-ctx.Done():
			t.Stop()
			_ = cmd.Process.Kill()
			return fmt.Errorf("daemon not ready: %w: %s", ctx.Err(), logTail(logPath, 5))
		case <-t.C:
		}
	}
	return nil
}

// stopDaemon sends SIGTERM to the daemon and waits until it released the
// run dir's lifetime lock.
func stopDaemon(ctx context.Context, runDir string) error {
	pid, err := daemonPid(runDir)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal daemon: %w", err)
	}
	f, err := lock(ctx, filepath.Join(runDir, daemonLock))
	if err != nil {
		return fmt.Errorf("daemon did not exit: %w", err)
	}
	f.Close()
	// The lock is released just before the process exits; wait for the
	// exit itself (it is not our child: there is no wait(2) to call).
	for proc.PidAlive(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("daemon (pid %d) released its lock but did not exit: %w", pid, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// daemonPid is the daemon's pid as the kernel tells it: the peer of the
// control socket (SO_PEERCRED), which a file in the run dir cannot fake;
// the pid file only when the socket does not answer.
func daemonPid(runDir string) (int, error) {
	if c, err := net.DialTimeout("unix", filepath.Join(runDir, controlSock), 2*time.Second); err == nil {
		defer c.Close()
		if raw, err := c.(*net.UnixConn).SyscallConn(); err == nil {
			var cred *syscall.Ucred
			var uerr error
			if err := raw.Control(func(fd uintptr) {
				cred, uerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
			}); err == nil && uerr == nil && cred.Pid > 1 {
				return int(cred.Pid), nil
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(runDir, pidFile))
	if err != nil {
		return 0, fmt.Errorf("daemon pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("daemon pid file holds %q", b)
	}
	return pid, nil
}

func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
