// Package a11y lists what is on the screen the way assistive technology
// sees it: AT-SPI over D-Bus (github.com/godbus/dbus/v5, pure Go). It
// runs the accessibility bus the desktop's applications register on, and
// walks their trees into a bounded snapshot of elements (role, name,
// value, states, bounds in screen pixels) with ids that actions can
// target.
package a11y

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cubepod/deskd/proc"
)

// Chromium's renderer accessibility modes (--force-renderer-accessibility=MODE),
// and Off: no accessibility bus and no tree exported.
const (
	Off          = "off"
	FormControls = "form-controls"
	Basic        = "basic"
	Complete     = "complete"
)

// CheckMode accepts "" (the default), Off and Chromium's modes.
func CheckMode(m string) error {
	switch m {
	case "", Off, Basic, FormControls, Complete:
		return nil
	}
	return fmt.Errorf("a11y mode %.40q: want off, basic, form-controls or complete", m)
}

// BusConfig configures the accessibility bus.
type BusConfig struct {
	// Path is dbus-daemon (default: found on PATH); ConfigFile is
	// at-spi2-core's bus configuration (default DefaultConfigFile).
	Path, ConfigFile string
	// Dir holds the bus socket; it is created (0700, owned by Credential)
	// if missing. A unix socket path has at most 107 bytes.
	Dir        string
	Credential *syscall.Credential
	// Env is added to the daemon's environment (DISPLAY, HOME, ...): the
	// registry daemon it starts on demand inherits it.
	Env     []string
	LogPath string
	// ReadyTimeout bounds the wait for the bus address (default 10 s).
	ReadyTimeout time.Duration
}

// DefaultConfigFile is where Debian's at-spi2-core puts the bus
// configuration.
const DefaultConfigFile = "/usr/share/defaults/at-spi2/accessibility.conf"

// Bus is a running accessibility bus.
type Bus struct {
	*proc.Process
	// Address is the bus's D-Bus address (unix:path=...), for
	// AT_SPI_BUS_ADDRESS and Dial.
	Address string
}

// maxSocketPath is sun_path's size less its terminating NUL.
const maxSocketPath = 107

// StartBus starts dbus-daemon with at-spi2-core's configuration on a
// socket in cfg.Dir and returns once it listens. The daemon starts the
// AT-SPI registry itself when the first client asks for it.
//
// Nothing here touches a session bus: the daemon and what it starts get
// DBUS_SESSION_BUS_ADDRESS=disabled: (else the registry looked for one,
// and the first query hung for minutes), and AT_SPI_BUS_ADDRESS names
// this bus.
func StartBus(ctx context.Context, sp *proc.Spawner, cfg BusConfig) (*Bus, error) {
	if cfg.Path == "" {
		cfg.Path = "dbus-daemon"
	}
	if cfg.ConfigFile == "" {
		cfg.ConfigFile = DefaultConfigFile
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	if _, err := os.Stat(cfg.ConfigFile); err != nil {
		return nil, fmt.Errorf("a11y: bus configuration (is at-spi2-core installed?): %w", err)
	}
	sock := filepath.Join(cfg.Dir, "bus")
	if len(sock) > maxSocketPath {
		return nil, fmt.Errorf("a11y: socket path %s is longer than %d bytes", sock, maxSocketPath)
	}
	if err := socketDir(cfg.Dir, cfg.Credential); err != nil {
		return nil, err
	}
	// A socket left by a daemon that died would make the new one fail.
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("a11y: stale socket: %w", err)
	}
	addr := "unix:path=" + sock
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("a11y: address pipe: %w", err)
	}
	defer r.Close()
	env := append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8",
		"DBUS_SESSION_BUS_ADDRESS=disabled:", "AT_SPI_BUS_ADDRESS=" + addr,
	}, cfg.Env...)
	p, err := sp.Start(proc.Spec{
		Name: "a11y", Path: cfg.Path, Env: env, Dir: cfg.Dir, LogPath: cfg.LogPath, Credential: cfg.Credential,
		Args: []string{
			"--config-file=" + cfg.ConfigFile, "--address=" + addr,
			"--nofork", "--nopidfile", "--print-address=3",
		},
		ExtraFiles: []*os.File{w},
		// The registry daemon it starts shares its output: it goes too.
		StopGroup: true,
	})
	w.Close() // the child holds its copy
	if err != nil {
		return nil, fmt.Errorf("a11y: %w", err)
	}
	fail := func(err error) (*Bus, error) {
		_ = p.Stop(context.Background(), 2*time.Second)
		return nil, err
	}
	// The daemon prints its address once it listens.
	got := make(chan string, 1)
	go func() { // ends when the daemon prints or the pipe closes
		s, _ := bufio.NewReader(r).ReadString('\n')
		got <- s
	}()
	rctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	var line string
	select {
	case line = <-got:
	case <-rctx.Done():
		_ = p.Stop(context.Background(), 2*time.Second)
		<-got
		return nil, fmt.Errorf("a11y: bus not ready within %s: %w; output: %q", cfg.ReadyTimeout, rctx.Err(), p.Tail())
	}
	if !strings.HasPrefix(line, addr) {
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		select {
		case <-p.Done():
			return fail(fmt.Errorf("a11y: bus: %w", p.ExitError()))
		case <-t.C:
		}
		return fail(fmt.Errorf("a11y: bus printed %q, not its address; output: %q", line, p.Tail()))
	}
	return &Bus{Process: p, Address: addr}, nil
}

// socketDir makes dir, the user's alone, and refuses anything else at
// that name (a link, a file).
func socketDir(dir string, cred *syscall.Credential) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("a11y: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("a11y: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("a11y: %s is not a directory", dir)
	}
	if cred != nil {
		if err := os.Lchown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("a11y: %w", err)
		}
	}
	return nil
}
