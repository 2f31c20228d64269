package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/cubepod/deskd/proc"
)

// settle is how long an idle process is left alone before its RSS is read,
// so start-up garbage has been collected.
const settle = 3 * time.Second

// idleRSS: deskd serve with nothing asked of it but a few page loads,
// against x11vnc + websockify (+ ttyd) idle on an Xvfb (the X server is
// not counted: idle deskd has none at all).
func idleRSS(ctx context.Context, c Config) ([]Figure, string, error) {
	for _, bin := range []string{"Xvfb", "x11vnc", "websockify"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, "", fmt.Errorf("peer needs %s: %w", bin, err)
		}
	}
	var d, p []float64
	for i := range c.Rounds {
		v, err := deskdIdle(ctx, c)
		if err != nil {
			return nil, "", fmt.Errorf("deskd round %d: %w", i, err)
		}
		d = append(d, v/1024)
		w, err := peerIdle(ctx, c)
		if err != nil {
			return nil, "", fmt.Errorf("peer round %d: %w", i, err)
		}
		p = append(p, w/1024)
		fmt.Fprintf(c.Log, "  round %d: deskd %.1f MiB, peer %.1f MiB\n", i, v/1024, w/1024)
	}
	notes := "deskd target: <= 15 MiB"
	if c.TTYD != "" {
		notes += "; peer includes ttyd"
	}
	return []Figure{figure("idle RSS", "MiB", "lower", d, p)}, notes, nil
}

func deskdIdle(ctx context.Context, c Config) (float64, error) {
	dk, err := startDeskd(ctx, c)
	if err != nil {
		return 0, err
	}
	defer dk.stop()
	for _, p := range []string{"/vnc.html", "/terminal/", "/vendor/xterm/lib/xterm.mjs", "/metrics", "/api/desktop/status"} {
		resp, err := http.Get("http://" + dk.addr + p)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
	}
	time.Sleep(settle)
	if pids := proc.LiveGroupMembers(dk.pid); len(pids) != 1 {
		return 0, fmt.Errorf("idle deskd runs %d processes (%v); want itself alone", len(pids), pids)
	}
	return rssKiB(dk.pid), nil
}

func peerIdle(ctx context.Context, c Config) (float64, error) {
	disp := freeDisplay()
	x := group(ctx, "Xvfb", ":"+strconv.Itoa(disp), "-screen", "0", "1280x800x24", "-nolisten", "tcp", "-noreset")
	if err := x.Start(); err != nil {
		return 0, err
	}
	defer func() { killGroup(x.Process.Pid); x.Wait() }()
	if err := waitFile(ctx, fmt.Sprintf("/tmp/.X11-unix/X%d", disp), 10*time.Second); err != nil {
		return 0, err
	}
	vnc, _ := freePort()
	ws, _ := freePort()
	var cmds []*exec.Cmd
	defer func() {
		for _, cmd := range cmds {
			killGroup(cmd.Process.Pid)
			cmd.Wait()
		}
	}()
	start := func(name string, args ...string) error {
		cmd := group(ctx, name, args...)
		if err := cmd.Start(); err != nil {
			return err
		}
		cmds = append(cmds, cmd)
		return nil
	}
	if err := start("x11vnc", "-display", ":"+strconv.Itoa(disp), "-rfbport", strconv.Itoa(vnc), "-localhost",
		"-shared", "-forever", "-nopw", "-quiet"); err != nil {
		return 0, err
	}
	if err := start("websockify", "127.0.0.1:"+strconv.Itoa(ws), "127.0.0.1:"+strconv.Itoa(vnc)); err != nil {
		return 0, err
	}
	if c.TTYD != "" {
		tp, _ := freePort()
		if err := start(c.TTYD, "-i", "lo", "-p", strconv.Itoa(tp), "bash"); err != nil {
			return 0, err
		}
	}
	for _, p := range []int{vnc, ws} {
		if err := waitTCP(ctx, "127.0.0.1:"+strconv.Itoa(p), 20*time.Second); err != nil {
			return 0, err
		}
	}
	time.Sleep(settle)
	var sum float64
	for _, cmd := range cmds {
		for _, pid := range proc.LiveGroupMembers(cmd.Process.Pid) {
			sum += rssKiB(pid)
		}
	}
	return sum, nil
}

func waitFile(ctx context.Context, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear in %s", path, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
