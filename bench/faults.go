package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FaultReport is what kill -9 of each part of the desktop did to the
// people and agents connected to it.
type FaultReport struct {
	Viewers             int           `json:"viewers"`
	Faults              []FaultResult `json:"faults"`
	ProfileStopStart    bool          `json:"profile_survives_stop_start"`
	ProfileKillChromium bool          `json:"profile_survives_kill_chromium"`
	ProfileKillDeskd    bool          `json:"profile_survives_kill_deskd"`
	StaleLocksCleared   bool          `json:"stale_singleton_locks_cleared"`
	Problems            []string      `json:"problems"`
}

// FaultResult is one kill -9.
type FaultResult struct {
	Kill string `json:"kill"`
	// RecoveredMs: from the kill until the desktop runs again with a new
	// instance of what was killed (for deskd: until `deskd start`, run
	// right after the kill as a supervisor would, has returned).
	RecoveredMs float64 `json:"recovered_ms"`
	// ViewersDropped counts viewers whose connection ended; those
	// reconnect (as noVNC does) and ViewerPixels*Ms is from the kill to
	// the first picture on their new connection.
	ViewersDropped    int     `json:"viewers_dropped"`
	ViewerPixelsP50Ms float64 `json:"viewer_pixels_p50_ms,omitempty"`
	ViewerPixelsMaxMs float64 `json:"viewer_pixels_max_ms,omitempty"`
	// ViewersLive: every viewer got a new picture of a change made after
	// the recovery.
	ViewersLive bool `json:"viewers_live"`
	// AgentClose is how the CDP agent's connection ended ("stayed
	// connected" when it did not); AgentNextOK: a new connection works.
	AgentClose  string `json:"agent_close"`
	AgentNextOK bool   `json:"agent_next_ok"`
	// Terminal: "survived" (the same connection still runs commands),
	// "ended" (deskd's own death), or what went wrong.
	Terminal string `json:"terminal"`
	// Leftovers are processes of the killed part still there afterwards
	// (orphans, or zombies marked Z).
	Leftovers []string `json:"leftovers"`
}

// faultOrder: the window manager and Chromium die alone; Xvfb takes its
// clients with it; deskd takes everything.
var faultOrder = []string{"wm", "chromium", "xvfb", "deskd"}

// Faults kills each part of a running desktop in turn while viewers, a
// CDP agent and a terminal are connected, and reports what each saw.
func Faults(ctx context.Context, c ReliabilityConfig) (*FaultReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	rep := &FaultReport{Viewers: max(c.Viewers, 1), Problems: []string{}}
	problem := func(format string, a ...any) {
		p := fmt.Sprintf(format, a...)
		rep.Problems = append(rep.Problems, p)
		fmt.Fprintln(c.Log, "  PROBLEM:", p)
	}
	in, err := newInstance(c.Deskd)
	if err != nil {
		return rep, err
	}
	defer in.close()

	// A profile carried over from another machine: its Singleton links
	// name another host, which makes Chromium refuse to start.
	profile := filepath.Join(in.runDir, "chromium-profile")
	if err := os.MkdirAll(profile, 0o755); err != nil {
		return rep, err
	}
	for _, l := range []string{"SingletonLock", "SingletonCookie", "SingletonSocket"} {
		if err := os.Symlink("elsewhere-31337", filepath.Join(profile, l)); err != nil {
			return rep, err
		}
	}
	if _, err := in.run(ctx, "start"); err != nil {
		return rep, fmt.Errorf("%w; chromium log: %s", err, in.logTail("chromium", 1500))
	}
	rep.StaleLocksCleared = true
	for _, l := range []string{"SingletonLock", "SingletonCookie", "SingletonSocket"} {
		if t, _ := os.Readlink(filepath.Join(profile, l)); strings.HasPrefix(t, "elsewhere") {
			rep.StaleLocksCleared = false
			problem("stale %s still points to %q", l, t)
		}
	}

	// The profile: a cookie and localStorage on deskd's own origin,
	// kept across a polite stop and start.
	origin := "http://" + in.addr + "/healthz"
	const write = `localStorage.setItem("deskd", "kept"); document.cookie = "deskd=kept; max-age=86400; path=/"; "ok"`
	const read = `(localStorage.getItem("deskd") || "-") + "/" + (document.cookie.match(/deskd=(\w+)/) || [, "-"])[1]`
	if v, err := pageEval(ctx, in.addr, origin, write); err != nil || v != "ok" {
		return rep, fmt.Errorf("write the profile: %q %v", v, err)
	}
	profileKept := func(when string) bool {
		v, err := pageEval(ctx, in.addr, origin, read)
		if err != nil || v != "kept/kept" {
			problem("profile after %s: localStorage/cookie %q (%v), want kept/kept", when, v, err)
			return false
		}
		return true
	}
	if _, err := in.run(ctx, "stop"); err != nil {
		return rep, err
	}
	if _, err := in.run(ctx, "start"); err != nil {
		return rep, err
	}
	rep.ProfileStopStart = profileKept("stop and start")

	// The audience.
	vctx, vcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { vcancel(); wg.Wait() }()
	viewers := make([]*liveViewer, rep.Viewers)
	for i := range viewers {
		viewers[i] = &liveViewer{}
		wg.Go(func() { viewers[i].run(vctx, "ws://"+in.addr+"/websockify") })
	}
	if err := poll(ctx, 30*time.Second, "viewers' first picture", func() error {
		for i, v := range viewers {
			if _, _, t := v.state(); t.IsZero() {
				return fmt.Errorf("viewer %d has no picture (%s)", i, v.lastErr)
			}
		}
		return nil
	}); err != nil {
		return rep, err
	}
	agent, err := dialAgent(ctx, in.addr)
	if err != nil {
		return rep, fmt.Errorf("agent: %w", err)
	}
	defer func() { agent.c.CloseNow() }() // the last one: agent is replaced after faults
	term := endpoint{name: "deskd", url: "ws://" + in.addr + "/terminal/ws?session=faults"}
	tc, err := term.dial(ctx)
	if err != nil {
		return rep, fmt.Errorf("terminal: %w", err)
	}
	defer func() { tc.c.CloseNow() }()
	probeN := 0
	termWorks := func(tc *ttyClient) error {
		probeN++
		tctx, tcancel := context.WithTimeout(ctx, 15*time.Second)
		defer tcancel()
		if err := tc.input(tctx, fmt.Sprintf("echo alive-$((%d*1000+1))\r", probeN)); err != nil {
			return err
		}
		return tc.readUntil(tctx, fmt.Sprintf("alive-%d", probeN*1000+1))
	}
	if err := termWorks(tc); err != nil {
		return rep, fmt.Errorf("terminal: %w", err)
	}

	for _, kill := range faultOrder {
		st, err := in.status(ctx)
		if err != nil || st.Status != "running" {
			return rep, fmt.Errorf("before killing %s: %+v %v", kill, st, err)
		}
		target := st.Pids[kill]
		if target == 0 {
			return rep, fmt.Errorf("no pid for %s in %v", kill, st.Pids)
		}
		res := FaultResult{Kill: kill, Leftovers: []string{}}
		was := descendants(target)
		before := make([][2]int, len(viewers))
		for i, v := range viewers {
			before[i][0], before[i][1], _ = v.state()
		}
		t0 := time.Now()
		if err := syscall.Kill(target, syscall.SIGKILL); err != nil {
			return rep, fmt.Errorf("kill %s: %w", kill, err)
		}
		fmt.Fprintf(c.Log, "  killed %s (pid %d, %d processes)\n", kill, target, len(was))

		// The agent: told, or left alone when its browser lives on.
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		if kill == "wm" {
			if _, err := agent.call(actx, "Browser.getVersion", nil); err != nil {
				res.AgentClose = "lost: " + err.Error()
				problem("kill %s: the agent's connection broke (%v)", kill, err)
			} else {
				res.AgentClose = "stayed connected"
			}
		} else {
			how, ok := agent.closed(actx)
			res.AgentClose = how
			if !ok {
				problem("kill %s: the agent was not told (%s)", kill, how)
			} else if kill != "deskd" && how != "close 1011" {
				problem("kill %s: agent got %s, want close 1011", kill, how)
			}
		}
		acancel()

		// Back up: the supervisor inside deskd, or a supervisor's `deskd start`.
		if kill == "deskd" {
			if err := poll(ctx, 10*time.Second, "deskd gone", func() error {
				if s := procState(target); s != "" && s != "Z" {
					return fmt.Errorf("state %s", s)
				}
				return nil
			}); err != nil {
				return rep, err
			}
			if _, err := in.run(ctx, "start"); err != nil {
				return rep, fmt.Errorf("start after kill -9 deskd: %w", err)
			}
		} else if err := poll(ctx, 60*time.Second, kill+" back", func() error {
			now, err := in.status(ctx)
			if err != nil {
				return err
			}
			if now.Status != "running" || now.Pids[kill] == 0 || now.Pids[kill] == target {
				return fmt.Errorf("status %s pids %v", now.Status, now.Pids)
			}
			return nil
		}); err != nil {
			return rep, fmt.Errorf("%w; log: %s", err, in.logTail("deskd", 2000))
		}
		res.RecoveredMs = ms(time.Since(t0))

		// The viewers: those that dropped reconnect and show pixels.
		var px []float64
		if err := poll(ctx, 60*time.Second, "viewers back after "+kill, func() error {
			px = px[:0]
			res.ViewersDropped = 0
			for i, v := range viewers {
				conns, drops, first := v.state()
				if drops == before[i][1] {
					continue
				}
				res.ViewersDropped++
				if conns == before[i][0] || !first.After(t0) {
					return fmt.Errorf("viewer %d not back (%s)", i, v.lastErr)
				}
				px = append(px, ms(first.Sub(t0)))
			}
			return nil
		}); err != nil {
			problem("kill %s: %v", kill, err)
		}
		if len(px) > 0 {
			res.ViewerPixelsP50Ms, res.ViewerPixelsMaxMs = round(median(px), 1), round(slices.Max(px), 1)
		}
		if (kill == "xvfb" || kill == "deskd") && res.ViewersDropped != len(viewers) {
			problem("kill %s: %d of %d viewers noticed", kill, res.ViewersDropped, len(viewers))
		}
		if (kill == "wm" || kill == "chromium") && res.ViewersDropped != 0 {
			problem("kill %s: %d viewers lost their connection", kill, res.ViewersDropped)
		}

		// The agent's next connection works; it also opens a tab, a
		// change every viewer must see.
		if kill != "wm" {
			agent.c.CloseNow()
			agent, err = dialAgent(ctx, in.addr)
			if err != nil {
				problem("kill %s: the agent cannot connect again: %v", kill, err)
				return rep, err
			}
		}
		mark := time.Now()
		for _, v := range viewers {
			v.setMark(mark)
		}
		actx, acancel = context.WithTimeout(ctx, 20*time.Second)
		_, err = agent.call(actx, "Target.createTarget", map[string]any{"url": "data:text/html,<body style='background:%23" + fmt.Sprintf("%06x", 0x204080+probeN*0x0f0f0f&0xffffff) + "'>"})
		acancel()
		res.AgentNextOK = err == nil
		if err != nil {
			problem("kill %s: the agent's next connection failed: %v", kill, err)
		}
		res.ViewersLive = poll(ctx, 20*time.Second, "viewers see the new tab", func() error {
			for i, v := range viewers {
				if v.seen().IsZero() {
					return fmt.Errorf("viewer %d", i)
				}
			}
			return nil
		}) == nil
		if !res.ViewersLive {
			problem("kill %s: not every viewer saw a change made after the recovery", kill)
		}

		// The terminal: survives everything but deskd's own death.
		if kill == "deskd" {
			tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
			var err error
			for err == nil { // output still buffered may come first
				_, _, err = tc.c.Read(tctx)
			}
			ended := tctx.Err() == nil
			tcancel()
			tc.c.CloseNow()
			if !ended {
				res.Terminal = "still open after deskd died?"
				problem("kill deskd: the terminal connection did not end")
			} else {
				res.Terminal = "ended"
			}
			if tc, err = term.dial(ctx); err != nil || termWorks(tc) != nil {
				res.Terminal += ", a new session fails"
				problem("kill deskd: no new terminal session after the restart: %v", err)
			} else {
				res.Terminal += ", a new session works"
			}
		} else if err := termWorks(tc); err != nil {
			res.Terminal = "broken: " + err.Error()
			problem("kill %s: the terminal session did not survive: %v", kill, err)
		} else {
			res.Terminal = "survived"
		}

		// Nothing of the killed part may linger.
		res.Leftovers = leftovers(was, 10*time.Second)
		if len(res.Leftovers) > 0 {
			problem("kill %s: left behind %v", kill, res.Leftovers)
		}
		if st, err := in.status(ctx); err == nil {
			if z := zombies(st.Pids["deskd"], 5*time.Second); len(z) > 0 {
				problem("kill %s: zombies under deskd %v", kill, z)
			}
		}
		fmt.Fprintf(c.Log, "  %s: back in %.0f ms, %d viewers dropped (pixels again max %.0f ms), agent %s, terminal %s, left %v\n",
			kill, res.RecoveredMs, res.ViewersDropped, res.ViewerPixelsMaxMs, res.AgentClose, res.Terminal, res.Leftovers)
		rep.Faults = append(rep.Faults, res)

		switch kill {
		case "chromium":
			rep.ProfileKillChromium = profileKept("kill -9 of Chromium")
		case "deskd":
			rep.ProfileKillDeskd = profileKept("kill -9 of deskd")
		}
	}
	return rep, nil
}
