// Command deskd serves a sandbox's desktop (RFB over WebSocket), terminal
// and Chromium DevTools on one HTTP port, and supervises the GUI stack.
//
//	deskd serve  [flags]   run the daemon (idle until asked for the desktop)
//	deskd start  [flags]   start the daemon if needed, then the desktop
//	deskd status [flags]   print the stack's state
//	deskd stop   [flags]   stop the desktop (--daemon: the daemon too)
//	deskd health [flags]   whether the daemon serves (a container's HEALTHCHECK)
//
// start, status and stop print one line of JSON and exit 0 when the
// result is what was asked for. Every flag has a DESKD_* env fallback.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	m := NewMain(os.Stdout, os.Stderr)
	code := m.Run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// Main is the program, separate from process globals so tests can run it.
type Main struct {
	Stdout, Stderr io.Writer
}

// NewMain returns a Main writing to the given streams.
func NewMain(stdout, stderr io.Writer) *Main { return &Main{Stdout: stdout, Stderr: stderr} }

const usage = `usage: deskd serve|start|status|stop|health [flags]  (deskd CMD -h lists the flags)`

// Run runs one subcommand and returns the exit code.
func (m *Main) Run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(m.Stderr, usage)
		return 2
	}
	cfg, err := ParseFlags(args[0], args[1:], m.Stderr)
	if err != nil {
		if err == errHelp {
			return 0
		}
		fmt.Fprintln(m.Stderr, "deskd:", err)
		return 2
	}
	if args[0] != "serve" {
		// The CLI, run as root with --user (kubectl exec, a supervisor),
		// does its file work in the run dir as the GUI user too: a pid or
		// lock file that user planted must not steer root.
		if err := cfg.dropCLI(args[0] == "start"); err != nil {
			return m.fail(err)
		}
	}
	switch args[0] {
	case "serve":
		d, err := NewDaemon(cfg, m.Stderr)
		if err != nil {
			fmt.Fprintln(m.Stderr, "deskd:", err)
			return 1
		}
		if err := d.Run(ctx); err != nil {
			fmt.Fprintln(m.Stderr, "deskd:", err)
			return 1
		}
		return 0
	case "start":
		return m.cliStart(ctx, cfg)
	case "status":
		return m.cliStatus(ctx, cfg)
	case "health":
		return m.cliHealth(ctx, cfg)
	case "stop":
		return m.cliStop(ctx, cfg)
	}
	fmt.Fprintln(m.Stderr, usage)
	return 2
}
