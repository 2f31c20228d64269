package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cubepod/deskd/cdp"
)

// findChromium is c.Chromium, or the first Chromium on PATH.
func findChromium(c Config) (string, error) {
	if c.Chromium != "" {
		return c.Chromium, nil
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no chromium installed")
}

// startTime: from nothing running to desktop and CDP ready. deskd: the
// `deskd start` command, which also launches the daemon. Peer: a shell
// script that starts Xvfb, x11vnc, websockify and Chromium and returns
// when the VNC WebSocket port and CDP answer. Neither runs a window
// manager; both run Chromium with the same flags.
func startTime(ctx context.Context, c Config) ([]Figure, string, error) {
	chromium, err := findChromium(c)
	if err != nil {
		return nil, "", err
	}
	var d, p []float64
	for i := range c.Rounds {
		v, err := deskdStart(ctx, c, chromium)
		if err != nil {
			return nil, "", fmt.Errorf("deskd round %d: %w", i, err)
		}
		w, err := peerStart(ctx, chromium)
		if err != nil {
			return nil, "", fmt.Errorf("peer round %d: %w", i, err)
		}
		d, p = append(d, ms(v)), append(p, ms(w))
		fmt.Fprintf(c.Log, "  round %d: deskd %v, peer %v\n", i, v.Round(time.Millisecond), w.Round(time.Millisecond))
	}
	return []Figure{figure("start to desktop+CDP ready", "ms", "lower", d, p)}, "", nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func deskdStart(ctx context.Context, c Config, chromium string) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "deskd-bench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	port, _ := freePort()
	cdpPort, _ := freePort()
	flags := []string{"--run-dir", dir, "--listen", "127.0.0.1:" + strconv.Itoa(port), "--cdp-port", strconv.Itoa(cdpPort),
		"--wm", "none", "--chromium", chromium, "--resolution", "1280x800x24"}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.Deskd, append([]string{"start"}, flags...)...)
	cmd.Stdout = &out
	t0 := time.Now()
	err = cmd.Run()
	dt := time.Since(t0)
	defer exec.Command(c.Deskd, append([]string{"stop", "--daemon"}, flags...)...).Run()
	if err != nil {
		return 0, fmt.Errorf("deskd start: %v: %s", err, out.String())
	}
	var st struct{ Status string }
	if json.Unmarshal(out.Bytes(), &st); st.Status != "running" {
		return 0, fmt.Errorf("deskd start printed %s", out.String())
	}
	return dt, nil
}

// peerScript is what a sandbox image runs today to bring its desktop up.
const peerScript = `set -e
Xvfb :$DISP -screen 0 1280x800x24 -nolisten tcp -noreset >"$DIR/xvfb.log" 2>&1 &
until xdpyinfo -display :$DISP >/dev/null 2>&1; do sleep 0.01; done
x11vnc -display :$DISP -rfbport $VNC -localhost -shared -forever -nopw -quiet >"$DIR/x11vnc.log" 2>&1 &
websockify 127.0.0.1:$WS 127.0.0.1:$VNC >"$DIR/websockify.log" 2>&1 &
DISPLAY=:$DISP "$CHROMIUM" $CHROMIUM_FLAGS >"$DIR/chromium.log" 2>&1 &
until curl -sf http://127.0.0.1:$CDP/json/version >/dev/null; do sleep 0.01; done
until (exec 3<>/dev/tcp/127.0.0.1/$WS) 2>/dev/null; do sleep 0.01; done
until (exec 3<>/dev/tcp/127.0.0.1/$VNC) 2>/dev/null; do sleep 0.01; done
`

func peerStart(ctx context.Context, chromium string) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "deskd-bench-peer-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	vnc, _ := freePort()
	ws, _ := freePort()
	cdpPort, _ := freePort()
	flags := cdp.Flags(cdp.ChromiumConfig{ProfileDir: filepath.Join(dir, "profile"), Port: cdpPort,
		Width: 1280, Height: 800, NoSandbox: os.Geteuid() == 0})
	cmd := group(ctx, "bash", "-c", peerScript)
	cmd.Env = append(os.Environ(), "DISP="+strconv.Itoa(freeDisplay()), "DIR="+dir, "VNC="+strconv.Itoa(vnc),
		"WS="+strconv.Itoa(ws), "CDP="+strconv.Itoa(cdpPort), "CHROMIUM="+chromium, "CHROMIUM_FLAGS="+strings.Join(flags, " "))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pgid := cmd.Process.Pid
	defer killGroup(pgid)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return 0, fmt.Errorf("peer script: %v: %s", err, out.String())
		}
	case <-rctx.Done():
		return 0, fmt.Errorf("peer script not ready in a minute")
	}
	return time.Since(t0), nil
}
