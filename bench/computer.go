package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/cubepod/deskd/x11"
)

// clickPage flips its whole background between two colours on every
// mouse button press, so a click is visible at any pixel.
const clickPage = `data:text/html,<body style='margin:0;height:100vh;background:%23102030'><script>` +
	`let on=false;addEventListener('mousedown',()=>{on=!on;document.body.style.background=on?'%23f0e0d0':'%23102030'})</script></body>`

// computerScenario: what an agent that works with pixels waits for.
// deskd: GET /computer/screenshot and POST /computer/actions, served by
// the daemon from its X connection. Peer: what agent sandboxes spawn per
// action (e2b desktop, the Anthropic reference demo): ImageMagick's
// `import -window root png:-` and `xdotool`, on the same display.
func computerScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	xdotool, err := exec.LookPath("xdotool")
	if err != nil {
		return nil, "", errors.New("xdotool is not installed (apt-get install xdotool)")
	}
	imp, err := exec.LookPath("import")
	if err != nil {
		return nil, "", errors.New("ImageMagick's import is not installed (apt-get install imagemagick)")
	}
	dk, err := startDeskd(ctx, c)
	if err != nil {
		return nil, "", err
	}
	defer dk.stop()
	base := "http://" + dk.addr
	display, err := startDesktop(ctx, dk, clickPage)
	if err != nil {
		return nil, "", err
	}
	scr, err := x11.OpenScreen(display, nil)
	if err != nil {
		return nil, "", err
	}
	defer scr.Close()
	w, h := scr.Size()
	probe := image.Pt(w/2, h*5/8) // inside the page
	pix := make([]byte, w*h*4)
	colour := func() uint32 {
		scr.Capture(image.Rectangle{Min: probe, Max: probe.Add(image.Pt(1, 1))}, pix, w*4)
		i := (probe.Y*w + probe.X) * 4
		return uint32(pix[i])<<16 | uint32(pix[i+1])<<8 | uint32(pix[i+2])
	}
	env := append(os.Environ(), "DISPLAY="+display, "XAUTHORITY="+dk.xauth)
	run := func(name string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Env = env
		return cmd.Output()
	}
	const settle = 100 * time.Millisecond
	// Both sides wait for the page first: Chromium paints it after start.
	if err := poll(ctx, 20*time.Second, "the click page", func() error {
		if colour() != 0x302010 { // #102030 as B, G, R bytes
			return errors.New("not painted")
		}
		return nil
	}); err != nil {
		return nil, "", err
	}

	shotDeskd := func() ([]byte, error) { return getBytes(ctx, base+"/computer/screenshot") }
	// A settled screenshot of a screen that is still: deskd knows from
	// DAMAGE that it has been quiet; the peer sleeps its settle time.
	stillDeskd := func() ([]byte, error) {
		return getBytes(ctx, fmt.Sprintf("%s/computer/screenshot?settle_ms=%d", base, settle.Milliseconds()))
	}
	shotPeer := func() ([]byte, error) { return run(imp, "-window", "root", "png:-") }
	stillPeer := func() ([]byte, error) {
		time.Sleep(settle) // the peer's fixed settle time, as measured
		return shotPeer()
	}
	clickDeskd := func() error {
		a := fmt.Sprintf(`{"actions":[{"action":"left_click","coordinate":[%d,%d]}]}`, probe.X, probe.Y)
		return postJSON(ctx, base+"/computer/actions", []byte(a), nil)
	}
	clickPeer := func() error {
		_, err := run(xdotool, "mousemove", fmt.Sprint(probe.X), fmt.Sprint(probe.Y), "click", "1")
		return err
	}
	// visible times a click until the probe pixel changes colour.
	visible := func(click func() error) (float64, error) {
		before := colour()
		t0 := time.Now()
		if err := click(); err != nil {
			return 0, err
		}
		for colour() == before {
			if time.Since(t0) > 10*time.Second {
				return 0, errors.New("the click never showed on the screen")
			}
			time.Sleep(200 * time.Microsecond) // polling the X server: no event for "painted"
		}
		return ms(time.Since(t0)), nil
	}
	// settledShot: click, then a screenshot meant to show its result;
	// it reports whether it does. deskd waits for the screen to be quiet
	// (100 ms); the peer sleeps a fixed 100 ms, as such sandboxes do.
	shows := func(b []byte, want uint32) bool {
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			return false
		}
		r, g, bl, _ := img.At(probe.X, probe.Y).RGBA()
		return (r>>8)<<16|(g>>8)<<8|bl>>8 == want
	}
	settledDeskd := func() ([]byte, error) {
		a := fmt.Sprintf(`{"actions":[{"action":"left_click","coordinate":[%d,%d]}],"screenshot":"after","settle_ms":%d}`, probe.X, probe.Y, settle.Milliseconds())
		var ans struct {
			Screenshot struct{ Data []byte }
		}
		err := postJSON(ctx, base+"/computer/actions", []byte(a), &ans)
		return ans.Screenshot.Data, err
	}
	settledPeer := func() ([]byte, error) {
		if err := clickPeer(); err != nil {
			return nil, err
		}
		time.Sleep(settle) // the peer's fixed settle time, as measured
		return shotPeer()
	}
	flip := func(c uint32) uint32 { // the colour after one more click, as RGB
		if c == 0x302010 {
			return 0xf0e0d0
		}
		return 0x102030
	}

	const perRound = 10
	var dShot, pShot, dStill, pStill, dClick, pClick, dSettled, pSettled, dShows, pShows []float64
	rounds := max(1, min(c.Rounds, 5))
	for i := range rounds {
		var ds, ps, dq, pq, dc, pc, dst, pst []float64
		dOK, pOK := 0, 0
		for range perRound {
			for _, side := range []struct {
				shot, still, settled func() ([]byte, error)
				click                func() error
				s, q, c, t           *[]float64
				ok                   *int
			}{{shotDeskd, stillDeskd, settledDeskd, clickDeskd, &ds, &dq, &dc, &dst, &dOK}, {shotPeer, stillPeer, settledPeer, clickPeer, &ps, &pq, &pc, &pst, &pOK}} {
				t0 := time.Now()
				b, err := side.shot()
				if err != nil || len(b) == 0 {
					return nil, "", fmt.Errorf("screenshot: %v", err)
				}
				*side.s = append(*side.s, ms(time.Since(t0)))
				t0 = time.Now()
				if b, err = side.still(); err != nil || len(b) == 0 {
					return nil, "", fmt.Errorf("settled screenshot: %v", err)
				}
				*side.q = append(*side.q, ms(time.Since(t0)))
				d, err := visible(side.click)
				if err != nil {
					return nil, "", err
				}
				*side.c = append(*side.c, d)
				want := flip(colour())
				t0 = time.Now()
				b, err = side.settled()
				if err != nil {
					return nil, "", fmt.Errorf("settled screenshot: %v", err)
				}
				*side.t = append(*side.t, ms(time.Since(t0)))
				if shows(b, want) {
					*side.ok++
				}
				// Let the page settle before the next side's turn.
				time.Sleep(2 * settle)
			}
		}
		dShot, pShot = append(dShot, median(ds)), append(pShot, median(ps))
		dStill, pStill = append(dStill, median(dq)), append(pStill, median(pq))
		dClick, pClick = append(dClick, median(dc)), append(pClick, median(pc))
		dSettled, pSettled = append(dSettled, median(dst)), append(pSettled, median(pst))
		dShows, pShows = append(dShows, 100*float64(dOK)/perRound), append(pShows, 100*float64(pOK)/perRound)
		fmt.Fprintf(c.Log, "  round %d: screenshot %.1f vs %.1f ms; settled, still screen %.1f vs %.1f ms; click visible %.1f vs %.1f ms; click+settled screenshot %.0f vs %.0f ms, showing the click %d%% vs %d%%\n",
			i, dShot[i], pShot[i], dStill[i], pStill[i], dClick[i], pClick[i], dSettled[i], pSettled[i], dOK*100/perRound, pOK*100/perRound)
	}
	return []Figure{
		figure(fmt.Sprintf("screenshot, %dx%d PNG (request to bytes)", w, h), "ms", "lower", dShot, pShot),
		figure("settled screenshot of a still screen", "ms", "lower", dStill, pStill),
		figure("click until visible on screen", "ms", "lower", dClick, pClick),
		figure("click, then settled screenshot", "ms", "lower", dSettled, pSettled),
		figure("settled screenshots showing the click", "%", "higher", dShows, pShows),
	}, "peer: xdotool and ImageMagick import spawned per action on the same display; settled: deskd waits for 100 ms without damage, the peer sleeps 100 ms", nil
}

func getBytes(ctx context.Context, u string) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: %s %.200s", u, resp.Status, b)
	}
	return b, err
}

// startDesktop starts deskd's desktop on page and returns its display;
// the bench process's own X clients then present the display's cookie.
func startDesktop(ctx context.Context, dk *server, page string) (string, error) {
	body, _ := json.Marshal(map[string]string{"url": page})
	var st struct{ Display string }
	if err := postJSON(ctx, "http://"+dk.addr+"/api/desktop/start", body, &st); err != nil || st.Display == "" {
		return "", fmt.Errorf("start the desktop: no display (%v)", err)
	}
	os.Setenv("XAUTHORITY", dk.xauth)
	return st.Display, nil
}

// postJSON posts body as JSON and decodes a 200 answer into v (if set).
func postJSON(ctx context.Context, u string, body []byte, v any) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s %.300s", u, resp.Status, b)
	}
	if v != nil {
		return json.Unmarshal(b, v)
	}
	return nil
}
