// Package proc runs the daemon's child processes: one goroutine owns each
// child's Wait, output goes to the child's own log file with a tail kept in
// memory for error messages, and stopping is a polite signal followed by
// SIGKILL after a timeout.
//
// Children are started from one goroutine locked to its OS thread for the
// life of the Spawner, because Pdeathsig fires when the thread that forked
// the child exits (golang/go#27505), not when the process does. Children
// also get their own process group, so Stop reaches their descendants.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Spec describes a child process.
type Spec struct {
	Name string   // component name, for errors and logs
	Path string   // executable
	Args []string // arguments after the program name
	// Env is the child's whole environment. A child never inherits
	// deskd's own (which may hold secrets): nil means MinimalEnv().
	Env []string
	Dir string
	// LogPath receives the child's stdout and stderr (appended). Empty:
	// output is kept only in the in-memory tail.
	LogPath string
	// Credential, when set, runs the child as that uid/gid.
	Credential *syscall.Credential
	// ExtraFiles become fds 3, 4, ... in the child.
	ExtraFiles []*os.File
	// Stdin and Stdout, when set, are the child's (a pipe it is fed
	// through and one it answers on); otherwise it reads nothing and its
	// stdout goes where its stderr goes.
	Stdin, Stdout *os.File
	// StopSignal is sent first by Stop (default SIGTERM).
	StopSignal syscall.Signal
	// StopGroup sends StopSignal to the child's whole process group,
	// for a child whose own children (sharing its output) would
	// otherwise outlive it until the grace period ends.
	StopGroup bool
}

// MinimalEnv is the environment of a child whose Spec names none.
func MinimalEnv() []string {
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
}

// TailSize is how much of a child's latest output is kept for errors.
const TailSize = 4096

// maxLogSize is the size past which a log is rotated to LogPath+".1"
// when the child starts.
const maxLogSize = 8 << 20

// Process is a started child.
type Process struct {
	Name    string
	Pid     int
	Started time.Time

	cmd  *exec.Cmd
	tail *tailBuffer
	log  *os.File
	stop syscall.Signal
	// group: Stop signals the process group, not the child alone
	group bool
	done  chan struct{}
	err   error // set before done is closed
}

// Spawner starts processes from a thread that outlives them.
type Spawner struct {
	reqs chan spawnReq
	quit chan struct{}
	wg   sync.WaitGroup
}

type spawnReq struct {
	fn    func() error
	reply chan error
}

// NewSpawner starts the spawning goroutine; Close stops it.
func NewSpawner() *Spawner {
	s := &Spawner{reqs: make(chan spawnReq), quit: make(chan struct{})}
	s.wg.Add(1)
	go s.loop()
	return s
}

func (s *Spawner) loop() {
	defer s.wg.Done()
	// Never unlocked: when this goroutine returns the thread exits, which
	// is what delivers Pdeathsig to any child still alive at Close.
	runtime.LockOSThread()
	for {
		select {
		case r := <-s.reqs:
			r.reply <- r.fn()
		case <-s.quit:
			return
		}
	}
}

// Close stops the spawning goroutine. Children still running get their
// Pdeathsig (SIGKILL); stop them first to shut down politely.
func (s *Spawner) Close() {
	select {
	case <-s.quit:
	default:
		close(s.quit)
	}
	s.wg.Wait()
}

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("proc: spawner closed")

// Do runs fn on the spawner's thread: use it for anything that forks a
// child with Pdeathsig set (exec.Cmd.Start, or a PTY start).
func (s *Spawner) Do(fn func() error) error {
	reply := make(chan error, 1)
	select {
	case s.reqs <- spawnReq{fn: fn, reply: reply}:
	case <-s.quit:
		return ErrClosed
	}
	return <-reply
}

// Start starts the child described by spec.
func (s *Spawner) Start(spec Spec) (*Process, error) {
	if spec.Name == "" {
		spec.Name = spec.Path
	}
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = spec.Env
	if cmd.Env == nil {
		cmd.Env = MinimalEnv()
	}
	cmd.Dir = spec.Dir
	cmd.ExtraFiles = spec.ExtraFiles
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: spec.Credential,
	}
	p := &Process{Name: spec.Name, cmd: cmd, tail: &tailBuffer{}, stop: spec.StopSignal, group: spec.StopGroup, done: make(chan struct{})}
	if p.stop == 0 {
		p.stop = syscall.SIGTERM
	}
	var out io.Writer = p.tail
	if spec.LogPath != "" {
		f, err := openLog(spec.LogPath)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", spec.Name, err)
		}
		p.log = f
		fmt.Fprintf(f, "--- %s: starting %s %q\n", time.Now().UTC().Format(time.RFC3339Nano), spec.Path, spec.Args)
		out = io.MultiWriter(f, p.tail)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if spec.Stdin != nil {
		cmd.Stdin = spec.Stdin
	}
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}

	if err := s.Do(cmd.Start); err != nil {
		p.closeLog()
		return nil, fmt.Errorf("start %s: %w", spec.Name, err)
	}
	p.Pid = cmd.Process.Pid
	p.Started = time.Now()
	go p.wait()
	return p, nil
}

func openLog(path string) (*os.File, error) {
	if fi, err := os.Lstat(path); err == nil && (fi.Size() > maxLogSize || !fi.Mode().IsRegular()) {
		_ = os.Rename(path, path+".1") // rename moves a link, never what it points to
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	return f, nil
}

// wait is the one owner of cmd.Wait; it records the exit and closes done.
func (p *Process) wait() {
	err := p.cmd.Wait()
	if p.log != nil {
		fmt.Fprintf(p.log, "--- %s: exited: %v\n", time.Now().UTC().Format(time.RFC3339Nano), exitText(err))
	}
	p.closeLog()
	p.err = err
	close(p.done)
}

func (p *Process) closeLog() {
	if p.log != nil {
		p.log.Close()
	}
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// Done is closed when the child has exited and its output is flushed.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Alive reports whether the child runs: not exited and not a zombie
// awaiting its reaper. A child killed a moment ago is a zombie before its
// Wait returns, so Alive is the truthful answer to "is it running now".
func (p *Process) Alive() bool { return !p.Exited() && PidAlive(p.Pid) }

// PidAlive reports whether pid exists and is not a zombie.
func PidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	st := b[i+2]
	return st != 'Z' && st != 'X'
}

// Reaped waits up to d for a child that is no longer Alive to be reaped,
// so its exit is recorded before the caller replaces it.
func (p *Process) Reaped(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// Err is the child's exit error once Done is closed (nil for status 0).
func (p *Process) Err() error {
	<-p.done
	return p.err
}

// Tail returns the child's latest output, at most TailSize bytes.
func (p *Process) Tail() string { return p.tail.String() }

// ExitError describes a child that exited, with the tail of its output.
func (p *Process) ExitError() error {
	<-p.done
	return fmt.Errorf("%s (pid %d) exited: %s; output: %q", p.Name, p.Pid, exitText(p.err), lastLines(p.Tail(), 10))
}

// Stop sends the stop signal to the child (not its group, so a browser
// shuts its helpers down itself), waits up to grace for it to exit, then
// kills its process group. It returns once the child is reaped and no
// live member of its group is left, or ctx ends.
func (p *Process) Stop(ctx context.Context, grace time.Duration) error {
	if !p.Exited() {
		pid := p.Pid
		if p.group {
			pid = -pid
		}
		if err := syscall.Kill(pid, p.stop); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("signal %s: %w", p.Name, err)
		}
		t := time.NewTimer(grace)
		select {
		case <-p.done:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	// The leader is gone or out of time: nothing of its group may stay.
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", p.Name, ctx.Err())
	}
	return waitGroupGone(ctx, p.Pid)
}

// waitGroupGone waits until process group pgid has no live member. Killed
// members die within moments, but not synchronously with kill(2), and
// there is no notification for processes that are not our children.
func waitGroupGone(ctx context.Context, pgid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for len(LiveGroupMembers(pgid)) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("process group %d still has members %v", pgid, LiveGroupMembers(pgid))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// LiveGroupMembers lists the processes of group pgid that are not
// zombies (an orphan may wait for a reaper that is not us).
func LiveGroupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(pgid)
	var live []int
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) > 2 && f[0][0] != 'Z' && f[0][0] != 'X' && string(f[2]) == want {
			pid, _ := strconv.Atoi(e.Name())
			live = append(live, pid)
		}
	}
	return live
}

// tailBuffer keeps the last TailSize bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(b)
	if n >= TailSize {
		b = b[n-TailSize:]
	}
	if over := len(t.buf) + len(b) - TailSize; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, b...)
	return n, nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

func lastLines(s string, n int) string {
	b := bytes.TrimRight([]byte(s), "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}
