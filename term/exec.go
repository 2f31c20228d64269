package term

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Bounds of Exec.
const (
	MaxExecCommand = 64 << 10
	MaxExecTimeout = 10 * time.Minute
	MaxExecOutput  = 1 << 20
)

// ExecResult is what a command did.
type ExecResult struct {
	Output    string `json:"output"`
	ExitCode  int    `json:"exit_code"` // -1 when killed (timeout) or no status
	TimedOut  bool   `json:"timed_out,omitempty"`
	Truncated bool   `json:"truncated,omitempty"` // only the first maxOutput bytes are kept
}

// Exec runs command with the shell (`SHELL -c command`) in a fresh PTY
// as the sessions' user, with their environment, and returns its output
// (at most maxOutput bytes: the rest is read and dropped, so the command
// never blocks on a full terminal) and exit code. At the timeout its whole
// process group is killed.
func (m *Manager) Exec(ctx context.Context, command string, timeout time.Duration, maxOutput int) (ExecResult, error) {
	if command == "" || len(command) > MaxExecCommand {
		return ExecResult{}, fmt.Errorf("term: command of %d bytes: want 1-%d", len(command), MaxExecCommand)
	}
	if timeout <= 0 || timeout > MaxExecTimeout {
		return ExecResult{}, fmt.Errorf("term: timeout %v: want (0, %v]", timeout, MaxExecTimeout)
	}
	if maxOutput <= 0 || maxOutput > MaxExecOutput {
		maxOutput = MaxExecOutput
	}
	c := m.cfg
	ptmx, tty, err := openPTY(Size{Columns: 200, Rows: 50}, c.Credential)
	if err != nil {
		return ExecResult{}, err
	}
	defer ptmx.Close()
	cmd := exec.Command(c.Shell, "-c", command)
	cmd.Env = m.env()
	cmd.Dir = c.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid: true, Setctty: true, Ctty: 0,
		Credential: c.Credential, Pdeathsig: syscall.SIGKILL,
	}
	err = c.Spawner.Do(cmd.Start)
	tty.Close() // the child has its copy; EIO on ptmx once it exits
	if err != nil {
		return ExecResult{}, fmt.Errorf("term: start %s: %w", c.Shell, err)
	}
	var out bytes.Buffer
	truncated := false
	read := make(chan struct{})
	go func() { // ends at EIO, once every holder of the tty is gone
		defer close(read)
		buf := make([]byte, 32<<10)
		for {
			n, err := ptmx.Read(buf)
			keep := max(0, min(n, maxOutput-out.Len()))
			out.Write(buf[:keep])
			if keep < n {
				truncated = true
			}
			if err != nil {
				return
			}
		}
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }() // ends when the shell exits (killed at the latest below)
	t := time.NewTimer(timeout)
	defer t.Stop()
	res := ExecResult{ExitCode: -1}
	var werr error
	select {
	case werr = <-waited:
	case <-t.C:
		res.TimedOut = true
	case <-ctx.Done():
	}
	if werr == nil && (res.TimedOut || ctx.Err() != nil) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		werr = <-waited
	}
	// Background children may keep the tty open: they die with the group.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	rt := time.NewTimer(2 * time.Second)
	select {
	case <-read:
	case <-rt.C: // a descendant outside the group holds the tty
		ptmx.Close()
		<-read
	}
	rt.Stop()
	var ee *exec.ExitError
	switch {
	case werr == nil:
		res.ExitCode = 0
	case errors.As(werr, &ee):
		res.ExitCode = ee.ExitCode()
	}
	res.Output, res.Truncated = out.String(), truncated
	if ctx.Err() != nil && !res.TimedOut {
		return res, ctx.Err()
	}
	return res, nil
}
