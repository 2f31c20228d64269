package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cubepod/deskd/cdp"
	"github.com/cubepod/deskd/proc"
	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

// Motion: pages that change faster than a person reads, where a VNC
// server's update loop, not its encoder, decides how many frames a viewer
// sees. Each page counts the frames it draws (window.drawn), steps the
// frame tag (pageframe.go) with each, and toggles a click block (32x32,
// right of the tag) on every mousedown, for the click-to-pixel latency.

// clickScript: the click block and its toggle (for data: URLs).
const clickScript = `const K=document.createElement('div');K.style.cssText='position:fixed;left:40px;bottom:0;width:32px;height:32px;z-index:99;background:rgb(255,0,0)';` +
	`document.body.appendChild(K);let kn=0;addEventListener('mousedown',()=>{kn^=1;K.style.background=kn?'rgb(0,0,255)':'rgb(255,0,0)'},true);window.drawn=0;`

// anim30Page: a full-window canvas animated at 30 fps: gradients shifting
// hue under moving soft discs, photo-like, every pixel changing.
const anim30Page = `data:text/html,<body style='margin:0;overflow:hidden;background:%23000'><canvas id=v></canvas><script>` +
	tagScript + clickScript + `v.width=innerWidth;v.height=innerHeight;const x=v.getContext('2d');let t=0;` +
	`const draw=()=>{t++;const w=v.width,h=v.height,g=x.createLinearGradient(0,0,w,h);` +
	`g.addColorStop(0,'hsl('+(t*3%25360)+',70%25,40%25)');g.addColorStop(1,'hsl('+((t*3+140)%25360)+',80%25,60%25)');x.fillStyle=g;x.fillRect(0,0,w,h);` +
	`for(let i=0;i<14;i++){const cx=(Math.sin(t*0.05+i)*0.45+0.5)*w,cy=(Math.cos(t*0.04+i*1.7)*0.45+0.5)*h,r=60+i*9;` +
	`const rg=x.createRadialGradient(cx,cy,0,cx,cy,r);rg.addColorStop(0,'hsla('+((i*40+t)%25360)+',90%25,70%25,0.9)');rg.addColorStop(1,'hsla(0,0%25,0%25,0)');x.fillStyle=rg;x.fillRect(cx-r,cy-r,2*r,2*r)}` +
	`tick();window.drawn++};setInterval(()=>{if(!window.paused)draw()},33)</script></body>`

// video60Page: a 960x540 canvas drawn at every animation frame (60 a
// second where the browser keeps up): a grainy picture panning under a
// moving highlight, the way video looks to a VNC server; its frame
// number in a bar code at the top left (fidelity.go).
const video60Page = `data:text/html,<body style='margin:0;overflow:hidden;background:%23333'><canvas id=v width=960 height=540 style='position:absolute;left:40px;top:40px'></canvas><script>` +
	tagScript + clickScript + barScript + `const x=v.getContext('2d'),src=document.createElement('canvas');src.width=1440;src.height=810;` +
	`{const s=src.getContext('2d');let seed=3;const rnd=()=>(seed=(seed*1103515245+12345)%252147483648)/2147483648;` +
	`for(let i=0;i<300;i++){s.fillStyle='hsl('+(rnd()*360)+',60%25,'+(30+rnd()*40)+'%25)';s.beginPath();s.arc(rnd()*1440,rnd()*810,10+rnd()*60,0,7);s.fill()}` +
	`const d=s.getImageData(0,0,1440,810);for(let k=0;k<d.data.length;k+=4){const n=(rnd()-0.5)*36;d.data[k]+=n;d.data[k+1]+=n;d.data[k+2]+=n}s.putImageData(d,0,0)}` +
	`let t=0;const draw=()=>{if(!window.paused){t++;const ox=(Math.sin(t*0.011)*0.5+0.5)*480,oy=(Math.cos(t*0.013)*0.5+0.5)*270;x.drawImage(src,ox,oy,960,540,0,0,960,540);` +
	`const g=x.createRadialGradient(480+Math.sin(t*0.03)*300,270,0,480,270,500);g.addColorStop(0,'rgba(255,255,220,0.35)');g.addColorStop(1,'rgba(0,0,0,0)');x.fillStyle=g;x.fillRect(0,0,960,540);bar(x,t);` +
	`tick();window.drawn++}requestAnimationFrame(draw)};requestAnimationFrame(draw)</script></body>`

// dragPage: a page of text under a 520x360 window of text with a title
// bar, which the pointer drags (pressed on the title bar, moved by XTEST:
// startDrag); each move the page draws is a frame. The window goes back
// where it was when the button is released.
const dragPage = `data:text/html,<body style='margin:0;overflow:hidden;user-select:none;background:%23eef;font:15px/1.4 sans-serif'><div id=t style='padding:8px;color:%23333'></div>` +
	`<div id=w style='position:absolute;left:200px;bottom:240px;width:520px;height:360px;box-sizing:border-box;overflow:hidden;background:%23fff;border:1px solid %23667;box-shadow:0 6px 18px rgba(0,0,0,.35)'>` +
	`<div id=h style='height:28px;background:linear-gradient(%235a8,%23386);color:%23fff;padding:0 8px;line-height:28px'>a window</div><div id=c style='padding:8px'></div></div><script>` +
	tagScript + clickScript +
	`const words='the quick brown fox jumps over a lazy dog while seven bright wizards quietly pack their boxes of liquor jugs '.split(' ');` +
	`const text=n=>{let s='';for(let i=0;i<n;i++)s+=words[(i*7+(i>>2))%25words.length]+' ';return s};t.textContent=text(2600);c.textContent=text(260);` +
	`let d=null,px=0,py=0,st=false;h.addEventListener('mousedown',e=>{e.preventDefault();d={x:e.clientX-w.offsetLeft,y:e.clientY-w.offsetTop}});` +
	`addEventListener('mousemove',e=>{if(!d)return;px=e.clientX-d.x;py=e.clientY-d.y;if(!st){st=true;requestAnimationFrame(()=>{st=false;if(!d)return;w.style.left=px+'px';w.style.top=py+'px';w.style.bottom='auto';tick();window.drawn++})}});` +
	`addEventListener('mouseup',()=>{d=null;w.style.left='200px';w.style.top='auto';w.style.bottom='240px'})</script></body>`

// dragTitle is where dragPage's title bar is, from the tag's centre.
var dragTitle = image.Pt(244, -570)

// motionClass is one kind of motion content.
type motionClass struct {
	name, page, describe string
	drag                 bool // the pointer drags the page's window while a viewer watches
	// video is the page's bar-coded canvas (viewport coordinates), whose
	// fidelity is measured (fidelity.go); empty: none.
	video image.Rectangle
}

var motionClasses = []motionClass{
	{name: "30 fps canvas", page: anim30Page, describe: "a full-window canvas animated at 30 fps"},
	{name: "60 fps video", page: video60Page, describe: "a 960x540 grainy picture panned at every animation frame", video: image.Rect(40, 40, 1000, 580)},
	{name: "60 fps drag", page: dragPage, describe: "a 520x360 window of text dragged over a page of text by XTEST at 60 moves a second", drag: true},
}

// Slow link: what a person on a home connection has. Long link: a fast
// path across an ocean.
var (
	slowLink = link{rate: 8e6 / 8, delay: 40 * time.Millisecond}
	longLink = link{rate: 100e6 / 8, delay: 75 * time.Millisecond}
)

// crowd: the viewers besides noVNC in the many-viewers run.
const crowd = 9

// motionSide is one VNC stack the noVNC viewer watches, and what it saw.
type motionSide struct {
	name    string
	url     string               // noVNC's WebSocket (with ?noh264: noVNC does not offer H.264)
	cpu     func() time.Duration // its X server and VNC side
	page    *pageConn            // the page it shows
	tag     image.Point          // the page's tag on its screen
	display string               // its X display
	// per round
	shown, drawn, kbps, cpuFrame, cpuSec, busy, clk50, clk90, slow []float64
	long, quality, longQuality, ten, tenCPU, stalled, ssim         []float64
	h264                                                           int // H.264 rectangles noVNC decoded in the last round's watch
}

// motionScenario: real noVNC against deskd, x11vnc + websockify and
// Xtigervnc + websockify on pages drawing 30 and 60 frames a second.
func motionScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	var figs []Figure
	var notes []string
	for _, mc := range motionClasses {
		if len(c.MotionClasses) > 0 && !slices.ContainsFunc(c.MotionClasses, func(w string) bool { return strings.Contains(mc.name, w) }) {
			continue
		}
		f, n, err := motionMeasure(ctx, c, mc)
		if err != nil {
			return figs, strings.Join(notes, "; "), fmt.Errorf("%s: %w", mc.name, err)
		}
		figs, notes = append(figs, f...), append(notes, n)
	}
	notes = append(notes, fmt.Sprintf("each stack watched alone by real noVNC 1.7 in a headless Chromium (quality 6, compression 2, %s a run); the other stacks' pages paused; CPU is the X server's plus the VNC side's; machine busy: the share of both cores in use meanwhile (noVNC and the browsers included); click: pointer press in noVNC to the page's answer on noVNC's canvas; links simulated in the bench (a bottleneck with a bounded queue, delay each way): slow %g Mbit/s, %v; long %g Mbit/s, %v; JPEG quality: the median IJG quality of the JPEG rectangles a viewer of the bench's own gets in 4 s (from their tables), directly and through the long link; %d viewers: noVNC and %d of the bench's own, which read everything and decode nothing; stalled: noVNC while another viewer keeps asking for updates and reads none", rfbWindow, slowLink.rate*8/1e6, slowLink.delay, longLink.rate*8/1e6, longLink.delay, crowd+1, crowd))
	return figs, strings.Join(notes, "; "), nil
}

// motionMeasure runs one class against deskd, x11vnc + websockify (on
// deskd's Xvfb) and Xtigervnc + websockify (its own display, its own
// Chromium with deskd's flags on the same page). Only the watched
// stack's page draws, so each has the machine to itself.
func motionMeasure(ctx context.Context, c Config, mc motionClass) ([]Figure, string, error) {
	var tools [3]string
	for i, name := range []string{"x11vnc", "websockify", "Xtigervnc"} {
		p, err := exec.LookPath(name)
		if err != nil {
			return nil, "", fmt.Errorf("%s is not installed (apt-get install x11vnc websockify tigervnc-standalone-server)", name)
		}
		tools[i] = p
	}
	chromium, err := findChromium(c)
	if err != nil {
		return nil, "", err
	}
	dk, err := startDeskd(ctx, c)
	if err != nil {
		return nil, "", err
	}
	defer dk.stop()
	display, err := startDesktop(ctx, dk, mc.page)
	if err != nil {
		return nil, "", err
	}
	xvfb := 0
	for pid, comm := range descendants(dk.pid) {
		if comm == "Xvfb" {
			xvfb = pid
		}
	}
	if xvfb == 0 {
		return nil, "", errors.New("no Xvfb under deskd")
	}
	xv, err := startX11vnc(ctx, tools[0], tools[1], display, dk.xauth)
	if err != nil {
		return nil, "", err
	}
	defer xv.stop()
	tv, err := startTigerVNC(ctx, tools[2], tools[1], chromium, mc.page)
	if err != nil {
		return nil, "", err
	}
	defer tv.stop()
	deskdPage := &pageConn{base: "http://" + dk.addr + "/cdp"}
	tigerPage := &pageConn{base: tv.cdpBase}
	defer deskdPage.close()
	defer tigerPage.close()
	// deskd's CPU counts its x264 children's (H.264 is sent to noVNC,
	// which offers it, when x264 is installed); "deskd Tight" is the same
	// deskd to a noVNC that does not offer H.264.
	deskdCPU := encoderCPU(dk.pid, xvfb)
	sides := []*motionSide{
		{name: "deskd", url: "ws://" + dk.addr + "/websockify", cpu: deskdCPU, page: deskdPage, display: display},
		{name: "deskd Tight", url: "ws://" + dk.addr + "/websockify?noh264=1", cpu: deskdCPU, page: deskdPage, display: display},
		{name: "x11vnc+websockify", url: "ws://" + xv.wsAddr + "/", cpu: func() time.Duration { return cpuOf(append(xv.pids(), xvfb)...) }, page: deskdPage, display: display},
		{name: "Xtigervnc+websockify", url: "ws://" + tv.wsAddr + "/", cpu: func() time.Duration { return cpuOf(tv.pids()...) }, page: tigerPage, display: tv.display},
	}
	for _, d := range []struct {
		display string
		sides   []*motionSide
	}{{display, sides[:3]}, {tv.display, sides[3:]}} {
		m, err := newMarker(d.display)
		if err != nil {
			return nil, "", err
		}
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		at, err := m.findTag(fctx)
		cancel()
		m.close()
		if err != nil {
			return nil, "", fmt.Errorf("display %s: %w", d.display, err)
		}
		for _, s := range d.sides {
			s.tag = at
		}
	}
	nv, err := startNoVNC(ctx, chromium, "http://"+dk.addr)
	if err != nil {
		return nil, "", err
	}
	defer nv.close()
	var links motionLinks
	for _, l := range []struct {
		s **shaper
		l link
	}{{&links.slow, slowLink}, {&links.long, longLink}} {
		sh, err := startShaper(ctx, l.l)
		if err != nil {
			return nil, "", err
		}
		defer sh.close()
		*l.s = sh
	}

	for i := range max(1, min(c.Rounds, 3)) {
		for _, s := range sides {
			if err := motionRound(ctx, nv, links, mc, s, []*pageConn{deskdPage, tigerPage}); err != nil {
				return nil, "", fmt.Errorf("%s: %w", s.name, err)
			}
			fmt.Fprintf(c.Log, "  round %d %s %s: %.1f of %.1f page frames a second shown, %.0f kbit/s, %.2f ms CPU a frame (%.0f%% of a core, machine %.0f%% busy); click p50 %.1f p90 %.1f ms; slow link %.1f fps; long link %.1f fps, JPEG quality %.0f (direct %.0f); %d viewers %.1f fps, %.2f ms a frame; stalled viewer %.1f fps; SSIM %.3f; H.264 rectangles %d\n",
				i, mc.name, s.name, last(s.shown), last(s.drawn), last(s.kbps), last(s.cpuFrame), 100*last(s.cpuSec), 100*last(s.busy), last(s.clk50), last(s.clk90), last(s.slow),
				last(s.long), last(s.longQuality), last(s.quality), crowd+1, last(s.ten), last(s.tenCPU), last(s.stalled), last(s.ssim), s.h264)
		}
	}
	d := sides[0]
	var figs []Figure
	for _, p := range sides[1:] {
		peer := "vs " + strings.TrimSuffix(p.name, "+websockify")
		figs = append(figs,
			figure(mc.name+", "+peer+": page frames shown per second", "fps", "higher", d.shown, p.shown),
			figure(mc.name+", "+peer+": page frames drawn per second meanwhile", "fps", "info", d.drawn, p.drawn),
			figure(mc.name+", "+peer+": bandwidth", "kbit/s", "lower", d.kbps, p.kbps),
			figure(mc.name+", "+peer+": CPU per frame shown (X server + VNC)", "ms", "lower", d.cpuFrame, p.cpuFrame),
			figure(mc.name+", "+peer+": CPU (X server + VNC)", "cores", "info", d.cpuSec, p.cpuSec),
			figure(mc.name+", "+peer+": click to pixel p50", "ms", "lower", d.clk50, p.clk50),
			figure(mc.name+", "+peer+": click to pixel p90", "ms", "lower", d.clk90, p.clk90),
			figure(mc.name+", "+peer+": machine busy meanwhile", "share", "info", d.busy, p.busy),
			figure(mc.name+", "+peer+fmt.Sprintf(": page frames shown per second through %g Mbit/s, %v", slowLink.rate*8/1e6, slowLink.delay), "fps", "higher", d.slow, p.slow),
			figure(mc.name+", "+peer+fmt.Sprintf(": page frames shown per second through %g Mbit/s, %v", longLink.rate*8/1e6, longLink.delay), "fps", "higher", d.long, p.long),
			figure(mc.name+", "+peer+": JPEG quality, direct", "IJG", "info", d.quality, p.quality),
			figure(mc.name+", "+peer+fmt.Sprintf(": JPEG quality through %g Mbit/s, %v", longLink.rate*8/1e6, longLink.delay), "IJG", "info", d.longQuality, p.longQuality),
			figure(mc.name+", "+peer+fmt.Sprintf(": page frames shown per second, %d viewers", crowd+1), "fps", "higher", d.ten, p.ten),
			figure(mc.name+", "+peer+fmt.Sprintf(": CPU per frame shown, %d viewers", crowd+1), "ms", "lower", d.tenCPU, p.tenCPU),
			figure(mc.name+", "+peer+": page frames shown per second beside a stalled viewer", "fps", "higher", d.stalled, p.stalled),
		)
		if !mc.video.Empty() {
			figs = append(figs, figure(mc.name+", "+peer+": fidelity, SSIM of the viewer's picture to the screen's", "SSIM", "higher", d.ssim, p.ssim))
		}
	}
	return figs, mc.name + ": " + mc.describe, nil
}

// encoderCPU returns the CPU time so far of deskd (pid), its X server
// and its x264 children: a child that has exited counts with the last
// time read of it (an encoder nobody follows is idle before it stops).
func encoderCPU(pid, xvfb int) func() time.Duration {
	seen := map[int]time.Duration{}
	return func() time.Duration {
		for p, comm := range descendants(pid) {
			if comm == "x264" {
				if t := cpuOf(p); t > seen[p] {
					seen[p] = t
				}
			}
		}
		total := cpuOf(pid, xvfb)
		for _, t := range seen {
			total += t
		}
		return total
	}
}

func last(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	return v[len(v)-1]
}

// motionLinks are the simulated links the rounds use.
type motionLinks struct{ slow, long *shaper }

// motionRound measures side s once: frames, bytes and CPU; clicks; the
// links; many viewers; a stalled viewer. Only its page draws meanwhile;
// on a drag class the pointer drags while noVNC watches, not while it
// clicks.
func motionRound(ctx context.Context, nv *novncViewer, links motionLinks, mc motionClass, s *motionSide, pages []*pageConn) error {
	for _, p := range pages {
		if _, err := p.eval(ctx, fmt.Sprintf("(window.paused = %t, 0)", p != s.page)); err != nil {
			return fmt.Errorf("pause the pages: %w", err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	// dragged runs fn while the pointer drags the page's window, on a
	// drag class.
	dragged := func(fn func() error) error {
		if mc.drag {
			stop, err := startDrag(ctx, s.display, s.tag.Add(dragTitle))
			if err != nil {
				return err
			}
			defer stop()
		}
		return fn()
	}
	watch := func(url string) (r novncResult, err error) {
		err = dragged(func() error {
			r, err = nv.measure(ctx, url, rfbWindow, &s.tag, s.cpu)
			return err
		})
		return r, err
	}
	d0, err := s.page.eval(ctx, "window.drawn")
	if err != nil {
		return err
	}
	t0 := time.Now()
	busy0, all0 := machineTicks()
	r, err := watch(s.url)
	if err != nil {
		return fmt.Errorf("noVNC: %w", err)
	}
	busy1, all1 := machineTicks()
	d1, err := s.page.eval(ctx, "window.drawn")
	if err != nil {
		return err
	}
	s.drawn = append(s.drawn, (d1-d0)/time.Since(t0).Seconds())
	s.h264 = r.h264
	s.shown = append(s.shown, r.pageFPS)
	s.kbps = append(s.kbps, r.pageFPS*r.kbPerPage*8)
	s.cpuFrame = append(s.cpuFrame, r.cpuPerPage)
	s.cpuSec = append(s.cpuSec, r.pageFPS*r.cpuPerPage/1000)
	s.busy = append(s.busy, float64(busy1-busy0)/float64(max(all1-all0, 1)))

	lat, err := nv.clicks(ctx, s.url, s.tag.Add(image.Pt(40, 0)), 30)
	if err != nil {
		return fmt.Errorf("clicks: %w", err)
	}
	slices.Sort(lat)
	s.clk50, s.clk90 = append(s.clk50, percentile(lat, 500)), append(s.clk90, percentile(lat, 900))

	slow, err := watch(links.slow.url(s.url))
	if err != nil {
		return fmt.Errorf("noVNC through the slow link: %w", err)
	}
	s.slow = append(s.slow, slow.pageFPS)
	long, err := watch(links.long.url(s.url))
	if err != nil {
		return fmt.Errorf("noVNC through the long link: %w", err)
	}
	s.long = append(s.long, long.pageFPS)
	for _, q := range []struct {
		url string
		to  *[]float64
	}{{s.url, &s.quality}, {links.long.url(s.url), &s.longQuality}} {
		var v float64
		if err := dragged(func() (err error) {
			v, err = jpegQuality(ctx, q.url, 4*time.Second)
			return err
		}); err != nil {
			return fmt.Errorf("JPEG quality: %w", err)
		}
		*q.to = append(*q.to, v)
	}

	stop, err := others(ctx, s.url, crowd, false)
	if err != nil {
		return fmt.Errorf("%d viewers: %w", crowd, err)
	}
	ten, err := watch(s.url)
	stop()
	if err != nil {
		return fmt.Errorf("noVNC among %d viewers: %w", crowd+1, err)
	}
	s.ten, s.tenCPU = append(s.ten, ten.pageFPS), append(s.tenCPU, ten.cpuPerPage)

	if stop, err = others(ctx, s.url, 1, true); err != nil {
		return fmt.Errorf("a stalled viewer: %w", err)
	}
	time.Sleep(2 * time.Second) // its buffers fill
	stalled, err := watch(s.url)
	stop()
	if err != nil {
		return fmt.Errorf("noVNC beside a stalled viewer: %w", err)
	}
	s.stalled = append(s.stalled, stalled.pageFPS)

	if !mc.video.Empty() {
		// The canvas on the screen: the tag's centre is 16 pixels in from
		// the viewport's bottom left.
		vh, err := s.page.eval(ctx, "innerHeight")
		if err != nil {
			return err
		}
		origin := image.Pt(s.tag.X-16, s.tag.Y+16-int(vh))
		v, err := nv.fidelity(ctx, s.url, s.display, mc.video.Add(origin), 15)
		if err != nil {
			return fmt.Errorf("fidelity: %w", err)
		}
		s.ssim = append(s.ssim, v)
	}
	return nil
}

// novncClicks: noVNC (connected) presses and releases the pointer in the
// middle of the screen %d times, and times each press until its canvas
// shows the click block (at %s) in its other colour: checked after every
// flip of noVNC's display, when decoded pixels reach the canvas.
const novncClicks = `(async () => {
  const nv = window.nv, {default: RFB} = await import("/vendor/novnc/core/rfb.js");
  const canvas = nv.el.querySelector("canvas"), ctx = canvas.getContext("2d", {willReadFrequently: true});
  const k = %s, sleep = ms => new Promise(r => setTimeout(r, ms));
  const colour = () => {
    const p = ctx.getImageData(k.x, k.y, 1, 1).data;
    return p[0] > 128 && p[2] < 128 ? 0 : p[2] > 128 && p[0] < 128 ? 1 : -1;
  };
  const disp = nv.rfb._display, flip = disp.flip.bind(disp);
  let want = -1, t0 = 0, done = null;
  disp.flip = q => {
    flip(q);
    if (want >= 0 && colour() === want) { want = -1; done(performance.now() - t0); }
  };
  const out = [];
  for (let i = 0; i < %d; i++) {
    const was = colour();
    if (was < 0) throw new Error("the click block is not on noVNC's canvas at " + k.x + "," + k.y);
    const got = new Promise(r => done = r);
    want = was ^ 1;
    t0 = performance.now();
    RFB.messages.pointerEvent(nv.rfb._sock, nv.el.clientWidth >> 1, nv.el.clientHeight >> 1, 1);
    RFB.messages.pointerEvent(nv.rfb._sock, nv.el.clientWidth >> 1, nv.el.clientHeight >> 1, 0);
    const ms = await Promise.race([got, sleep(3000).then(() => -1)]);
    want = -1;
    if (ms < 0) throw new Error("no answer to a click in 3 s");
    out.push(ms);
    await sleep(120 + Math.random() * 180);
  }
  nv.rfb.disconnect();
  return JSON.stringify(out);
})()`

// clicks connects noVNC to wsURL and returns n click-to-pixel latencies
// (ms) for the click block at k.
func (v *novncViewer) clicks(ctx context.Context, wsURL string, k image.Point, n int) ([]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*4*time.Second+30*time.Second)
	defer cancel()
	if _, err := v.eval(ctx, fmt.Sprintf(novncConnect, wsURL)); err != nil {
		return nil, err
	}
	at, _ := json.Marshal(map[string]int{"x": k.X, "y": k.Y})
	out, err := v.eval(ctx, fmt.Sprintf(novncClicks, at, n))
	if err != nil {
		return nil, err
	}
	var lat []float64
	if err := json.Unmarshal([]byte(out), &lat); err != nil || len(lat) != n {
		return nil, fmt.Errorf("noVNC's clicks %q: %v, want %d", out, err, n)
	}
	return lat, nil
}

// pageConn evaluates expressions in the data: page of a DevTools
// endpoint, on one connection.
type pageConn struct {
	base string
	v    *novncViewer // only its connection and ids
}

// eval evaluates expr in the page. The connection is idle between
// calls, for a minute and more, and reads nothing meanwhile: a relay that
// pings it (deskd's does) may end it, so a call that finds it gone
// dials again once.
func (p *pageConn) eval(ctx context.Context, expr string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var s string
	var err error
	for try := range 2 {
		if p.v == nil {
			c, err := dialPage(ctx, p.base, func(u string) bool { return strings.HasPrefix(u, "data:text/html") })
			if err != nil {
				return 0, fmt.Errorf("the page at %s: %w", p.base, err)
			}
			c.SetReadLimit(1 << 20)
			p.v = &novncViewer{c: c}
		}
		if s, err = p.v.eval(ctx, "String("+expr+")"); err == nil || try == 1 || ctx.Err() != nil {
			break
		}
		p.close()
		p.v = nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(s, 64)
}

func (p *pageConn) close() {
	if p.v != nil {
		p.v.c.CloseNow()
	}
}

// vncStack is a VNC server with websockify in front of it.
type vncStack struct {
	server, ws *exec.Cmd
	wsAddr     string
	display    string
	chrome     *exec.Cmd // Xtigervnc's own browser
	cdpBase    string
	dir        string
}

func (s *vncStack) pids() []int {
	return append(proc.LiveGroupMembers(s.server.Process.Pid), proc.LiveGroupMembers(s.ws.Process.Pid)...)
}

func (s *vncStack) stop() {
	for _, c := range []*exec.Cmd{s.chrome, s.ws, s.server} {
		if c != nil && c.Process != nil {
			killGroup(c.Process.Pid)
			c.Wait()
		}
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// startWebsockify puts websockify in front of the VNC port vnc.
func (s *vncStack) startWebsockify(ctx context.Context, websockify string, vnc int) error {
	wsPort, _ := freePort()
	s.wsAddr = "127.0.0.1:" + strconv.Itoa(wsPort)
	s.ws = group(ctx, websockify, s.wsAddr, "127.0.0.1:"+strconv.Itoa(vnc))
	if err := s.ws.Start(); err != nil {
		return err
	}
	for _, a := range []string{"127.0.0.1:" + strconv.Itoa(vnc), s.wsAddr} {
		if err := waitTCP(ctx, a, 20*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// startX11vnc serves display with x11vnc + websockify.
func startX11vnc(ctx context.Context, x11vnc, websockify, display, xauth string) (*vncStack, error) {
	vnc, _ := freePort()
	s := &vncStack{display: display}
	s.server = group(ctx, x11vnc, "-display", display, "-auth", xauth, "-rfbport", strconv.Itoa(vnc), "-localhost", "-shared", "-forever", "-nopw", "-quiet")
	s.server.Env = append(os.Environ(), "HOME="+os.TempDir())
	if err := s.server.Start(); err != nil {
		return nil, err
	}
	if err := s.startWebsockify(ctx, websockify, vnc); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startTigerVNC starts Xtigervnc (X server and VNC server in one) on a
// display of its own, websockify, and a Chromium with deskd's flags
// showing page.
func startTigerVNC(ctx context.Context, xtigervnc, websockify, chromium, page string) (*vncStack, error) {
	dir, err := os.MkdirTemp("", "deskd-bench-tigervnc-")
	if err != nil {
		return nil, err
	}
	n := freeDisplay()
	vnc, _ := freePort()
	cdpPort, _ := freePort()
	s := &vncStack{display: ":" + strconv.Itoa(n), dir: dir, cdpBase: "http://127.0.0.1:" + strconv.Itoa(cdpPort)}
	s.server = group(ctx, xtigervnc, s.display, "-geometry", "1280x800", "-depth", "24", "-SecurityTypes", "None",
		"-localhost", "-rfbport", strconv.Itoa(vnc), "-AlwaysShared", "-nolisten", "tcp")
	s.server.Stdout, s.server.Stderr = nil, nil
	if err := s.server.Start(); err != nil {
		s.stop()
		return nil, err
	}
	if err := s.startWebsockify(ctx, websockify, vnc); err != nil {
		s.stop()
		return nil, fmt.Errorf("Xtigervnc: %w", err)
	}
	flags := cdp.Flags(cdp.ChromiumConfig{ProfileDir: filepath.Join(dir, "profile"), Port: cdpPort,
		Width: 1280, Height: 800, NoSandbox: os.Geteuid() == 0, URL: page})
	s.chrome = group(ctx, chromium, flags...)
	s.chrome.Env = append(os.Environ(), "DISPLAY="+s.display)
	if err := s.chrome.Start(); err != nil {
		s.stop()
		return nil, err
	}
	if err := waitHTTP(ctx, s.cdpBase+"/json/version", 30*time.Second); err != nil {
		s.stop()
		return nil, fmt.Errorf("Xtigervnc's Chromium: %w", err)
	}
	return s, nil
}

// startDrag presses the pointer's button at title on display and moves
// the pointer by XTEST 60 times a second, around where it started, until
// stop releases it there.
func startDrag(ctx context.Context, display string, title image.Point) (stop func(), err error) {
	c, err := xgb.NewConnDisplay(display)
	if err != nil {
		return nil, fmt.Errorf("drag: %w", err)
	}
	if err := xtest.Init(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("drag: XTEST: %w", err)
	}
	root := xproto.Setup(c).DefaultScreen(c).Root
	fake := func(typ, button byte, p image.Point) {
		xtest.FakeInput(c, typ, button, 0, root, int16(p.X), int16(p.Y), 0)
	}
	fake(xproto.MotionNotify, 0, title)
	fake(xproto.ButtonPress, 1, title)
	if _, err := xproto.GetInputFocus(c).Reply(); err != nil {
		c.Close()
		return nil, fmt.Errorf("drag: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second / 60)
		defer t.Stop()
		t0 := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			s := time.Since(t0).Seconds()
			fake(xproto.MotionNotify, 0, title.Add(image.Pt(int(280*math.Sin(2*math.Pi*s/4)), int(100*math.Sin(2*math.Pi*s/3)))))
			xproto.GetInputFocus(c).Reply() // one move at a time: no queue in the X server
		}
	}()
	return func() {
		cancel()
		<-done
		fake(xproto.MotionNotify, 0, title)
		fake(xproto.ButtonRelease, 1, title)
		xproto.GetInputFocus(c).Reply()
		c.Close()
	}, nil
}

// machineTicks returns the CPU ticks of the whole machine so far: those
// spent working, and all (/proc/stat).
func machineTicks() (busy, all uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		if i >= 8 { // guest time is counted in user time already
			break
		}
		all += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, all
}
