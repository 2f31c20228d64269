// Package bench measures deskd against the programs it replaces, in the
// same run on the same machine, and reports medians and deskd/peer ratios.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config says what to run.
type Config struct {
	Deskd    string // deskd binary
	Rounds   int    // alternating deskd/peer rounds per scenario (median taken)
	TTYD     string // optional ttyd binary for the terminal peer
	Chromium string
	Log      io.Writer
	Only     []string // scenario names to run; empty: all
	// MotionClasses, when set, are words of the motion classes to run.
	MotionClasses []string
}

// Figure is one measured quantity for deskd and its peer.
type Figure struct {
	Metric string    `json:"metric"`
	Unit   string    `json:"unit"`
	Better string    `json:"better"` // "lower" or "higher"; "info": shown for reference
	Deskd  float64   `json:"deskd"`
	Peer   float64   `json:"peer"`
	Ratio  float64   `json:"ratio"` // deskd / peer
	DSamp  []float64 `json:"deskd_samples"`
	PSamp  []float64 `json:"peer_samples"`
}

// Scenario is one block of latest.json.
type Scenario struct {
	Peer    string   `json:"peer"`
	Figures []Figure `json:"figures,omitempty"`
	Status  string   `json:"status"` // "ok", or why it did not run
	Notes   string   `json:"notes,omitempty"`
}

// Report is latest.json.
type Report struct {
	Machine   Machine              `json:"machine"`
	Started   time.Time            `json:"started"`
	Duration  string               `json:"duration"`
	Rounds    int                  `json:"rounds"`
	Scenarios map[string]*Scenario `json:"-"`
}

// MarshalJSON puts each scenario at the top level (idle_rss, start, ...).
func (r Report) MarshalJSON() ([]byte, error) {
	m := map[string]any{"machine": r.Machine, "started": r.Started, "duration": r.Duration, "rounds": r.Rounds}
	for k, v := range r.Scenarios {
		m[k] = v
	}
	return json.MarshalIndent(m, "", "  ")
}

// Machine describes where the figures come from.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	MemGiB int    `json:"mem_gib"`
	Kernel string `json:"kernel"`
	OS     string `json:"os"`
	Go     string `json:"go"`
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		f := strings.Fields(string(b))
		if len(f) > 1 {
			kib, _ := strconv.Atoi(f[1])
			m.MemGiB = (kib + 1<<19) >> 20
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
				m.OS = strings.Trim(v, `"`)
			}
		}
	}
	return m
}

// scenario is a measurement: it returns the figures or why it could not run.
type scenario struct {
	name string
	peer string
	run  func(ctx context.Context, c Config) ([]Figure, string, error)
}

// scenarios are the measurements, in the report's order.
func scenarios() []scenario {
	return []scenario{
		{"idle_rss", "x11vnc + websockify (+ ttyd when there is one: TTYD= or on PATH)", idleRSS},
		{"start", "shell script starting Xvfb, x11vnc, websockify, Chromium", startTime},
		{"rfb", "x11vnc + websockify on the same Xvfb", rfbScenario},
		{"rfb_wheel", "x11vnc + websockify on the same Xvfb", rfbWheelScenario},
		{"rfb_gallery", "x11vnc + websockify on the same Xvfb", rfbGalleryScenario},
		{"rfb_typing", "x11vnc + websockify on the same Xvfb", rfbTypingScenario},
		{"motion", "Xtigervnc + websockify (its own display and Chromium), and x11vnc + websockify on deskd's Xvfb", motionScenario},
		{"terminal", "ttyd (TTYD= or on PATH), and always the floor: a raw PTY read in-process", terminalScenario},
		{"cdp", "a direct connection to the same Chromium", cdpScenario},
		{"computer", "xdotool + ImageMagick import spawned per action", computerScenario},
		{"a11y", "CDP Accessibility.getFullAXTree of the same page (the page alone, no positions)", a11yScenario},
		{"record", "the same page watched by the same viewer with the desktop recording off", recordScenario},
	}
}

// Run runs every scenario and returns the report; err lists scenarios
// that could not run (the report still has the others).
func Run(ctx context.Context, c Config) (Report, error) {
	if c.Rounds <= 0 {
		c.Rounds = 5
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	r := Report{Machine: machine(), Started: time.Now().UTC(), Rounds: c.Rounds, Scenarios: map[string]*Scenario{}}
	var failed []string
	for _, s := range scenarios() {
		if len(c.Only) > 0 && !slices.Contains(c.Only, s.name) {
			continue
		}
		fmt.Fprintf(c.Log, "== %s\n", s.name)
		figs, notes, err := s.run(ctx, c)
		sc := &Scenario{Peer: s.peer, Figures: figs, Status: "ok", Notes: notes}
		if err != nil {
			sc.Status = "failed: " + err.Error()
			failed = append(failed, s.name+": "+err.Error())
		}
		r.Scenarios[s.name] = sc
	}
	r.Duration = time.Since(r.Started).Round(time.Second).String()
	if len(failed) > 0 {
		return r, fmt.Errorf("scenarios that could not run: %s", strings.Join(failed, "; "))
	}
	return r, nil
}

func figure(metric, unit, better string, d, p []float64) Figure {
	f := Figure{Metric: metric, Unit: unit, Better: better, Deskd: median(d), Peer: median(p), DSamp: d, PSamp: p}
	if f.Peer != 0 {
		f.Ratio = sig(f.Deskd/f.Peer, 3)
	}
	f.Deskd, f.Peer = sig(f.Deskd, 4), sig(f.Peer, 4)
	return f
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentiles are the median and the 99th percentile of sorted
// (which is not empty).
func percentiles(sorted []float64) (p50, p99 float64) {
	return percentile(sorted, 500), percentile(sorted, 990)
}

// percentile is the perMille-th of sorted (nearest rank; not empty).
func percentile(sorted []float64, perMille int) float64 {
	return sorted[min(len(sorted)-1, len(sorted)*perMille/1000)]
}

// sig rounds v to n significant digits.
func sig(v float64, n int) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', n, 64), 64)
	return r
}

func round(v float64, places int) float64 {
	p := 1.0
	for range places {
		p *= 10
	}
	return float64(int64(v*p+0.5)) / p
}

// Markdown renders the report's table.
func (r Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s (%d cores, %d GiB, %s), %d rounds, medians; ratio = deskd / peer.\n\n",
		r.Started.Format("2006-01-02"), r.Machine.CPU, r.Machine.Cores, r.Machine.MemGiB, r.Machine.OS, r.Rounds)
	b.WriteString("| scenario | metric | deskd | peer | ratio | better |\n|---|---|---:|---:|---:|---|\n")
	for _, name := range scenarioOrder(r) {
		s := r.Scenarios[name]
		if len(s.Figures) == 0 {
			fmt.Fprintf(&b, "| %s | %s | | | | |\n", name, s.Status)
			continue
		}
		for _, f := range s.Figures {
			fmt.Fprintf(&b, "| %s | %s (%s) | %s | %s | %s | %s |\n", name, f.Metric, f.Unit, num(f.Deskd), num(f.Peer), num(f.Ratio), f.Better)
		}
	}
	b.WriteString("\nPeers: ")
	var peers []string
	for _, name := range scenarioOrder(r) {
		if p := r.Scenarios[name].Peer; p != "" {
			peers = append(peers, name+": "+p)
		}
	}
	b.WriteString(strings.Join(peers, "; ") + ".\n")
	return b.String()
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func scenarioOrder(r Report) []string {
	var out []string
	for _, sc := range scenarios() {
		if _, ok := r.Scenarios[sc.name]; ok {
			out = append(out, sc.name)
		}
	}
	return out
}

// group runs a command in its own process group so it and everything it
// starts can be killed together.
func group(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	setGroup(cmd)
	return cmd
}
