package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// novncViewer is the measuring viewer a browser user is: noVNC's core
// RFB (the copy deskd embeds, 1.7) in a headless Chromium, with the
// bench's settings (JPEG quality 6, compression 2). Bytes are counted
// on its WebSocket; frames by sampling its canvas at every animation
// frame (scaled to 320×200 and compared with the last sample), so a
// frame is a change a user could see, however the server split it.
type novncViewer struct {
	cmd *exec.Cmd
	dir string
	c   *websocket.Conn
	id  int
}

// startNoVNC starts a headless Chromium showing a page of origin (deskd's
// HTTP address), which serves noVNC's modules.
func startNoVNC(ctx context.Context, chromium, origin string) (*novncViewer, error) {
	dir, err := os.MkdirTemp("", "deskd-bench-novnc-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	v := &novncViewer{dir: dir}
	v.cmd = group(ctx, chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--no-first-run",
		"--disable-background-timer-throttling", "--disable-renderer-backgrounding",
		"--window-size=1400,900", "--user-data-dir="+dir, "--remote-debugging-port="+strconv.Itoa(port),
		origin+"/vendor/novnc/core/base64.js") // any page of deskd's: modules load same-origin
	if err := v.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := v.connect(ctx, "http://127.0.0.1:"+strconv.Itoa(port)); err != nil {
		v.close()
		return nil, fmt.Errorf("headless chromium for noVNC: %w", err)
	}
	// deskd's page must have loaded (not the blank one before it) for
	// noVNC's modules to be imported from it.
	want := origin + " complete"
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := v.eval(ctx, `location.origin + " " + document.readyState`)
		if err == nil && got == want {
			return v, nil
		}
		if time.Now().After(deadline) {
			v.close()
			return nil, fmt.Errorf("headless chromium for noVNC: page %q (%v), want %q", got, err, want)
		}
	}
}

func (v *novncViewer) connect(ctx context.Context, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		c, err := dialPage(ctx, base, func(u string) bool { return strings.HasSuffix(u, "base64.js") })
		if err == nil {
			c.SetReadLimit(16 << 20)
			v.c = c
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no page target: %w", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (v *novncViewer) close() {
	if v.c != nil {
		v.c.CloseNow()
	}
	killGroup(v.cmd.Process.Pid)
	v.cmd.Wait()
	os.RemoveAll(v.dir)
}

// novncConnect connects noVNC to %q (the RFB WebSocket) and waits a
// second for the first full frame.
const novncConnect = `(async () => {
  const {default: RFB} = await import("/vendor/novnc/core/rfb.js");
  document.body.replaceChildren();
  const el = document.createElement("div");
  el.style.cssText = "width:1280px;height:800px";
  document.body.appendChild(el);
  const errors = [];
  if (!console.error.kept) { // noVNC says why it gave up on the console only
    const e = console.error, kept = (...a) => { (window.nv?.errors ?? errors).push(a.join(" ")); e(...a); };
    kept.kept = true;
    console.error = kept;
    (await import("/vendor/novnc/core/util/logging.js")).initLogging("error"); // its Log takes console.error when set
  }
  const url = %q;
  if (!RFB.messages.clientEncodings.wrapped) { // ?noh264: noVNC as if its browser had no H.264
    const ce = RFB.messages.clientEncodings;
    RFB.messages.clientEncodings = (sock, encs) => ce(sock, window.noH264 ? encs.filter(e => e !== 50) : encs);
    RFB.messages.clientEncodings.wrapped = true;
  }
  window.noH264 = url.includes("noh264");
  const ws = new WebSocket(url, ["binary"]);
  const nv = window.nv = {bytes: 0, el, errors, h264: 0};
  ws.addEventListener("message", e => { nv.bytes += e.data.byteLength ?? e.data.size ?? e.data.length; });
  nv.rfb = new RFB(el, ws, {shared: true});
  const d50 = nv.rfb._decoders[50]; // H.264 rectangles decoded, counted
  if (d50) {
    const decode = d50.decodeRect.bind(d50);
    d50.decodeRect = (...a) => { const done = decode(...a); if (done) nv.h264++; return done; };
  }
  nv.rfb.qualityLevel = 6;
  nv.rfb.compressionLevel = 2;
  await new Promise((ok, fail) => {
    nv.rfb.addEventListener("connect", ok);
    nv.rfb.addEventListener("disconnect", () => fail(new Error("noVNC disconnected")));
  });
  await new Promise(r => setTimeout(r, 1000));
  return "ok";
})()`

// novncSample samples noVNC's canvas at every animation frame for %d ms,
// disconnects, and resolves to {frames, pages, seconds, bytes, h264}
// (H.264 rectangles decoded since it connected); with the
// page's tag (%s: its centre and colours, or null) pages counts the page
// frames the canvas showed (pageframe.go).
const novncSample = `(async () => {
  const nv = window.nv;
  const canvas = nv.el.querySelector("canvas");
  if (!canvas) throw new Error("noVNC disconnected: " + nv.errors.join("; "));
  const small = document.createElement("canvas");
  small.width = 320; small.height = 200;
  const sc = small.getContext("2d", {willReadFrequently: true});
  const tag = %s, full = canvas.getContext("2d");
  const tagClass = () => {
    const p = full.getImageData(tag.x, tag.y, 1, 1).data;
    const near = (a, b) => Math.abs(a - b) <= tag.tolerance;
    return tag.colours.findIndex(c => near(p[0], c >> 16 & 255) && near(p[1], c >> 8 & 255) && near(p[2], c & 255));
  };
  let prev = null, frames = 0, pages = 0, lastTag = -1;
  const b0 = nv.bytes, t0 = performance.now();
  await new Promise(done => {
    const tick = () => {
      sc.drawImage(canvas, 0, 0, 320, 200);
      const d = new Uint32Array(sc.getImageData(0, 0, 320, 200).data.buffer);
      if (prev) {
        for (let i = 0; i < d.length; i++) if (d[i] !== prev[i]) { frames++; break; }
      }
      prev = d;
      if (tag) {
        const k = tagClass();
        if (k >= 0 && k !== lastTag) {
          if (lastTag >= 0) pages++;
          lastTag = k;
        }
      }
      if (performance.now() - t0 < %d) requestAnimationFrame(tick); else done();
    };
    requestAnimationFrame(tick);
  });
  const seconds = (performance.now() - t0) / 1000, bytes = nv.bytes - b0;
  nv.rfb.disconnect();
  return JSON.stringify({frames, pages, seconds, bytes, h264: nv.h264});
})()`

// eval evaluates expr, awaiting its promise, and returns its string value.
func (v *novncViewer) eval(ctx context.Context, expr string) (string, error) {
	v.id++
	b, err := cdpCall(ctx, v.c, v.id, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true})
	if err != nil {
		return "", err
	}
	var reply struct {
		Result struct {
			Result           struct{ Value json.RawMessage }
			ExceptionDetails *struct {
				Text      string
				Exception struct{ Description string }
			}
		}
	}
	if err := json.Unmarshal(b, &reply); err != nil {
		return "", err
	}
	if e := reply.Result.ExceptionDetails; e != nil {
		return "", fmt.Errorf("noVNC: %s %s", e.Text, e.Exception.Description)
	}
	var out string
	if err := json.Unmarshal(reply.Result.Result.Value, &out); err != nil {
		return "", fmt.Errorf("noVNC's page answered %.200s", reply.Result.Result.Value)
	}
	return out, nil
}

// novncResult is one run of the noVNC viewer.
type novncResult struct {
	fps, kbPerFrame, cpuPerFrame   float64 // frames: canvas changes
	pageFPS, kbPerPage, cpuPerPage float64 // page frames shown, with a tag
	h264                           int     // H.264 rectangles it decoded
	bytes, seconds                 float64 // received over the sampled window
	cpu                            time.Duration
}

// measure runs noVNC against wsURL for window, with cpu the server's
// CPU time so far and tag the page's frame tag (nil: none).
func (v *novncViewer) measure(ctx context.Context, wsURL string, window time.Duration, tag *image.Point, cpu func() time.Duration) (novncResult, error) {
	ctx, cancel := context.WithTimeout(ctx, window+30*time.Second)
	defer cancel()
	if _, err := v.eval(ctx, fmt.Sprintf(novncConnect, wsURL)); err != nil {
		return novncResult{}, err
	}
	cpu0 := cpu()
	out, err := v.eval(ctx, fmt.Sprintf(novncSample, tagJS(tag), window.Milliseconds()))
	cpu1 := cpu()
	if err != nil {
		return novncResult{}, err
	}
	var r struct {
		Frames  int
		Pages   int
		Seconds float64
		Bytes   float64
		H264    int
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		return novncResult{}, fmt.Errorf("noVNC's result %q: %w", out, err)
	}
	if r.Frames == 0 || r.Seconds <= 0 {
		return novncResult{}, errors.New("noVNC's canvas never changed")
	}
	res := novncResult{
		fps:         float64(r.Frames) / r.Seconds,
		kbPerFrame:  r.Bytes / 1000 / float64(r.Frames),
		cpuPerFrame: float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(r.Frames),
		h264:        r.H264,
		bytes:       r.Bytes,
		seconds:     r.Seconds,
		cpu:         cpu1 - cpu0,
	}
	if tag != nil {
		if r.Pages == 0 {
			return novncResult{}, errors.New("noVNC's canvas never showed a new page frame (the page's tag never changed)")
		}
		res.pageFPS = float64(r.Pages) / r.Seconds
		res.kbPerPage = r.Bytes / 1000 / float64(r.Pages)
		res.cpuPerPage = float64((cpu1 - cpu0).Microseconds()) / 1000 / float64(r.Pages)
	}
	return res, nil
}
