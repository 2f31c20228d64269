package x11

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cubepod/deskd/proc"
	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// XvfbConfig configures an Xvfb child.
type XvfbConfig struct {
	Path       string // default "Xvfb"
	Resolution Resolution
	// MaxResolution is the largest size viewers may resize the screen to
	// (RANDR cannot grow an Xvfb screen past its -screen size). Xvfb
	// starts at it and is shrunk to Resolution at once. Zero: Resolution.
	MaxResolution Resolution
	LogPath       string
	// AuthFile, when set, makes Xvfb admit only clients that present its
	// cookie (-auth; see WriteAuthority). deskd's own connections find it
	// through $XAUTHORITY.
	AuthFile string
	// Display pins the display number (e.g. 99 for ":99", as CEP images
	// use); 0 lets Xvfb choose a free one.
	Display    int
	Credential *syscall.Credential
	// ReadyTimeout bounds the wait for the display (default 15 s).
	ReadyTimeout time.Duration
}

// MaxDisplay is the largest display number --display accepts.
const MaxDisplay = 65535 - 6000

// Xvfb is a running X server.
type Xvfb struct {
	*proc.Process
	Display    string // ":N"
	Resolution Resolution
}

// StartXvfb starts Xvfb on cfg.Display, or on a display it chooses itself
// (-displayfd, so two servers never race for one number), and returns once
// a client can connect.
func StartXvfb(ctx context.Context, sp *proc.Spawner, cfg XvfbConfig) (*Xvfb, error) {
	if cfg.Path == "" {
		cfg.Path = "Xvfb"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 15 * time.Second
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("xvfb: displayfd pipe: %w", err)
	}
	defer r.Close()
	top := cfg.Resolution
	top.Width, top.Height = max(top.Width, cfg.MaxResolution.Width), max(top.Height, cfg.MaxResolution.Height)
	var args []string
	if cfg.Display > 0 {
		if cfg.Display > MaxDisplay {
			return nil, fmt.Errorf("xvfb: display :%d out of range (1-%d)", cfg.Display, MaxDisplay)
		}
		// Xvfb still reports on -displayfd once it is ready.
		args = append(args, ":"+strconv.Itoa(cfg.Display))
	}
	args = append(args,
		"-displayfd", "3",
		"-screen", "0", top.String(),
		// Without -noreset the server resets when its last client leaves,
		// dropping RANDR modes and the keyboard mapping we install.
		"-noreset",
		"-nolisten", "tcp",
		"+extension", "RANDR",
		"+extension", "DAMAGE",
		"+extension", "XFIXES",
		"+extension", "XTEST",
		"+extension", "MIT-SHM",
		"-dpi", "96",
	)
	if cfg.AuthFile != "" {
		args = append(args, "-auth", cfg.AuthFile)
	}
	p, err := sp.Start(proc.Spec{
		Name: "xvfb", Path: cfg.Path, Args: args, LogPath: cfg.LogPath,
		Credential: cfg.Credential, ExtraFiles: []*os.File{w},
	})
	w.Close() // the child holds its copy
	if err != nil {
		return nil, err
	}
	x := &Xvfb{Process: p, Resolution: cfg.Resolution}
	fail := func(err error) (*Xvfb, error) {
		_ = p.Stop(context.Background(), 2*time.Second)
		return nil, err
	}

	rctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() { // ends when Xvfb writes the number or the pipe closes
		s, err := bufio.NewReader(r).ReadString('\n')
		got <- line{s, err}
	}()
	var l line
	select {
	case l = <-got:
	case <-p.Done():
		l = <-got
	case <-rctx.Done():
		_ = p.Stop(context.Background(), 2*time.Second)
		<-got // the pipe closes with the child
		return nil, fmt.Errorf("xvfb: no display within %s: %w; output: %q", cfg.ReadyTimeout, rctx.Err(), p.Tail())
	}
	n, err := strconv.Atoi(strings.TrimSpace(l.s))
	if err != nil || n < 0 {
		// The pipe closing usually means the child is exiting: prefer
		// its exit status and output over "no number".
		t := time.NewTimer(2 * time.Second)
		defer t.Stop()
		select {
		case <-p.Done():
			return fail(p.ExitError())
		case <-t.C:
		}
		return fail(fmt.Errorf("xvfb: bad display number %q (%v); output: %q", l.s, l.err, p.Tail()))
	}
	x.Display = ":" + strconv.Itoa(n)
	if err := waitConnect(rctx, x.Display, p); err != nil {
		return fail(err)
	}
	if top != cfg.Resolution {
		if err := shrink(x.Display, cfg.Resolution); err != nil {
			return fail(err)
		}
	}
	return x, nil
}

// shrink sets a fresh display to its starting size.
func shrink(display string, r Resolution) error {
	c, err := xgb.NewConnDisplay(display)
	if err != nil {
		return fmt.Errorf("xvfb: connect %s: %w", display, err)
	}
	defer c.Close()
	if err := initRandR(c); err != nil {
		return err
	}
	root := xproto.Setup(c).DefaultScreen(c).Root
	if _, _, err := resize(c, root, r.Width, r.Height); err != nil {
		return fmt.Errorf("xvfb: starting size %dx%d: %w", r.Width, r.Height, err)
	}
	return nil
}

// waitConnect proves the display accepts X clients. Xvfb writes the
// display number once it listens, so the first attempt normally succeeds;
// the retry covers a socket that is still being set up.
func waitConnect(ctx context.Context, display string, p *proc.Process) error {
	backoff := 5 * time.Millisecond
	for {
		c, err := xgb.NewConnDisplay(display)
		if err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return p.ExitError()
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("xvfb: connect %s: %w (last error: %v)", display, ctx.Err(), err)
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}
