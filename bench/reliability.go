package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// ReliabilityReport is reliability.json: deskd under faults, load and
// hostile input. Each part lists the expectations it found broken in
// Problems; an empty list everywhere is the pass mark.
type ReliabilityReport struct {
	Machine  Machine        `json:"machine"`
	Started  time.Time      `json:"started"`
	Duration string         `json:"duration"`
	Faults   *FaultReport   `json:"faults,omitempty"`
	Load     *LoadReport    `json:"load,omitempty"`
	Hostile  *HostileReport `json:"hostile,omitempty"`
}

// ReliabilityConfig says what the reliability suites run.
type ReliabilityConfig struct {
	Deskd string // deskd binary
	Log   io.Writer
	// Viewers is the number of RFB viewers watching through the faults.
	Viewers int
	// Load sizes the load test; zero values take the figures
	// (50 viewers, 16 terminals with 2 viewers each, 20 CDP clients, 60 s).
	Load LoadConfig
}

// Reliability runs the three suites and returns their report; err says
// which could not run at all (a suite that ran reports its problems).
func Reliability(ctx context.Context, c ReliabilityConfig) (ReliabilityReport, error) {
	if c.Log == nil {
		c.Log = io.Discard
	}
	r := ReliabilityReport{Machine: machine(), Started: time.Now().UTC()}
	var errs []string
	fmt.Fprintln(c.Log, "== faults")
	f, err := Faults(ctx, c)
	if err != nil {
		errs = append(errs, "faults: "+err.Error())
	}
	r.Faults = f
	fmt.Fprintln(c.Log, "== load")
	l, err := Load(ctx, c.Deskd, c.Load, c.Log)
	if err != nil {
		errs = append(errs, "load: "+err.Error())
	}
	r.Load = l
	fmt.Fprintln(c.Log, "== hostile")
	h, err := Hostile(ctx, c.Deskd, c.Log)
	if err != nil {
		errs = append(errs, "hostile: "+err.Error())
	}
	r.Hostile = h
	r.Duration = time.Since(r.Started).Round(time.Second).String()
	if len(errs) > 0 {
		return r, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return r, nil
}

// Problems lists every broken expectation of the report.
func (r ReliabilityReport) Problems() []string {
	var out []string
	if r.Faults != nil {
		out = append(out, r.Faults.Problems...)
	}
	if r.Load != nil {
		out = append(out, r.Load.Problems...)
	}
	if r.Hostile != nil {
		out = append(out, r.Hostile.Problems...)
	}
	return out
}

// Markdown renders the report's tables for README.
func (r ReliabilityReport) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s (%d cores, %s).\n\n", r.Started.Format("2006-01-02"), r.Machine.CPU, r.Machine.Cores, r.Machine.OS)
	if f := r.Faults; f != nil {
		fmt.Fprintf(&b, "Faults (kill -9 while %d viewers, a CDP agent and a terminal are connected):\n\n", f.Viewers)
		b.WriteString("| killed | back in | viewers dropped | viewer pixels again (max) | agent told | agent's next connection | terminal | left behind |\n|---|---:|---:|---:|---|---|---|---|\n")
		for _, x := range f.Faults {
			left := "nothing"
			if len(x.Leftovers) > 0 {
				left = strings.Join(x.Leftovers, ", ")
			}
			px := "stayed connected"
			if x.ViewersDropped > 0 {
				px = fmt.Sprintf("%.0f ms", x.ViewerPixelsMaxMs)
			}
			fmt.Fprintf(&b, "| %s | %.0f ms | %d | %s | %s | %s | %s | %s |\n", x.Kill, x.RecoveredMs, x.ViewersDropped, px, x.AgentClose, okText(x.AgentNextOK), x.Terminal, left)
		}
		fmt.Fprintf(&b, "\nProfile (cookie + localStorage) kept across stop/start: %s, kill -9 of Chromium: %s, kill -9 of deskd: %s. Singleton locks of another host cleared: %s.\n\n",
			okText(f.ProfileStopStart), okText(f.ProfileKillChromium), okText(f.ProfileKillDeskd), okText(f.StaleLocksCleared))
	}
	if l := r.Load; l != nil {
		fmt.Fprintf(&b, "Load (%s: %d viewers, %d terminals x 2 viewers, %d CDP clients):\n\n", l.Duration, l.Viewers, l.Terminals, l.CDPClients)
		b.WriteString("| class | operations | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|\n")
		for _, c := range l.Classes {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %d |\n", c.Name, c.Count, num(c.P50), num(c.P99), c.Errors)
		}
		fmt.Fprintf(&b, "\ndeskd RSS before %.1f MiB, peak %.1f MiB, after %.1f MiB; goroutines %d → %d; fds %d → %d; log errors %d.\n\n",
			l.RSSBeforeMiB, l.RSSPeakMiB, l.RSSAfterMiB, l.GoroutinesBefore, l.GoroutinesAfter, l.FDsBefore, l.FDsAfter, len(l.LogErrors))
	}
	if h := r.Hostile; h != nil {
		fmt.Fprintf(&b, "Hostile input (%d cases, %d as expected):\n\n", len(h.Cases), h.Passed)
		b.WriteString("| entry | case | expected | got |\n|---|---|---|---|\n")
		for _, c := range h.Cases {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.Entry, c.Name, c.Want, c.Got)
		}
		b.WriteString("\n")
	}
	if p := r.Problems(); len(p) > 0 {
		fmt.Fprintf(&b, "Problems: %s\n", strings.Join(p, "; "))
	} else {
		b.WriteString("Problems: none.\n")
	}
	return b.String()
}

func okText(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// instance is one deskd installation driven through its CLI, as a
// supervisor would: `deskd start` spawns the daemon, `stop --daemon`
// ends it.
type instance struct {
	bin    string
	runDir string
	addr   string
	flags  []string
}

func newInstance(bin string, extra ...string) (*instance, error) {
	dir, err := os.MkdirTemp("", "deskd-rel-")
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755) // the GUI user reaches its profile under it
	port, _ := freePort()
	cdpPort, _ := freePort()
	in := &instance{bin: bin, runDir: dir, addr: "127.0.0.1:" + strconv.Itoa(port)}
	in.flags = append([]string{"--run-dir", dir, "--listen", in.addr, "--cdp-port", strconv.Itoa(cdpPort),
		"--resolution", "1024x768x24", "--shell", "/bin/bash", "--log-level", "debug"}, extra...)
	if os.Geteuid() == 0 {
		in.flags = append(in.flags, "--user", "1000:1000")
	}
	return in, nil
}

// run runs `deskd cmd` and decodes the line of JSON it prints.
func (in *instance) run(ctx context.Context, cmd string, args ...string) (map[string]any, error) {
	c := exec.CommandContext(ctx, in.bin, append(append([]string{cmd}, in.flags...), args...)...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	var v map[string]any
	if jerr := json.Unmarshal(out.Bytes(), &v); jerr != nil {
		return nil, fmt.Errorf("deskd %s: %v, printed %q, stderr %q", cmd, err, out.String(), errb.String())
	}
	if err != nil && cmd != "status" {
		return v, fmt.Errorf("deskd %s: %v: %s", cmd, err, strings.TrimSpace(out.String()))
	}
	return v, nil
}

// close stops the daemon and removes the run dir.
func (in *instance) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	in.run(ctx, "stop", "--daemon")
	os.RemoveAll(in.runDir)
}

// logTail is the end of one of the instance's logs.
func (in *instance) logTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(in.runDir, "logs", name+".log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

type deskStatus struct {
	Status  string         `json:"status"`
	Display string         `json:"display"`
	Pids    map[string]int `json:"pids"`
}

func (in *instance) status(ctx context.Context) (deskStatus, error) {
	var st deskStatus
	err := getJSON(ctx, "http://"+in.addr+"/api/desktop/status", &st)
	return st, err
}

// pids lists the process and its descendants, each as "pid name".
func descendants(root int) map[int]string {
	parent := map[int]int{}
	name := map[int]string{}
	for _, st := range allStats() {
		parent[st.pid], name[st.pid] = st.ppid, st.name
	}
	out := map[int]string{}
	var walk func(int)
	walk = func(p int) {
		out[p] = name[p]
		for c, pp := range parent {
			if pp == p {
				if _, seen := out[c]; !seen {
					walk(c)
				}
			}
		}
	}
	if _, ok := name[root]; ok {
		walk(root)
	}
	return out
}

// procStat is what /proc/PID/stat says of a process.
type procStat struct {
	pid, ppid   int
	name, state string
}

// readStat reads /proc/PID/stat; ok is false when the process is gone.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return procStat{}, false
	}
	f := strings.Fields(s[j+1:])
	if len(f) < 2 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return procStat{pid: pid, ppid: ppid, name: s[i+1 : j], state: f[0]}, true
}

// allStats reads every process's stat.
func allStats() []procStat {
	var out []procStat
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			if st, ok := readStat(pid); ok {
				out = append(out, st)
			}
		}
	}
	return out
}

// procState is a process's state letter ("" when it is gone).
func procState(pid int) string {
	st, _ := readStat(pid)
	return st.state
}

// leftovers waits up to d for the processes in was to be gone, then
// names those still there (a "Z" marks a zombie nobody reaped).
func leftovers(was map[int]string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		var left []string
		for pid, name := range was {
			if st := procState(pid); st != "" && st != "X" {
				left = append(left, fmt.Sprintf("%s[%d %s]", name, pid, st))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			slices.Sort(left)
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// zombies names pid's own children that it has not reaped, giving it
// up to d to do so.
func zombies(pid int, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		var out []string
		for _, c := range children(pid) {
			if procState(c) == "Z" {
				out = append(out, strconv.Itoa(c))
			}
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// children lists the direct children of pid.
func children(pid int) []int {
	var out []int
	for _, st := range allStats() {
		if st.ppid == pid {
			out = append(out, st.pid)
		}
	}
	return out
}

// liveViewer is an RFB viewer that keeps itself connected as noVNC's
// reconnect does (backoff from 100 ms to 1 s), asking for updates all
// the while, and records when it connected, dropped and got pixels.
type liveViewer struct {
	mu       sync.Mutex
	connects int
	drops    int
	lastErr  string
	updates  []time.Time // the first update of each connection, and any after a mark
	mark     time.Time
	markSeen time.Time
}

func (lv *liveViewer) run(ctx context.Context, wsURL string) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		v, err := dialViewer(ctx, wsURL, viewerEncodings)
		if err != nil {
			lv.mu.Lock()
			lv.lastErr = err.Error()
			lv.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		lv.mu.Lock()
		lv.connects++
		lv.mu.Unlock()
		stop := context.AfterFunc(ctx, func() { v.conn.Close() })
		first := true
		err = v.request(false)
		for err == nil {
			if _, err = v.next(); err != nil {
				break
			}
			now := time.Now()
			lv.mu.Lock()
			if first {
				lv.updates = append(lv.updates, now)
				first = false
			}
			if !lv.mark.IsZero() && lv.markSeen.IsZero() && now.After(lv.mark) {
				lv.markSeen = now
			}
			lv.mu.Unlock()
			err = v.request(true)
		}
		stop()
		v.conn.Close()
		if ctx.Err() == nil {
			lv.mu.Lock()
			lv.drops++
			lv.lastErr = err.Error()
			lv.mu.Unlock()
		}
	}
}

// state returns connects, drops and the time of the latest connection's
// first update.
func (lv *liveViewer) state() (int, int, time.Time) {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	var last time.Time
	if n := len(lv.updates); n > 0 {
		last = lv.updates[n-1]
	}
	return lv.connects, lv.drops, last
}

// setMark starts watching for an update after now.
func (lv *liveViewer) setMark(t time.Time) {
	lv.mu.Lock()
	lv.mark, lv.markSeen = t, time.Time{}
	lv.mu.Unlock()
}

func (lv *liveViewer) seen() time.Time {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.markSeen
}

// cdpAgent is one browser-level CDP connection through the relay.
type cdpAgent struct {
	c    *websocket.Conn
	id   int
	read chan cdpMsg
}

type cdpMsg struct {
	b   []byte
	err error
}

func dialAgent(ctx context.Context, addr string) (*cdpAgent, error) {
	var ver struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := getJSON(ctx, "http://"+addr+"/cdp/json/version", &ver); err != nil {
		return nil, err
	}
	c, _, err := websocket.Dial(ctx, ver.WebSocketDebuggerURL, nil)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(64 << 20)
	a := &cdpAgent{c: c, read: make(chan cdpMsg, 64)}
	go func() { // ends when the connection does
		for {
			_, b, err := c.Read(context.Background())
			a.read <- cdpMsg{b, err}
			if err != nil {
				close(a.read)
				return
			}
		}
	}()
	return a, nil
}

// call sends method and waits for its reply.
func (a *cdpAgent) call(ctx context.Context, method string, params any) (json.RawMessage, error) {
	a.id++
	msg, _ := json.Marshal(map[string]any{"id": a.id, "method": method, "params": params})
	if err := a.c.Write(ctx, websocket.MessageText, msg); err != nil {
		return nil, err
	}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case m, ok := <-a.read:
			if !ok {
				return nil, fmt.Errorf("connection closed")
			}
			if m.err != nil {
				return nil, m.err
			}
			var r struct {
				ID     int             `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  *struct{ Message string }
			}
			if json.Unmarshal(m.b, &r) == nil && r.ID == a.id {
				if r.Error != nil {
					return nil, fmt.Errorf("%s: %s", method, r.Error.Message)
				}
				return r.Result, nil
			}
		}
	}
}

// closed waits for the connection's end and describes how it closed.
func (a *cdpAgent) closed(ctx context.Context) (string, bool) {
	for {
		select {
		case <-ctx.Done():
			return "no close in time", false
		case m, ok := <-a.read:
			if !ok {
				return "closed", true
			}
			if m.err != nil {
				if st := websocket.CloseStatus(m.err); st != -1 {
					return fmt.Sprintf("close %d", st), true
				}
				return "connection lost (no close frame)", true
			}
		}
	}
}

// pageEval opens u in a new tab through the relay, waits for it to
// load, evaluates expr there and closes the tab again.
func pageEval(ctx context.Context, addr, u, expr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	base := "http://" + addr + "/cdp"
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/json/new?"+u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	var target struct {
		ID                   string `json:"id"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	err = json.NewDecoder(resp.Body).Decode(&target)
	resp.Body.Close()
	if err != nil || target.WebSocketDebuggerURL == "" {
		return "", fmt.Errorf("new tab: %v", err)
	}
	defer func() {
		if r, err := http.Get(base + "/json/close/" + target.ID); err == nil {
			r.Body.Close()
		}
	}()
	c, _, err := websocket.Dial(ctx, target.WebSocketDebuggerURL, nil)
	if err != nil {
		return "", err
	}
	defer c.CloseNow()
	id := 0
	eval := func(e string) (string, error) {
		id++
		b, err := cdpCall(ctx, c, id, "Runtime.evaluate", map[string]any{"expression": e, "returnByValue": true})
		if err != nil {
			return "", err
		}
		var r struct {
			Result struct {
				Result struct {
					Value any `json:"value"`
				} `json:"result"`
			} `json:"result"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return "", err
		}
		return fmt.Sprint(r.Result.Result.Value), nil
	}
	for {
		v, err := eval(`location.href + " " + document.readyState`)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(v, u) && strings.HasSuffix(v, " complete") {
			break
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("page %s did not load: %s", u, v)
		case <-time.After(50 * time.Millisecond):
		}
	}
	return eval(expr)
}
