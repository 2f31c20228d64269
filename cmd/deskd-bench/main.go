// Command deskd-bench measures deskd against the stack it replaces and
// writes bench/results/latest.json, a Markdown table and an SVG chart.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cubepod/deskd/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx))
}

func run(ctx context.Context) int {
	fs := flag.NewFlagSet("deskd-bench", flag.ExitOnError)
	deskd := fs.String("deskd", "bin/deskd", "deskd binary to measure")
	out := fs.String("out", "bench/results/latest.json", "report path; the .md table and .svg chart go beside it")
	rounds := fs.Int("rounds", 5, "alternating deskd/peer rounds per scenario")
	ttyd := fs.String("ttyd", os.Getenv("TTYD"), "ttyd binary for the terminal peer (env TTYD; default: ttyd on PATH, if any)")
	only := fs.String("only", "", "comma-separated scenarios to run (default all); the report then holds only those")
	classes := fs.String("motion-classes", "", "comma-separated words: the motion scenario runs only the classes whose name holds one (canvas, video, drag)")
	reliability := fs.String("reliability", "", "instead: run the fault, load and hostile-input suites and write this report (.md beside it)")
	loadTime := fs.Duration("load-time", 60*time.Second, "how long the load test of -reliability lasts")
	fs.Parse(os.Args[1:])
	if *ttyd == "" {
		*ttyd, _ = exec.LookPath("ttyd") // none: the terminal's peer is the raw PTY floor
	}
	abs, err := filepath.Abs(*deskd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deskd-bench:", err)
		return 2
	}
	if *reliability != "" {
		return runReliability(ctx, abs, *reliability, *loadTime)
	}
	rep, runErr := bench.Run(ctx, bench.Config{Deskd: abs, Rounds: *rounds, TTYD: *ttyd, Log: os.Stderr, Only: splitList(*only), MotionClasses: splitList(*classes)})
	js, err := rep.MarshalJSON()
	if err != nil {
		fmt.Fprintln(os.Stderr, "deskd-bench:", err)
		return 1
	}
	md := rep.Markdown()
	base := strings.TrimSuffix(*out, ".json")
	for path, b := range map[string][]byte{*out: append(js, '\n'), base + ".md": []byte(md), base + ".svg": []byte(rep.SVG())} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "deskd-bench:", err)
			return 1
		}
	}
	fmt.Print(md)
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "deskd-bench:", runErr)
		return 1
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// runReliability runs the reliability suites and writes their report;
// it fails when a suite could not run or found a problem.
func runReliability(ctx context.Context, deskd, out string, loadTime time.Duration) int {
	rep, runErr := bench.Reliability(ctx, bench.ReliabilityConfig{Deskd: deskd, Log: os.Stderr, Viewers: 10,
		Load: bench.LoadConfig{Duration: loadTime}})
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "deskd-bench:", err)
		return 1
	}
	md := rep.Markdown()
	for path, b := range map[string][]byte{out: append(js, '\n'), strings.TrimSuffix(out, ".json") + ".md": []byte(md)} {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "deskd-bench:", err)
			return 1
		}
	}
	fmt.Print(md)
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "deskd-bench:", runErr)
		return 1
	}
	if p := rep.Problems(); len(p) > 0 {
		fmt.Fprintf(os.Stderr, "deskd-bench: %d problems\n", len(p))
		return 1
	}
	return 0
}
