package bench

import (
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"golang.org/x/sys/unix"
)

// movingPage scrolls a long page of text in the desktop's Chromium, about
// 30 times a second: the content a VNC server sees when a person reads.
const movingPage = `data:text/html,<body style='margin:0;font:15px/1.3 monospace;background:%23fff'><pre id=p></pre><script>` +
	`let s='';for(let i=0;i<3000;i++)s+=i+'  The quick brown fox jumps over the lazy dog; lorem ipsum dolor sit amet, consectetur.\n';` +
	`p.textContent=s;setInterval(()=>{if(window.paused)return;scrollBy(0,4);if(scrollY>60000)scrollTo(0,0)},33)</script></body>`

// wheelPage: a text page scrolled in mouse-wheel steps (100 px every
// 100 ms, as a person reads) with a clock ticking in a corner.
const wheelPage = `data:text/html,<body style='margin:0;font:15px/1.3 sans-serif;background:%23fff'><div id=c style='position:fixed;right:8px;top:8px;font:bold 20px monospace;background:%23ffd;padding:4px'></div><div id=p></div><script>` +
	tagScript + `let s='';for(let i=0;i<1500;i++)s+='<p>'+i+'. The quick brown fox jumps over the lazy dog; <b>lorem ipsum</b> dolor sit amet, <i>consectetur</i> adipiscing elit, sed do eiusmod tempor.</p>';` +
	`p.innerHTML=s;setInterval(()=>{c.textContent=new Date().toISOString().slice(11,22);if(window.paused)return;if(scrollY+innerHeight>=document.body.scrollHeight-2)scrollTo(0,0);else scrollBy(0,100);tick()},100)</script></body>`

// galleryPage: photo-like pictures (gradients and noise, drawn once,
// the same for every run) scrolled 120 px every 100 ms.
const galleryPage = `data:text/html,<body style='margin:0;background:%23222'><div id=g style='display:flex;flex-wrap:wrap;gap:6px'></div><script>` +
	tagScript + `let seed=7;const rnd=()=>(seed=(seed*1103515245+12345)%252147483648)/2147483648;` +
	`for(let i=0;i<160;i++){const c=document.createElement('canvas');c.width=300;c.height=200;const x=c.getContext('2d');` +
	`const gr=x.createLinearGradient(0,0,300,200);gr.addColorStop(0,'hsl('+(i*47%25360)+',60%25,45%25)');gr.addColorStop(1,'hsl('+(i*91%25360)+',70%25,70%25)');x.fillStyle=gr;x.fillRect(0,0,300,200);` +
	`const d=x.getImageData(0,0,300,200);for(let k=0;k<d.data.length;k+=4){const n=(rnd()-0.5)*40;d.data[k]+=n;d.data[k+1]+=n;d.data[k+2]+=n}x.putImageData(d,0,0);g.appendChild(c)}` +
	`setInterval(()=>{if(window.paused)return;if(scrollY+innerHeight>=document.body.scrollHeight-2)scrollTo(0,0);else scrollBy(0,120);tick()},100)</script></body>`

// typingPage: a text field that gets a character every 50 ms (a fast
// typist) with its caret, lines wrapping, the rest of the screen still.
const typingPage = `data:text/html,<body style='margin:0;background:%23fff'><textarea id=t style='width:100%25;height:100vh;font:16px monospace;border:0'></textarea><script>` +
	tagScript + `const w='The quick brown fox jumps over the lazy dog. ';let i=0;t.focus();` +
	`setInterval(()=>{if(window.paused)return;t.value+=w[i++%25w.length];if(t.value.length>1500)t.value='';t.selectionStart=t.selectionEnd=t.value.length;tick()},50)</script></body>`

// rfbContent is one kind of screen content the RFB scenarios measure.
type rfbContent struct {
	page, describe string
	transport      bool // also measure the WebSocket transport (once is enough)
	tagged         bool // the page carries a frame tag (pageframe.go)
}

// Marker geometry: a small X window of our own above everything, whose
// colour the bench flips to time the path from a change on the screen to
// a viewer's decoded pixels.
const (
	markerX, markerY, markerSize = 4, 4, 24
	rfbWindow                    = 8 * time.Second
)

// rfbScenario: viewers that behave like noVNC, against deskd and against
// x11vnc + websockify serving the same Xvfb showing the same scrolling
// page, alternately, with 1 and with 10 viewers.
func rfbScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	return rfbMeasure(ctx, c, rfbContent{movingPage, "Chromium scrolling a text page ~30 times a second", true, false})
}

func rfbWheelScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	return rfbMeasure(ctx, c, rfbContent{wheelPage, "a text page scrolled in wheel steps (100 px every 100 ms) with a ticking clock", false, true})
}

func rfbGalleryScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	return rfbMeasure(ctx, c, rfbContent{galleryPage, "a gallery of photo-like pictures scrolled 120 px every 100 ms", false, true})
}

func rfbTypingScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	return rfbMeasure(ctx, c, rfbContent{typingPage, "typing into a text field, a character every 50 ms", false, true})
}

func rfbMeasure(ctx context.Context, c Config, content rfbContent) ([]Figure, string, error) {
	x11vnc, err := exec.LookPath("x11vnc")
	if err != nil {
		return nil, "", errors.New("x11vnc is not installed (apt-get install x11vnc)")
	}
	websockify, err := exec.LookPath("websockify")
	if err != nil {
		return nil, "", errors.New("websockify is not installed (apt-get install websockify)")
	}
	dk, err := startDeskd(ctx, c)
	if err != nil {
		return nil, "", err
	}
	defer dk.stop()
	display, err := startDesktop(ctx, dk, content.page)
	if err != nil {
		return nil, "", err
	}

	// The peer on the same display.
	xv, err := startX11vnc(ctx, x11vnc, websockify, display, dk.xauth)
	if err != nil {
		return nil, "", err
	}
	defer xv.stop()
	// pause stops the page's scrolling for the correctness check.
	pause := func(on bool) error {
		return evalDesktopPage(ctx, "http://"+dk.addr+"/cdp", "window.paused = "+strconv.FormatBool(on))
	}
	m, err := newMarker(display)
	if err != nil {
		return nil, "", err
	}
	defer m.close()
	var tag *image.Point
	if content.tagged {
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		at, err := m.findTag(fctx)
		cancel()
		if err != nil {
			return nil, "", err
		}
		tag = &at
	}
	chromium, err := findChromium(c)
	if err != nil {
		return nil, "", err
	}
	nv, err := startNoVNC(ctx, chromium, "http://"+dk.addr)
	if err != nil {
		return nil, "", err
	}
	defer nv.close()

	sides := []struct {
		name string
		url  string
		cpu  func() time.Duration
	}{
		{"deskd", "ws://" + dk.addr + "/websockify", func() time.Duration { return cpuOf(dk.pid) }},
		{"x11vnc+websockify", "ws://" + xv.wsAddr + "/", func() time.Duration {
			return cpuOf(xv.pids()...)
		}},
	}
	type samples struct{ fps, kb, cpu, p50, p99, pfps, pkb, pcpu [2][]float64 } // [side]
	var one, ten samples
	var browser struct{ fps, kb, cpu, pfps, pkb, pcpu [2][]float64 }
	var mbps [2][]float64
	rounds := max(1, min(c.Rounds, 3))
	for i := range rounds {
		for si, side := range sides {
			for _, n := range []int{1, 10} {
				r, err := runViewers(ctx, side.url, n, m, tag, side.cpu, pause)
				if err != nil {
					return nil, "", fmt.Errorf("%s, %d viewers: %w", side.name, n, err)
				}
				s := &one
				if n == 10 {
					s = &ten
				}
				s.fps[si] = append(s.fps[si], r.fps)
				s.kb[si] = append(s.kb[si], r.kbPerFrame)
				s.cpu[si] = append(s.cpu[si], r.cpuPerFrame)
				s.p50[si] = append(s.p50[si], r.p50)
				s.p99[si] = append(s.p99[si], r.p99)
				s.pfps[si] = append(s.pfps[si], r.pageFPS)
				s.pkb[si] = append(s.pkb[si], r.kbPerPage)
				s.pcpu[si] = append(s.pcpu[si], r.cpuPerPage)
				fmt.Fprintf(c.Log, "  round %d %s %d viewers: %.1f updates/s/viewer, %.1f KB/update, %.2f ms CPU/update; %.1f page frames/s/viewer, %.1f KB, %.2f ms CPU a page frame; latency p50 %.1f p99 %.1f ms (%d samples), %.1f%% of pixels right\n",
					i, side.name, n, r.fps, r.kbPerFrame, r.cpuPerFrame, r.pageFPS, r.kbPerPage, r.cpuPerPage, r.p50, r.p99, r.samples, 100*r.correct)
				if r.correct < 0.95 {
					return nil, "", fmt.Errorf("%s: the viewer's picture matches the screen on only %.1f%% of pixels: the client or the server decodes wrongly", side.name, 100*r.correct)
				}
			}
			nr, err := nv.measure(ctx, side.url, rfbWindow, tag, side.cpu)
			if err != nil {
				return nil, "", fmt.Errorf("%s, noVNC in Chromium: %w", side.name, err)
			}
			if nr.h264 > 0 { // noVNC offers it: still content must not go as video
				return nil, "", fmt.Errorf("%s sent this still content to noVNC as H.264 (%d rectangles)", side.name, nr.h264)
			}
			browser.fps[si] = append(browser.fps[si], nr.fps)
			browser.kb[si] = append(browser.kb[si], nr.kbPerFrame)
			browser.cpu[si] = append(browser.cpu[si], nr.cpuPerFrame)
			browser.pfps[si] = append(browser.pfps[si], nr.pageFPS)
			browser.pkb[si] = append(browser.pkb[si], nr.kbPerPage)
			browser.pcpu[si] = append(browser.pcpu[si], nr.cpuPerPage)
			fmt.Fprintf(c.Log, "  round %d %s noVNC in Chromium: %.1f canvas changes/s, %.1f KB, %.2f ms CPU a change; %.1f page frames/s, %.1f KB, %.2f ms CPU a page frame\n",
				i, side.name, nr.fps, nr.kbPerFrame, nr.cpuPerFrame, nr.pageFPS, nr.kbPerPage, nr.cpuPerPage)
			if !content.transport {
				continue
			}
			t, err := transportThroughput(ctx, side.url)
			if err != nil {
				return nil, "", fmt.Errorf("%s, transport: %w", side.name, err)
			}
			mbps[si] = append(mbps[si], t)
			fmt.Fprintf(c.Log, "  round %d %s: full Raw frames through the WebSocket: %.0f MB/s\n", i, side.name, t)
		}
	}
	var figs []Figure
	if !content.tagged {
		figs = []Figure{
			figure("1 viewer: frames per second", "fps", "higher", one.fps[0], one.fps[1]),
			figure("1 viewer: bytes per frame", "KB", "lower", one.kb[0], one.kb[1]),
			figure("1 viewer: server CPU per frame", "ms", "lower", one.cpu[0], one.cpu[1]),
			figure("1 viewer: update latency p50", "ms", "lower", one.p50[0], one.p50[1]),
			figure("1 viewer: update latency p99", "ms", "lower", one.p99[0], one.p99[1]),
			figure("10 viewers: frames per second each", "fps", "higher", ten.fps[0], ten.fps[1]),
			figure("10 viewers: bytes per frame", "KB", "lower", ten.kb[0], ten.kb[1]),
			figure("10 viewers: server CPU per frame", "ms", "lower", ten.cpu[0], ten.cpu[1]),
			figure("10 viewers: update latency p50", "ms", "lower", ten.p50[0], ten.p50[1]),
			figure("10 viewers: update latency p99", "ms", "lower", ten.p99[0], ten.p99[1]),
			figure("noVNC in Chromium: canvas frames per second", "fps", "higher", browser.fps[0], browser.fps[1]),
			figure("noVNC in Chromium: bytes per canvas frame", "KB", "lower", browser.kb[0], browser.kb[1]),
			figure("noVNC in Chromium: server CPU per canvas frame", "ms", "lower", browser.cpu[0], browser.cpu[1]),
		}
	} else { // frames are page frames shown (pageframe.go); updates for reference
		figs = []Figure{
			figure("1 viewer: page frames per second", "fps", "higher", one.pfps[0], one.pfps[1]),
			figure("1 viewer: bytes per page frame", "KB", "lower", one.pkb[0], one.pkb[1]),
			figure("1 viewer: server CPU per page frame", "ms", "lower", one.pcpu[0], one.pcpu[1]),
			figure("1 viewer: update latency p50", "ms", "lower", one.p50[0], one.p50[1]),
			figure("1 viewer: update latency p99", "ms", "lower", one.p99[0], one.p99[1]),
			figure("1 viewer: updates per second", "/s", "info", one.fps[0], one.fps[1]),
			figure("1 viewer: server CPU per update", "ms", "info", one.cpu[0], one.cpu[1]),
			figure("10 viewers: page frames per second each", "fps", "higher", ten.pfps[0], ten.pfps[1]),
			figure("10 viewers: bytes per page frame", "KB", "lower", ten.pkb[0], ten.pkb[1]),
			figure("10 viewers: server CPU per page frame", "ms", "lower", ten.pcpu[0], ten.pcpu[1]),
			figure("10 viewers: update latency p50", "ms", "lower", ten.p50[0], ten.p50[1]),
			figure("10 viewers: update latency p99", "ms", "lower", ten.p99[0], ten.p99[1]),
			figure("noVNC in Chromium: page frames per second", "fps", "higher", browser.pfps[0], browser.pfps[1]),
			figure("noVNC in Chromium: bytes per page frame", "KB", "lower", browser.pkb[0], browser.pkb[1]),
			figure("noVNC in Chromium: server CPU per page frame", "ms", "lower", browser.pcpu[0], browser.pcpu[1]),
			figure("noVNC in Chromium: canvas changes per second", "/s", "info", browser.fps[0], browser.fps[1]),
		}
	}
	if content.transport {
		figs = append(figs, figure("WebSocket transport: full Raw frames", "MB/s", "higher", mbps[0], mbps[1]))
	}
	return figs, fmt.Sprintf("same Xvfb (%s), %s; viewers speak like noVNC (Tight, JPEG quality 6, compression 2) over WebSocket and decode everything; %s per run; latency: an X window's colour flipped every 200 ms until a viewer has decoded it; then real noVNC 1.7 in a headless Chromium, alone, same settings: bytes counted on its WebSocket, a frame is a change of its canvas (sampled at every animation frame, scaled to 320x200)", display, content.describe, rfbWindow), nil
}

type rfbResult struct {
	fps, kbPerFrame, cpuPerFrame, p50, p99 float64 // frames: updates with rectangles
	// page frames shown (pageframe.go), with a tagged page
	pageFPS, kbPerPage, cpuPerPage float64
	samples                        int
	correct                        float64 // share of the last picture's pixels that match the screen
}

// runViewers connects n viewers to url for a warm-up and a timed window.
func runViewers(ctx context.Context, wsURL string, n int, m *marker, tag *image.Point, cpu func() time.Duration, pause func(bool) error) (rfbResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	vs := make([]*viewer, n)
	for i := range vs {
		v, err := dialViewer(ctx, wsURL, viewerEncodings)
		if err != nil {
			return rfbResult{}, err
		}
		defer v.conn.Close()
		vs[i] = v
	}
	var (
		measuring atomic.Bool
		frames    atomic.Int64
		pages     atomic.Int64 // page frames shown (pageframe.go)
		mu        sync.Mutex
		lat       []float64
		errs      = make(chan error, n)
		wg        sync.WaitGroup
	)
	for _, v := range vs {
		wg.Go(func() { // ends when its connection is closed below
			seen := 0
			var pf *pageFrames
			if tag != nil {
				pf = &pageFrames{at: *tag, last: -1}
			}
			if err := v.request(false); err != nil {
				errs <- err
				return
			}
			for {
				rects, err := v.next()
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if rects > 0 && measuring.Load() {
					frames.Add(1)
				}
				if pf.saw(v) && measuring.Load() {
					pages.Add(1)
				}
				if seq, t0, ok := m.check(v); ok && seq != seen {
					seen = seq
					if measuring.Load() {
						mu.Lock()
						lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
						mu.Unlock()
					}
				}
				if err := v.request(true); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
			}
		})
	}
	stopAll := func() {
		cancel()
		for _, v := range vs {
			v.conn.Close()
		}
		wg.Wait()
	}
	time.Sleep(time.Second) // warm-up: first full frames
	bytes0 := totalBytes(vs)
	cpu0 := cpu()
	t0 := time.Now()
	measuring.Store(true)
	flips := time.NewTicker(200 * time.Millisecond)
	defer flips.Stop()
	end := time.After(rfbWindow)
loop:
	for {
		select {
		case <-flips.C:
			if err := m.flip(); err != nil {
				stopAll()
				return rfbResult{}, err
			}
		case err := <-errs:
			stopAll()
			return rfbResult{}, err
		case <-end:
			break loop
		}
	}
	measuring.Store(false)
	elapsed := time.Since(t0)
	cpu1 := cpu()
	bytes1 := totalBytes(vs)
	f, pg := frames.Load(), pages.Load()

	// Correctness: pause the page, let the last updates land, compare
	// the first viewer's picture with a capture of the screen.
	if err := pause(true); err != nil {
		stopAll()
		return rfbResult{}, fmt.Errorf("pause the page: %w", err)
	}
	time.Sleep(500*time.Millisecond + time.Duration(n)*150*time.Millisecond) // many viewers: slower to catch up
	stopAll()
	correct, err := m.compare(vs[0])
	if err != nil {
		return rfbResult{}, err
	}
	if err := pause(false); err != nil {
		return rfbResult{}, fmt.Errorf("resume the page: %w", err)
	}
	if f == 0 {
		return rfbResult{}, errors.New("no frames delivered")
	}
	slices.Sort(lat)
	r := rfbResult{
		fps:         float64(f) / elapsed.Seconds() / float64(n),
		kbPerFrame:  float64(bytes1-bytes0) / float64(f) / 1000,
		cpuPerFrame: float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(f),
		samples:     len(lat),
		correct:     correct,
	}
	if tag != nil {
		if pg == 0 {
			return rfbResult{}, errors.New("no page frame shown: the page's tag never changed in the viewers' pictures")
		}
		r.pageFPS = float64(pg) / elapsed.Seconds() / float64(n)
		r.kbPerPage = float64(bytes1-bytes0) / float64(pg) / 1000
		r.cpuPerPage = float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(pg)
	}
	if len(lat) > 0 {
		r.p50, r.p99 = percentiles(lat)
	}
	return r, nil
}

func totalBytes(vs []*viewer) int64 {
	var n int64
	for _, v := range vs {
		n += atomic.LoadInt64(&v.count.n)
	}
	return n
}

// cpuOf is the CPU time (user + system) the processes have used so far,
// read from each one's CPU clock (clock_gettime of the clock id
// clock_getcpuclockid(3) gives: all its threads, ended ones too, in
// nanoseconds). /proc/PID/stat counts 10 ms ticks: deskd typing used 17
// of them in a measurement, so one tick was 6% of the figure, and three
// rounds' medians came out as the same 17 ticks over 16 frames.
func cpuOf(pids ...int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		var ts unix.Timespec
		if unix.ClockGettime(processClock(pid), &ts) == nil { // else gone
			total += time.Duration(ts.Nano())
		}
	}
	return total
}

// processClock is the clock id of pid's CPU time (the kernel's
// MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED), as glibc builds it).
func processClock(pid int) int32 { return int32(^pid<<3 | 2) }

// marker is a small override-redirect X window whose colour the bench
// flips, timing from the flip (after an X round trip) to each viewer
// decoding the new colour.
type marker struct {
	c      *xgb.Conn
	win    xproto.Window
	root   xproto.Window
	mu     sync.Mutex
	seq    int
	colour uint32
	t0     time.Time
}

var markerColours = [2]uint32{0xff0000, 0x0000ff}

func newMarker(display string) (*marker, error) {
	c, err := xgb.NewConnDisplay(display)
	if err != nil {
		return nil, fmt.Errorf("marker: %w", err)
	}
	root := xproto.Setup(c).DefaultScreen(c).Root
	win, err := xproto.NewWindowId(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := xproto.CreateWindowChecked(c, 24, win, root, markerX, markerY, markerSize, markerSize, 0, xproto.WindowClassInputOutput, 0,
		xproto.CwBackPixel|xproto.CwOverrideRedirect, []uint32{markerColours[0], 1}).Check(); err != nil {
		c.Close()
		return nil, fmt.Errorf("marker window: %w", err)
	}
	xproto.MapWindow(c, win)
	xproto.GetInputFocus(c).Reply()
	return &marker{c: c, win: win, root: root, colour: markerColours[0]}, nil
}

func (m *marker) close() { m.c.Close() }

// flip changes the colour and notes when the X server has done it.
func (m *marker) flip() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	next := markerColours[(m.seq+1)%2]
	xproto.ConfigureWindow(m.c, m.win, xproto.ConfigWindowStackMode, []uint32{xproto.StackModeAbove})
	xproto.ChangeWindowAttributes(m.c, m.win, xproto.CwBackPixel, []uint32{next})
	xproto.ClearArea(m.c, false, m.win, 0, 0, 0, 0)
	if _, err := xproto.GetInputFocus(m.c).Reply(); err != nil { // a round trip: the window is painted
		return fmt.Errorf("marker: %w", err)
	}
	m.seq++
	m.colour, m.t0 = next, time.Now()
	return nil
}

// check reports the flip the viewer's picture shows, if it shows the
// latest one.
func (m *marker) check(v *viewer) (int, time.Time, bool) {
	x, y := markerX+markerSize/2, markerY+markerSize/2
	if x >= v.w || y >= v.h {
		return 0, time.Time{}, false
	}
	got := v.at(x, y)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seq == 0 || !near(got, m.colour, 48) {
		return 0, time.Time{}, false
	}
	return m.seq, m.t0, true
}

// compare captures the screen and returns the share of the viewer's
// pixels within a JPEG's tolerance of it.
func (m *marker) compare(v *viewer) (float64, error) {
	data, err := m.grab(v.w, v.h)
	if err != nil {
		return 0, fmt.Errorf("capture for comparison: %w", err)
	}
	ok := 0
	for i := range v.w * v.h {
		p := data[4*i:]
		if near(v.fb[i], uint32(p[2])<<16|uint32(p[1])<<8|uint32(p[0]), 40) {
			ok++
		}
	}
	if os.Getenv("DESKD_BENCH_DUMP") != "" {
		a, b := image.NewRGBA(image.Rect(0, 0, v.w, v.h)), image.NewRGBA(image.Rect(0, 0, v.w, v.h))
		for i := range v.w * v.h {
			p := data[4*i:]
			a.Pix[4*i], a.Pix[4*i+1], a.Pix[4*i+2], a.Pix[4*i+3] = byte(v.fb[i]>>16), byte(v.fb[i]>>8), byte(v.fb[i]), 255
			b.Pix[4*i], b.Pix[4*i+1], b.Pix[4*i+2], b.Pix[4*i+3] = p[2], p[1], p[0], 255
		}
		for name, img := range map[string]*image.RGBA{"viewer": a, "screen": b} {
			f, _ := os.Create("/tmp/" + name + ".png")
			png.Encode(f, img)
			f.Close()
		}
	}
	return float64(ok) / float64(v.w*v.h), nil
}

// grab captures the top-left w×h of the screen (BGRX).
func (m *marker) grab(w, h int) ([]byte, error) {
	rep, err := xproto.GetImage(m.c, xproto.ImageFormatZPixmap, xproto.Drawable(m.root), 0, 0, uint16(w), uint16(h), 0xffffffff).Reply()
	if err != nil {
		return nil, err
	}
	if len(rep.Data) < w*h*4 {
		return nil, errors.New("short capture")
	}
	return rep.Data, nil
}

func near(a, b uint32, tol int) bool {
	for s := 0; s < 24; s += 8 {
		d := int(a>>s&0xff) - int(b>>s&0xff)
		if d < -tol || d > tol {
			return false
		}
	}
	return true
}

// transportThroughput has one viewer ask for whole frames in Raw,
// back to back, for a few seconds: the bytes per second the server and
// its WebSocket transport (deskd's own, or websockify's relay) carry.
func transportThroughput(ctx context.Context, wsURL string) (float64, error) {
	v, err := dialViewer(ctx, wsURL, rawEncodings)
	if err != nil {
		return 0, err
	}
	defer v.conn.Close()
	for range 3 { // warm up
		if err := v.request(false); err != nil {
			return 0, err
		}
		if _, err := v.next(); err != nil {
			return 0, err
		}
	}
	b0, t0 := totalBytes([]*viewer{v}), time.Now()
	for time.Since(t0) < 4*time.Second {
		if err := v.request(false); err != nil {
			return 0, err
		}
		if _, err := v.next(); err != nil {
			return 0, err
		}
	}
	return float64(totalBytes([]*viewer{v})-b0) / time.Since(t0).Seconds() / 1e6, nil
}

// evalDesktopPage evaluates expr in the desktop's data: page through the
// DevTools endpoint at base.
func evalDesktopPage(ctx context.Context, base, expr string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, err := dialPage(ctx, base, func(u string) bool { return strings.HasPrefix(u, "data:text/html") })
	if errors.Is(err, errNoPage) {
		return errors.New("the desktop's page is not open")
	}
	if err != nil {
		return err
	}
	defer c.CloseNow()
	_, err = evaluate(ctx, c, 1, expr)
	return err
}

// errNoPage: no page target's URL matched.
var errNoPage = errors.New("no page target")

// dialPage connects to the first page target of the DevTools endpoint at
// base whose URL match accepts.
func dialPage(ctx context.Context, base string, match func(url string) bool) (*websocket.Conn, error) {
	var list []struct {
		Type                 string `json:"type"`
		URL                  string `json:"url"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := getJSON(ctx, base+"/json/list", &list); err != nil {
		return nil, err
	}
	for _, t := range list {
		if t.Type == "page" && match(t.URL) {
			c, _, err := websocket.Dial(ctx, t.WebSocketDebuggerURL, nil)
			return c, err
		}
	}
	return nil, errNoPage
}
