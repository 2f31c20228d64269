package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// LoadConfig sizes the load test.
type LoadConfig struct {
	Viewers    int           // RFB viewers (50)
	Terminals  int           // terminal sessions (16), each watched by two viewers
	CDPClients int           // CDP clients (20), each on a tab of its own
	Duration   time.Duration // (60 s)
}

func (c *LoadConfig) defaults() {
	if c.Viewers <= 0 {
		c.Viewers = 50
	}
	if c.Terminals <= 0 {
		c.Terminals = 16
	}
	if c.CDPClients <= 0 {
		c.CDPClients = 20
	}
	if c.Duration <= 0 {
		c.Duration = 60 * time.Second
	}
}

// LoadReport is one deskd under every kind of client at once.
type LoadReport struct {
	Duration         string      `json:"duration"`
	Viewers          int         `json:"viewers"`
	Terminals        int         `json:"terminals"`
	CDPClients       int         `json:"cdp_clients"`
	Classes          []LoadClass `json:"classes"`
	RSSBeforeMiB     float64     `json:"rss_before_mib"`
	RSSPeakMiB       float64     `json:"rss_peak_mib"`
	RSSAfterMiB      float64     `json:"rss_after_mib"`
	GoroutinesBefore int         `json:"goroutines_before"`
	GoroutinesAfter  int         `json:"goroutines_after"`
	FDsBefore        int         `json:"fds_before"`
	FDsAfter         int         `json:"fds_after"`
	LogErrors        []string    `json:"log_errors"`
	Problems         []string    `json:"problems"`
}

// LoadClass is one kind of operation's latency.
type LoadClass struct {
	Name   string  `json:"name"`
	Count  int     `json:"count"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Errors int     `json:"errors"`
}

// samples collects one class's latencies from many goroutines.
type samples struct {
	mu   sync.Mutex
	ms   []float64
	errs int
	last string
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.ms = append(s.ms, ms(d))
	s.mu.Unlock()
}

func (s *samples) fail(err error) {
	s.mu.Lock()
	s.errs++
	s.last = err.Error()
	s.mu.Unlock()
}

func (s *samples) class(name string) LoadClass {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := LoadClass{Name: name, Count: len(s.ms), Errors: s.errs}
	if len(s.ms) > 0 {
		v := slices.Clone(s.ms)
		slices.Sort(v)
		p50, p99 := percentiles(v)
		c.P50, c.P99 = round(p50, 2), round(p99, 2)
	}
	return c
}

// loadPage animates a clock and a moving box, so viewers always have
// something new to receive.
const loadPage = `data:text/html,<body style="margin:0;font:40px sans-serif"><div id=t></div><div id=b style="position:absolute;width:120px;height:120px;background:%23c33"></div><script>let i=0;setInterval(()=>{i++;t.textContent=new Date().toISOString()+" "+i;b.style.left=(i*7%25800)+"px";b.style.top=(200+i*3%25300)+"px"},50)</script>`

// probeClient talks to deskd without keeping connections open, so its
// own requests do not count in deskd's goroutines and descriptors.
var probeClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// deskdGoroutines reads go_goroutines from deskd's /metrics.
func deskdGoroutines(ctx context.Context, addr string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := probeClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(v, 64)
			// this request's own handler is one of them
			return int(f) - 1, err
		}
	}
	return 0, fmt.Errorf("no go_goroutines in /metrics")
}

// fdList names what a process's descriptors point to.
func fdList(pid int) string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		t, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out = append(out, e.Name()+"→"+t)
	}
	return strings.Join(out, " ")
}

func openFDs(pid int) int {
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents)
}

// Load runs every client class against one deskd at once for the
// configured time, then disconnects them all and checks that deskd gave
// back what they took.
func Load(ctx context.Context, bin string, lc LoadConfig, log io.Writer) (*LoadReport, error) {
	lc.defaults()
	if log == nil {
		log = io.Discard
	}
	rep := &LoadReport{Duration: lc.Duration.String(), Viewers: lc.Viewers, Terminals: lc.Terminals, CDPClients: lc.CDPClients,
		LogErrors: []string{}, Problems: []string{}}
	problem := func(format string, a ...any) {
		p := fmt.Sprintf(format, a...)
		rep.Problems = append(rep.Problems, p)
		fmt.Fprintln(log, "  PROBLEM:", p)
	}
	dbgPort, _ := freePort()
	dbg := "127.0.0.1:" + strconv.Itoa(dbgPort)
	in, err := newInstance(bin, "--url", loadPage, "--max-viewers", strconv.Itoa(lc.Viewers+8), "--debug-addr", dbg)
	if err != nil {
		return rep, err
	}
	defer in.close()
	if _, err := in.run(ctx, "start"); err != nil {
		return rep, err
	}
	st, err := in.status(ctx)
	if err != nil {
		return rep, err
	}
	pid := st.Pids["deskd"]

	// One client of each kind first, so that what deskd sets up once
	// (encoders, the relay's first upstream, the shell's binary in the
	// page cache) is in the "before".
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	if err := loadRound(wctx, in.addr, LoadConfig{Viewers: 1, Terminals: 1, CDPClients: 1, Duration: 3 * time.Second}, nil); err != nil {
		wcancel()
		return rep, fmt.Errorf("warm-up: %w", err)
	}
	wcancel()
	logSize := fileSize(filepath.Join(in.runDir, "logs", "deskd.log"))
	gBefore, fdBefore, rssBefore, err := restingState(ctx, in.addr, pid, -1, -1, 0)
	if err != nil {
		return rep, err
	}
	rep.GoroutinesBefore, rep.FDsBefore, rep.RSSBeforeMiB = gBefore, fdBefore, round(rssBefore/1024, 1)
	fmt.Fprintf(log, "  before: RSS %.1f MiB, %d goroutines, %d fds\n", rep.RSSBeforeMiB, gBefore, fdBefore)

	peak := rssBefore
	sctx, scancel := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				peak = max(peak, rssKiB(pid))
			}
		}
	})
	cls := map[string]*samples{}
	err = loadRound(ctx, in.addr, lc, cls)
	scancel()
	sampler.Wait()
	if err != nil {
		return rep, err
	}
	for _, name := range []string{"viewer: request to update", "terminal: output line latency", "cdp: Runtime.evaluate", "cdp: Page.captureScreenshot"} {
		c := cls[name].class(name)
		rep.Classes = append(rep.Classes, c)
		fmt.Fprintf(log, "  %s: %d, p50 %.2f ms, p99 %.2f ms, %d errors\n", name, c.Count, c.P50, c.P99, c.Errors)
		if c.Count == 0 || c.Errors > 0 {
			problem("%s: %d operations, %d errors (last: %s)", name, c.Count, c.Errors, cls[name].last)
		}
	}
	rep.RSSPeakMiB = round(peak/1024, 1)

	g, fd, rss, err := restingState(ctx, in.addr, pid, gBefore, fdBefore, rssBefore+2048)
	rep.GoroutinesAfter, rep.FDsAfter, rep.RSSAfterMiB = g, fd, round(rss/1024, 1)
	fmt.Fprintf(log, "  after: RSS %.1f MiB (peak %.1f), %d goroutines, %d fds\n", rep.RSSAfterMiB, rep.RSSPeakMiB, g, fd)
	if err != nil {
		problem("after the load: %v", err)
		// What is left, for whoever reads the log.
		if _, b, err := do(ctx, "GET", "http://"+dbg+"/debug/pprof/goroutine?debug=1", nil, nil); err == nil {
			fmt.Fprintf(log, "  deskd's goroutines after the load:\n%s\n", b)
		}
		fmt.Fprintf(log, "  deskd's descriptors: %s\n", fdList(pid))
	}
	rep.LogErrors = logErrors(filepath.Join(in.runDir, "logs", "deskd.log"), logSize)
	if len(rep.LogErrors) > 0 {
		problem("deskd logged %d errors, first: %s", len(rep.LogErrors), rep.LogErrors[0])
	}
	return rep, nil
}

// restingState returns deskd's goroutines, descriptors and RSS at rest.
// With negative counts (the "before") it samples for 2 s and keeps the
// smallest counts seen: a probe's own connection, a health check or a
// timer come and go, what stays is the resting state. Otherwise (the
// "after") it waits, up to 60 s, until the counts are back to at most
// g0 and fd0 and the RSS under rssMax (KiB).
func restingState(ctx context.Context, addr string, pid, g0, fd0 int, rssMax float64) (int, int, float64, error) {
	if g0 < 0 {
		g, fd, rss := -1, -1, 0.0
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
			n, err := deskdGoroutines(ctx, addr)
			if err != nil {
				return 0, 0, 0, err
			}
			if g < 0 || n < g {
				g = n
			}
			if f := openFDs(pid); fd < 0 || f < fd {
				fd = f
			}
			rss = rssKiB(pid)
			select {
			case <-ctx.Done():
				return 0, 0, 0, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		return g, fd, rss, nil
	}
	var g, fd int
	var rss float64
	err := poll(ctx, 60*time.Second, "deskd back to its resting state", func() error {
		n, err := deskdGoroutines(ctx, addr)
		if err != nil {
			return err
		}
		g, fd, rss = n, openFDs(pid), rssKiB(pid)
		if g > g0 || fd > fd0 || rss > rssMax {
			return fmt.Errorf("%d goroutines (before %d), %d fds (before %d), RSS %.1f MiB (at most %.1f)", g, g0, fd, fd0, rss/1024, rssMax/1024)
		}
		return nil
	})
	return g, fd, rss, err
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logErrors returns the error lines written to a log after offset.
func logErrors(path string, offset int64) []string {
	f, err := os.Open(path)
	if err != nil {
		return []string{"cannot read the log: " + err.Error()}
	}
	defer f.Close()
	f.Seek(offset, io.SeekStart)
	out := []string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "level=ERROR") || strings.Contains(l, `"level":"ERROR"`) {
			out = append(out, l)
		}
	}
	return out
}

// loadRound runs lc's clients for lc.Duration and records their
// latencies in cls (when not nil); it returns when all of them have
// disconnected and the terminal sessions have ended.
func loadRound(ctx context.Context, addr string, lc LoadConfig, cls map[string]*samples) error {
	for _, n := range []string{"viewer: request to update", "terminal: output line latency", "cdp: Runtime.evaluate", "cdp: Page.captureScreenshot"} {
		if cls[n] == nil && cls != nil {
			cls[n] = &samples{}
		}
	}
	get := func(n string) *samples {
		if cls == nil {
			return &samples{}
		}
		return cls[n]
	}
	lctx, cancel := context.WithTimeout(ctx, lc.Duration)
	defer cancel()
	var wg sync.WaitGroup
	setup := make(chan error, lc.Viewers+2*lc.Terminals+lc.CDPClients)

	for range lc.Viewers {
		wg.Go(func() {
			s := get("viewer: request to update")
			v, err := dialViewer(lctx, "ws://"+addr+"/websockify", viewerEncodings)
			setup <- err
			if err != nil {
				return
			}
			stop := context.AfterFunc(lctx, func() { v.conn.Close() })
			defer stop()
			defer v.conn.Close()
			incremental := false
			for lctx.Err() == nil {
				t0 := time.Now()
				if err := v.request(incremental); err != nil {
					break
				}
				if _, err := v.next(); err != nil {
					if lctx.Err() == nil {
						s.fail(err)
					}
					break
				}
				s.add(time.Since(t0))
				incremental = true
			}
		})
	}
	for range lc.Terminals {
		base := "ws://" + addr + "/terminal/ws"
		wg.Go(func() {
			s := get("terminal: output line latency")
			// The first viewer starts the stream; both read it.
			var tcs []*ttyClient
			var id string
			defer func() {
				for _, tc := range tcs {
					tc.c.CloseNow()
				}
				if len(tcs) == 0 {
					return
				}
				// End the shell (the viewers' connections went with
				// lctx): the session then ends and closes this one.
				ectx, ecancel := context.WithTimeout(ctx, 10*time.Second)
				defer ecancel()
				tc, err := endpoint{url: base + "?session=" + id}.dial(ectx)
				if err != nil {
					s.fail(fmt.Errorf("reattach to end the session: %w", err))
					return
				}
				defer tc.c.CloseNow()
				// Ctrl-C stops the stream; "exit" follows on its own: bash's
				// readline drops a line it had read when the interrupt
				// lands (once in make test, "exit" typed with the ^C in one
				// write was lost), so it is typed again until the session
				// ends.
				tc.input(ectx, "\x03")
				typed := make(chan struct{})
				tctx, stopTyping := context.WithCancel(ectx)
				go func() { // typing "exit"; stopped below
					defer close(typed)
					for {
						select {
						case <-tctx.Done():
							return
						case <-time.After(300 * time.Millisecond):
						}
						tc.input(tctx, "exit\r")
					}
				}()
				err = tc.readUntil(ectx, "\x00never")
				stopTyping()
				<-typed
				if ectx.Err() != nil {
					s.fail(fmt.Errorf("the session did not end after exit: %v", err))
				}
			}()
			for range 2 {
				tc, sid, err := dialSession(lctx, base, id)
				setup <- err
				if err != nil {
					return
				}
				tcs, id = append(tcs, tc), sid
			}
			// The loop forks nothing (bash's clock, and a read that
			// times out on a pipe it holds both ends of, as its sleep):
			// with date and sleep spawned 20 times a second in each of
			// the 16 shells, a VM where a fork and exec cost 3 ms spent
			// both cores on them, and Chromium and deskd's viewers
			// starved (CDP tabs not opened within 10 s, updates 7 s late).
			if err := tcs[0].input(lctx, `stty -echo; exec 9<> <(:); while :; do echo "tick ${EPOCHREALTIME/./}000 tock"; read -t 0.05 -u 9; done`+"\r"); err != nil {
				s.fail(err)
				return
			}
			var rg sync.WaitGroup
			for _, tc := range tcs {
				rg.Go(func() { readTicks(lctx, tc, s) })
			}
			rg.Wait()
		})
	}
	for range lc.CDPClients {
		wg.Go(func() {
			ev, shot := get("cdp: Runtime.evaluate"), get("cdp: Page.captureScreenshot")
			err := cdpLoad(lctx, addr, ev, shot)
			setup <- nil
			if err != nil && lctx.Err() == nil {
				ev.fail(err)
			}
		})
	}
	wg.Wait()
	close(setup)
	for err := range setup {
		if err != nil {
			return err
		}
	}
	http.DefaultClient.CloseIdleConnections()
	return nil
}

// readTicks reads "tick <unix ns> tock" lines and records their age.
func readTicks(ctx context.Context, tc *ttyClient, s *samples) {
	var buf []byte
	for {
		_, b, err := tc.c.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.fail(err)
			}
			return
		}
		now := time.Now()
		if len(b) == 0 || b[0] != '0' {
			continue
		}
		buf = append(buf, b[1:]...)
		for {
			i := bytes.Index(buf, []byte("tick "))
			if i < 0 {
				buf = buf[:0]
				break
			}
			j := bytes.Index(buf[i:], []byte(" tock"))
			if j < 0 {
				buf = append(buf[:0], buf[i:]...)
				break
			}
			if ns, err := strconv.ParseInt(string(buf[i+5:i+j]), 10, 64); err == nil {
				s.add(now.Sub(time.Unix(0, ns)))
			}
			buf = buf[i+j:]
		}
	}
}

// cdpLoad opens a tab of its own through the relay and alternates
// evaluations with a screenshot every tenth round until ctx ends.
func cdpLoad(ctx context.Context, addr string, ev, shot *samples) error {
	base := "http://" + addr + "/cdp"
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/json/new?about:blank", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	var target struct {
		ID                   string `json:"id"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	err = json.NewDecoder(resp.Body).Decode(&target)
	resp.Body.Close()
	if err != nil {
		return err
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		req, _ := http.NewRequestWithContext(cctx, http.MethodGet, base+"/json/close/"+target.ID, nil)
		if r, err := http.DefaultClient.Do(req); err == nil {
			r.Body.Close()
		}
	}()
	c, _, err := websocket.Dial(ctx, target.WebSocketDebuggerURL, nil)
	if err != nil {
		return err
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	id := 0
	for i := 0; ctx.Err() == nil; i++ {
		id++
		t0 := time.Now()
		if i%10 == 9 {
			b, err := cdpCall(ctx, c, id, "Page.captureScreenshot", map[string]any{"format": "jpeg", "quality": 60})
			if err != nil {
				return err
			}
			if bytes.Contains(b[:min(len(b), 64)], []byte(`"error"`)) {
				return fmt.Errorf("%.200s", b)
			}
			shot.add(time.Since(t0))
			continue
		}
		if _, err := evaluate(ctx, c, id, strconv.Itoa(i)+"*2"); err != nil {
			return err
		}
		ev.add(time.Since(t0))
	}
	return nil
}
