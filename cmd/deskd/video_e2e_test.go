package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
)

// animationJS covers the desktop's page with a canvas redrawn every
// animation frame: a flat colour whose red channel counts frames and a
// white square that moves.
const animationJS = `(() => {
  const c = document.createElement("canvas");
  c.id = "anim"; c.width = innerWidth; c.height = innerHeight;
  c.style = "position:fixed;left:0;top:0;z-index:99";
  document.body.appendChild(c);
  const g = c.getContext("2d");
  window.animFrames = 0; window.animStop = false;
  const step = () => {
    if (window.animStop) { c.remove(); return; }
    const f = ++window.animFrames;
    g.fillStyle = "rgb(" + ((f * 5) % 200 + 20) + ",128,64)";
    g.fillRect(0, 0, c.width, c.height);
    g.fillStyle = "#fff";
    g.fillRect((f * 7) % (c.width - 100), 100, 100, 100);
    requestAnimationFrame(step);
  };
  step();
  return "ok";
})()`

// probeJS counts, in the viewer, the H.264 rectangles noVNC decodes and
// samples the canvas's centre colour at each: "n r g b|r g b|...".
const probeJS = `(() => {
  const rfb = window.deskd.rfb, d = rfb._decoders[50];
  if (!window.h264Seen) {
    window.h264Seen = 0; window.h264Samples = [];
    const orig = d.decodeRect.bind(d);
    d.decodeRect = (...a) => {
      const done = orig(...a);
      if (done) { window.h264Seen++; window.h264Last = performance.now(); }
      return done;
    };
    window.h264Timer = setInterval(() => {
      const c = document.querySelector("#screen canvas");
      const p = c.getContext("2d").getImageData(c.width >> 1, (c.height * 3) >> 2, 1, 1).data;
      window.h264Samples.push(p[0] + " " + p[1] + " " + p[2]);
    }, 50);
  }
  return "ok";
})()`

// Real noVNC in headless Chromium, through the panel: a page animated at
// the display's frame rate arrives as H.264 (noVNC decodes encoding 50
// with WebCodecs and draws it), in the right colours, the encoder runs as
// the GUI user; when the animation stops the canvas is the display again.
func TestH264InBrowser(t *testing.T) {
	testenv.LookPath(t, "x264")
	chromium := testenv.Chromium(t)
	e := newInstall(t)
	e.useDisplay(t)
	deskd := serveDeskd(t, e)
	gw := gateway(t, map[string]*url.URL{"sb1": deskd})
	sr, st := startWith(t, gw, keysPage) // a data: page, which desktopPage finds

	b := newBrowser(t, chromium)
	b.load(sr.DesktopURL, `document.body.dataset.state === "connected"`)
	if got := b.eval(t, `String(!!window.deskd.rfb._decoders[50] && "VideoDecoder" in window)`); got != "true" {
		t.Fatalf("noVNC in this Chromium decodes no H.264 (WebCodecs: %s)", got)
	}
	b.eval(t, probeJS)
	page := desktopPage(t, strings.Replace(sr.CDPURL, "/vnc.html?autoconnect=true&resize=scale", "", 1))
	waitDesktop(t, page, animationJS+` === "ok"`)

	b.waitJS(t, `window.h264Seen >= 60`)
	samples := strings.Split(b.eval(t, `(clearInterval(window.h264Timer), window.h264Samples.join("|"))`), "|")
	// Of the centre samples taken since video began, the flat colour's
	// green and blue are right within a little (4:2:0, a quantiser), and
	// its red moves: frames, not one picture.
	reds, good := map[int]bool{}, 0
	for _, s := range samples {
		var r, g, bl int
		fmt.Sscan(s, &r, &g, &bl)
		if abs(g-128) <= 10 && abs(bl-64) <= 10 {
			good++
			reds[r/8] = true
		}
	}
	if good < len(samples)/2 || len(reds) < 5 {
		t.Fatalf("canvas centre samples %v: %d of %d show the animation's colours, %d distinct reds", samples, good, len(samples), len(reds))
	}
	t.Logf("noVNC decoded %s H.264 rectangles; %d of %d samples of the canvas showed the animation, %d distinct frames",
		b.eval(t, `String(window.h264Seen)`), good, len(samples), len(reds))

	// x264 runs as the GUI user (deskd's own, or 1000 when started as root).
	pids := x264Procs(e.runDir)
	if len(pids) == 0 {
		t.Fatal("no x264 process while video is sent")
	}
	for _, pid := range pids {
		fi, err := os.Stat(filepath.Join("/proc", pid))
		if err != nil {
			continue
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; os.Geteuid() == 0 && uid != 1000 {
			t.Errorf("x264 (pid %s) runs as uid %d, want the GUI user 1000", pid, uid)
		}
	}

	// Still again: the region ends as video and comes back as pixels.
	waitDesktop(t, page, `(window.animStop = true, true)`)
	b.waitJS(t, `performance.now() - window.h264Last > 1500`)
	compareCanvas(t, b, st["display"].(string))
	// Without viewers the stream stops, and its encoder with it.
	b.load("about:blank", `true`)
	deadline := time.Now().Add(15 * time.Second)
	for len(x264Procs(e.runDir)) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("x264 still runs 15 s after video ended and its viewer left")
		}
		time.Sleep(100 * time.Millisecond) // no event for another process's exit
	}
}

// x264Procs lists the x264 processes of the deskd whose run dir is
// runDir (their key-frame file is there).
func x264Procs(runDir string) []string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) == "x264" && strings.Contains(string(b), runDir) {
			out = append(out, e.Name())
		}
	}
	return out
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
