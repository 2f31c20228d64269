package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"github.com/cubepod/deskd/rawconn"
)

// Terminal workloads: 100 MB of output, in long lines and in short ones.
const termBytes = 100_000_000

var termLoads = []struct{ name, cmd string }{
	{"long lines", "yes " + strings.Repeat("x", 199) + " | head -c " + strconv.Itoa(termBytes)},
	{"short lines", "yes | head -c " + strconv.Itoa(termBytes)},
}

// endMark is echoed after a workload; typed as `echo __E""ND__` so the
// echo of the command line itself does not contain it.
const endMark = "__END__"

// terminalScenario: deskd's /terminal/ws against ttyd (TTYD=, or on
// PATH) when there is one, and always against the floor: the same work on
// a PTY read by this process, with no server at all.
func terminalScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	dk, err := startDeskd(ctx, c)
	if err != nil {
		return nil, "", err
	}
	defer dk.stop()
	deskdEP := endpoint{name: "deskd", url: "ws://" + dk.addr + "/terminal/ws", pid: dk.pid}
	var peer *endpoint
	notes := "peer: the raw PTY floor (no ttyd: give TTYD=/path/to/ttyd or put it on PATH)"
	if c.TTYD != "" {
		tt, err := startTTYD(ctx, c.TTYD)
		if err != nil {
			return nil, "", fmt.Errorf("ttyd: %w", err)
		}
		defer tt.stop()
		peer = &endpoint{name: "ttyd", url: "ws://" + tt.addr + "/ws", pid: tt.pid}
		notes = "peer: " + ttydVersion(ctx, c.TTYD) + "; rows marked (floor) are deskd against a raw PTY read in-process, with no server"
	}
	// against adds deskd's samples against the peer's, or against the
	// floor's when there is no peer; with a peer, the floor as info rows.
	var figs []Figure
	against := func(metric, unit, better string, d, p, raw []float64) {
		if peer == nil {
			figs = append(figs, figure(metric, unit, better, d, raw))
			return
		}
		figs = append(figs, figure(metric, unit, better, d, p))
		figs = append(figs, figure(metric+" (floor)", unit, "info", d, raw))
	}
	rounds := max(1, min(c.Rounds, 3)) // 100 MB a round
	for _, load := range termLoads {
		var dt, pt, rt, dc, pc, rc []float64
		for i := range rounds {
			sec, cpu, err := deskdEP.throughput(ctx, load.cmd)
			if err != nil {
				return nil, "", fmt.Errorf("deskd %s: %w", load.name, err)
			}
			dt, dc = append(dt, termBytes/sec/1e6), append(dc, cpu)
			line := fmt.Sprintf("  %s round %d: deskd %.0f MB/s %.2f s CPU", load.name, i, dt[i], dc[i])
			if peer != nil {
				sec, cpu, err = peer.throughput(ctx, load.cmd)
				if err != nil {
					return nil, "", fmt.Errorf("ttyd %s: %w", load.name, err)
				}
				pt, pc = append(pt, termBytes/sec/1e6), append(pc, cpu)
				line += fmt.Sprintf(", ttyd %.0f MB/s %.2f s CPU", pt[i], pc[i])
			}
			sec, cpu, err = rawThroughput(ctx, load.cmd)
			if err != nil {
				return nil, "", fmt.Errorf("raw PTY %s: %w", load.name, err)
			}
			rt, rc = append(rt, termBytes/sec/1e6), append(rc, cpu)
			fmt.Fprintf(c.Log, "%s, floor %.0f MB/s %.2f s CPU\n", line, rt[i], rc[i])
		}
		against("throughput, "+load.name, "MB/s", "higher", dt, pt, rt)
		against("server CPU per 100 MB, "+load.name, "s", "lower", dc, pc, rc)
	}
	// Echo: alternating rounds, each a median of its own.
	var d50, d99, p50, p99, r50, r99 []float64
	for i := range max(3, rounds) {
		a, b, err := deskdEP.echo(ctx, echoKeys)
		if err != nil {
			return nil, "", fmt.Errorf("deskd echo: %w", err)
		}
		d50, d99 = append(d50, a), append(d99, b)
		line := fmt.Sprintf("  echo round %d: deskd p50 %.3f p99 %.3f ms", i, a, b)
		if peer != nil {
			if a, b, err = peer.echo(ctx, echoKeys); err != nil {
				return nil, "", fmt.Errorf("ttyd echo: %w", err)
			}
			p50, p99 = append(p50, a), append(p99, b)
			line += fmt.Sprintf(", ttyd p50 %.3f p99 %.3f ms", a, b)
		}
		if a, b, err = rawEcho(ctx, echoKeys); err != nil {
			return nil, "", fmt.Errorf("raw PTY echo: %w", err)
		}
		r50, r99 = append(r50, a), append(r99, b)
		fmt.Fprintf(c.Log, "%s, floor p50 %.3f p99 %.3f ms\n", line, a, b)
	}
	against("keystroke echo p50", "ms", "lower", d50, p50, r50)
	against("keystroke echo p99", "ms", "lower", d99, p99, r99)

	// Many terminals, each watched twice, all printing.
	dc, err := deskdEP.crowd(ctx, crowdTerms, crowdViewers, crowdRun)
	if err != nil {
		return nil, "", fmt.Errorf("deskd crowd: %w", err)
	}
	fmt.Fprintf(c.Log, "  crowd: deskd %s\n", dc)
	metric := fmt.Sprintf("line latency, %d terminals x %d viewers printing", crowdTerms, crowdViewers)
	if peer == nil {
		figs = append(figs,
			figure(metric+", p50", "ms", "info", []float64{dc.p50}, nil),
			figure(metric+", p99", "ms", "info", []float64{dc.p99}, nil),
			figure("server CPU, "+metric, "% of a core", "info", []float64{dc.cpu}, nil))
		return figs, notes, nil
	}
	// ttyd starts a shell per connection: as many viewers, each on a
	// shell of its own (twice the shells deskd runs, the same bytes to
	// the viewers).
	pc, err := peer.crowd(ctx, crowdTerms*crowdViewers, 1, crowdRun)
	if err != nil {
		return nil, "", fmt.Errorf("ttyd crowd: %w", err)
	}
	fmt.Fprintf(c.Log, "  crowd: ttyd %s\n", pc)
	figs = append(figs,
		figure(metric+", p50", "ms", "lower", []float64{dc.p50}, []float64{pc.p50}),
		figure(metric+", p99", "ms", "lower", []float64{dc.p99}, []float64{pc.p99}),
		figure("server CPU, "+metric, "% of a core", "lower", []float64{dc.cpu}, []float64{pc.cpu}))
	notes += fmt.Sprintf("; line latency: %d shells each printing a timestamped line every %v, watched by %d viewers each (ttyd, which starts a shell per connection: %d shells, one viewer each)",
		crowdTerms, crowdEvery, crowdViewers, crowdTerms*crowdViewers)
	return figs, notes, nil
}

// ttydVersion is what bin --version says (and its path).
func ttydVersion(ctx context.Context, bin string) string {
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return bin
	}
	return strings.TrimSpace(string(out)) + " (" + bin + ")"
}

// echoKeys is how many keys an echo round types.
const echoKeys = 300

type server struct {
	addr string
	pid  int
	stop func()
	// xauth is deskd's display cookie file: X clients of the bench
	// (the peer on the same display, its own probes) need it.
	xauth string
}

func startDeskd(ctx context.Context, c Config) (*server, error) {
	dir, err := os.MkdirTemp("", "deskd-bench-")
	if err != nil {
		return nil, err
	}
	port, _ := freePort()
	cdpPort, _ := freePort()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	// Its own pages may open WebSockets through the bench's slow link
	// (another port, so another Host).
	cmd := group(ctx, c.Deskd, "serve", "--run-dir", dir, "--listen", addr, "--cdp-port", strconv.Itoa(cdpPort), "--shell", "/bin/bash",
		"--allow-origin", "http://"+addr)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { killGroup(cmd.Process.Pid); cmd.Wait(); os.RemoveAll(dir) }
	if err := waitHTTP(ctx, "http://"+addr+"/healthz", 20*time.Second); err != nil {
		stop()
		return nil, err
	}
	return &server{addr: addr, pid: cmd.Process.Pid, stop: stop, xauth: filepath.Join(dir, "xauthority")}, nil
}

func startTTYD(ctx context.Context, bin string) (*server, error) {
	port, _ := freePort()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	cmd := group(ctx, bin, "-i", "lo", "-p", strconv.Itoa(port), "-W", "bash", "--norc")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() { killGroup(cmd.Process.Pid); cmd.Wait() }
	if err := waitTCP(ctx, addr, 20*time.Second); err != nil {
		stop()
		return nil, err
	}
	return &server{addr: addr, pid: cmd.Process.Pid, stop: stop}, nil
}

// endpoint is a ttyd-protocol server; the client below speaks to deskd
// and to ttyd alike.
type endpoint struct {
	name, url string
	pid       int
}

type ttyClient struct{ c *websocket.Conn }

func (e endpoint) dial(ctx context.Context) (*ttyClient, error) {
	c, _, err := websocket.Dial(ctx, e.url, &websocket.DialOptions{Subprotocols: []string{"tty"}})
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(16 << 20)
	tc := &ttyClient{c: c}
	if err := tc.send(ctx, []byte(`{"AuthToken":"","columns":200,"rows":50}`)); err != nil {
		c.CloseNow()
		return nil, err
	}
	return tc, nil
}

// dialSession opens a terminal viewer on session id ("" starts a new
// one) at base (…/terminal/ws) and returns the session's id, which deskd
// announces in its preferences message.
func dialSession(ctx context.Context, base, id string) (*ttyClient, string, error) {
	tc, err := endpoint{url: base + "?session=" + url.QueryEscape(id)}.dial(ctx)
	if err != nil {
		return nil, "", err
	}
	for {
		_, b, err := tc.c.Read(ctx)
		if err != nil {
			tc.c.CloseNow()
			return nil, "", err
		}
		if len(b) > 0 && b[0] == '2' {
			var p struct{ Session string }
			if err := json.Unmarshal(b[1:], &p); err != nil || p.Session == "" {
				tc.c.CloseNow()
				return nil, "", fmt.Errorf("preferences %q carry no session (%v)", b, err)
			}
			return tc, p.Session, nil
		}
	}
}

func (tc *ttyClient) send(ctx context.Context, b []byte) error {
	return tc.c.Write(ctx, websocket.MessageBinary, b)
}

func (tc *ttyClient) input(ctx context.Context, s string) error {
	return tc.send(ctx, append([]byte{'0'}, s...))
}

// exit ends the shell (a running program is interrupted first) and
// waits until the server closes the connection: deskd's sessions outlive
// their viewers, and the next measurement must not find them running.
func (tc *ttyClient) exit(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	typed := make(chan struct{})
	go func() { // ends with ctx, which ends when the connection closes
		defer close(typed)
		for {
			// An interrupt flushes what is typed after it: exit goes later.
			if tc.input(ctx, "\x03") != nil {
				return
			}
			sleep(ctx, 300*time.Millisecond)
			if tc.input(ctx, "exit\r") != nil {
				return
			}
			sleep(ctx, 3*time.Second) // not gone yet: again
			if ctx.Err() != nil {
				return
			}
		}
	}()
	defer func() { cancel(); <-typed }()
	var last []byte
	for {
		_, b, err := tc.c.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("the shell did not exit; its last output: %q", last)
			}
			return nil // closed: the shell is gone
		}
		last = append(last, b...)
		last = last[max(0, len(last)-200):]
	}
}

// readUntil reads output until want has been seen (it may span messages).
func (tc *ttyClient) readUntil(ctx context.Context, want string) error {
	tail := []byte{}
	for {
		_, b, err := tc.c.Read(ctx)
		if err != nil {
			return err
		}
		if len(b) == 0 || b[0] != '0' {
			continue
		}
		tail = append(tail, b[1:]...)
		if bytes.Contains(tail, []byte(want)) {
			return nil
		}
		if len(tail) > len(want) {
			tail = append(tail[:0], tail[len(tail)-len(want):]...)
		}
	}
}

// throughput runs cmd and returns the seconds until its end mark
// arrived and the server's CPU seconds over that time.
func (e endpoint) throughput(ctx context.Context, cmd string) (float64, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	tc, err := e.dial(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tc.c.CloseNow()
	if err := tc.input(ctx, "stty -echo; echo __RE\"\"ADY__\r"); err != nil {
		return 0, 0, err
	}
	if err := tc.readUntil(ctx, "__READY__"); err != nil {
		return 0, 0, err
	}
	cpu0 := cpuOf(e.pid)
	t0 := time.Now()
	if err := tc.input(ctx, cmd+"; echo __E\"\"ND__\r"); err != nil {
		return 0, 0, err
	}
	if err := tc.readUntil(ctx, endMark); err != nil {
		return 0, 0, err
	}
	sec := time.Since(t0).Seconds()
	return sec, (cpuOf(e.pid) - cpu0).Seconds(), tc.exit(ctx)
}

// echo types n characters one at a time and times each one's echo.
func (e endpoint) echo(ctx context.Context, n int) (p50, p99 float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tc, err := e.dial(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tc.c.CloseNow()
	// Typed ahead of the shell, the first keys would go to readline and
	// never be echoed: wait until the shell runs the command line. From
	// then on the tty echoes (cooked mode), whether cat runs yet or not.
	if err := tc.input(ctx, "echo __RE\"\"ADY__; cat >/dev/null\r"); err != nil {
		return 0, 0, err
	}
	if err := tc.readUntil(ctx, "__READY__"); err != nil {
		return 0, 0, err
	}
	p50, p99, err = timeEchoes(n, func(ch string) error {
		if err := tc.input(ctx, ch); err != nil {
			return err
		}
		return tc.readUntil(ctx, ch)
	})
	if err != nil {
		return 0, 0, err
	}
	return p50, p99, tc.exit(ctx)
}

// timeEchoes sends n distinct printable characters (a line of them, then
// a newline) and returns the echo latency percentiles in ms.
func timeEchoes(n int, roundTrip func(string) error) (float64, float64, error) {
	var ms []float64
	for i := range n {
		ch := string(rune('a' + i%26))
		if i%26 == 25 {
			ch = "\r"
		}
		t0 := time.Now()
		if err := roundTrip(ch); err != nil {
			return 0, 0, err
		}
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
	}
	slices.Sort(ms)
	p50, p99 := percentiles(ms)
	return round(p50, 3), round(p99, 3), nil
}

// rawThroughput is the ceiling: the same command on a PTY read directly.
func rawThroughput(ctx context.Context, cmd string) (float64, float64, error) {
	ptmx, c, err := rawShell(cmd + "; echo __E\"\"ND__")
	if err != nil {
		return 0, 0, err
	}
	defer func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); ptmx.Close(); c.Wait() }()
	var ru0 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	t0 := time.Now()
	buf := make([]byte, 64<<10)
	tail := []byte{}
	for !bytes.Contains(tail, []byte(endMark)) {
		n, err := ptmx.Read(buf)
		if err != nil {
			return 0, 0, fmt.Errorf("raw pty: %w", err)
		}
		tail = append(tail, buf[:n]...)
		if len(tail) > 64 {
			tail = append(tail[:0], tail[len(tail)-64:]...)
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
	}
	sec := time.Since(t0).Seconds()
	var ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	return sec, rusageSec(ru1) - rusageSec(ru0), nil
}

func rawEcho(ctx context.Context, n int) (float64, float64, error) {
	ptmx, c, err := rawShell("cat >/dev/null")
	if err != nil {
		return 0, 0, err
	}
	defer func() { syscall.Kill(-c.Process.Pid, syscall.SIGKILL); ptmx.Close(); c.Wait() }()
	time.Sleep(200 * time.Millisecond)
	buf := make([]byte, 4096)
	return timeEchoes(n, func(ch string) error {
		if _, err := ptmx.Write([]byte(ch)); err != nil {
			return err
		}
		for {
			k, err := ptmx.Read(buf)
			if err != nil {
				return err
			}
			if bytes.Contains(buf[:k], []byte(ch)) || ctx.Err() != nil {
				return ctx.Err()
			}
		}
	})
}

// rawShell runs cmd on a PTY whose master this process reads as deskd
// does (in the poller, raw system calls): pty.Start leaves it blocking,
// and a Go program reading a blocking PTY pays for a thread handed off at
// each read (four times deskd's CPU on short lines): not a floor.
func rawShell(cmd string) (*rawconn.File, *exec.Cmd, error) {
	c := exec.Command("/bin/bash", "--norc", "-c", cmd)
	c.Env = append(os.Environ(), "TERM=xterm-256color")
	m, err := pty.StartWithSize(c, &pty.Winsize{Cols: 200, Rows: 50})
	if err != nil {
		return nil, nil, err
	}
	nb, err := rawconn.Nonblocking(m)
	if err == nil {
		var f *rawconn.File
		if f, err = rawconn.NewFile(nb); err == nil {
			return f, c, nil
		}
		nb.Close()
	}
	syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	c.Wait()
	return nil, nil, err
}

func rusageSec(r syscall.Rusage) float64 {
	return float64(r.Utime.Sec+r.Stime.Sec) + float64(r.Utime.Usec+r.Stime.Usec)/1e6
}
