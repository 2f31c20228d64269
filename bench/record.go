package bench

import (
	"context"
	"fmt"
	"time"
)

// recordWindow is one measured stretch: a full-picture interval of
// deskd's default (30 s), so every window carries as many keyframes.
const recordWindow = 30 * time.Second

// recordSettle is how long a recording runs before it is measured.
const recordSettle = 3 * time.Second

// recordScenario: what recording the desktop costs. The same page is
// watched by one real noVNC (headless Chromium, quality 6, compression
// 2) with the desktop recording off, then on, alternately: deskd's CPU
// a second with the recorder against without it (the peer here is deskd
// itself, unrecorded), and the recording's bytes a second against what
// that viewer received meanwhile.
func recordScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	chromium, err := findChromium(c)
	if err != nil {
		return nil, "", err
	}
	var figs []Figure
	for _, content := range []struct{ name, page string }{{"text scrolled in wheel steps", wheelPage}, {"photo gallery scrolled", galleryPage}} {
		f, err := recordMeasure(ctx, c, chromium, content.name, content.page)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", content.name, err)
		}
		figs = append(figs, f...)
	}
	return figs, fmt.Sprintf("one noVNC 1.7 in headless Chromium (Tight, quality 6, compression 2) watching the page for %s with the desktop recording off, then on (POST record/start {\"desktop\": true}, measured from 3 s after: the recorder then follows the viewer; keyframes every 30 s once 4 MiB was recorded: deskd's defaults), alternately; CPU of deskd (the recorder is inside it), bytes on the viewer's WebSocket and the growth of the recording's file over the same window", recordWindow), nil
}

func recordMeasure(ctx context.Context, c Config, chromium, name, page string) ([]Figure, error) {
	dk, err := startDeskd(ctx, c)
	if err != nil {
		return nil, err
	}
	defer dk.stop()
	base := "http://" + dk.addr
	if _, err := startDesktop(ctx, dk, page); err != nil {
		return nil, err
	}
	nv, err := startNoVNC(ctx, chromium, base)
	if err != nil {
		return nil, err
	}
	defer nv.close()
	cpu := func() time.Duration { return cpuOf(dk.pid) }
	size := func(id string) (int64, error) {
		var l struct {
			Recordings []struct {
				ID   string
				Size int64
			}
		}
		if err := getJSON(ctx, base+"/record/", &l); err != nil {
			return 0, err
		}
		for _, r := range l.Recordings {
			if r.ID == id {
				return r.Size, nil
			}
		}
		return 0, fmt.Errorf("recording %s is not listed", id)
	}
	var cpuOff, cpuOn, viewOff, viewOn, file []float64
	for i := range max(1, min(c.Rounds, 3)) {
		for _, on := range []bool{false, true} {
			id := ""
			if on {
				var st struct {
					DesktopID string `json:"desktop_id"`
				}
				if err := postJSON(ctx, base+"/record/start", []byte(`{"desktop":true}`), &st); err != nil || st.DesktopID == "" {
					return nil, fmt.Errorf("record/start: %q %v", st.DesktopID, err)
				}
				id = st.DesktopID
				// Steady state: the recorder starts on a connection of its
				// own and follows the viewer from its next keyframe, a
				// second or so later.
				time.Sleep(recordSettle)
			}
			var s0 int64
			if on {
				if s0, err = size(id); err != nil {
					return nil, err
				}
			}
			t0 := time.Now()
			r, err := nv.measure(ctx, "ws://"+dk.addr+"/websockify", recordWindow, nil, cpu)
			if err != nil {
				return nil, err
			}
			wall := time.Since(t0).Seconds()
			cpuPct := 100 * r.cpu.Seconds() / r.seconds
			kbps := r.bytes / 1000 / r.seconds
			if !on {
				cpuOff, viewOff = append(cpuOff, cpuPct), append(viewOff, kbps)
				fmt.Fprintf(c.Log, "  round %d %s, not recorded: deskd %.1f%% CPU, the viewer %.0f KB/s\n", i, name, cpuPct, kbps)
				continue
			}
			s1, err := size(id)
			if err != nil {
				return nil, err
			}
			if err := postJSON(ctx, base+"/record/stop", []byte(`{"desktop":true}`), nil); err != nil {
				return nil, err
			}
			fileKBps := float64(s1-s0) / 1000 / wall
			cpuOn, viewOn, file = append(cpuOn, cpuPct), append(viewOn, kbps), append(file, fileKBps)
			fmt.Fprintf(c.Log, "  round %d %s, recorded: deskd %.1f%% CPU, the viewer %.0f KB/s, the recording %.0f KB/s\n", i, name, cpuPct, kbps, fileKBps)
		}
	}
	return []Figure{
		figure(name+": deskd CPU, recorded vs not (one viewer)", "%", "lower", cpuOn, cpuOff),
		figure(name+": recording bytes vs the viewer's", "KB/s", "lower", file, viewOn),
		figure(name+": the viewer's bytes, recorded vs not", "KB/s", "info", viewOn, viewOff),
	}, nil
}
