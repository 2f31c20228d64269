package term

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/cubepod/deskd/rawconn"
)

// Session is one shell in a PTY with its scrollback and viewers.
//
// Flow control: the PTY reader appends output to the ring only when no
// pacing viewer would lose bytes it has not sent yet; otherwise it waits,
// and the shell blocks in write(2) as on a real terminal. A viewer paces
// while it keeps making progress; one that has had output pending for
// StallTimeout without sending any (stalled, or paused too long) stops
// pacing, and once the ring overruns it, it is told it lags and dropped,
// to reattach and replay. Memory per viewer is one frame buffer.
type Session struct {
	ID      string
	Created time.Time

	m    *Manager
	ptmx *rawconn.File
	cmd  *exec.Cmd

	mu       sync.Mutex
	ring     *ring
	viewers  map[*viewer]struct{}
	ended    bool // no more output will come
	exitErr  error
	lastSeen time.Time     // last time a viewer was attached
	progress chan struct{} // a viewer sent output or left (wakes the reader)
	size     Size          // the PTY's size as last set
	rec      Recording     // nil: not recorded

	done chan struct{} // closed when the shell and the reader are gone
}

type viewer struct {
	readOnly bool
	cursor   int64     // next ring offset to send
	since    time.Time // when it last sent output or caught up
	paused   bool
	lagging  bool // overrun: must reconnect
	writing  bool // inside Conn.Write
	wake     chan struct{}
	closeNow func()
}

func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// start launches the shell on a new PTY of the given size.
func (m *Manager) start(size Size) (*Session, error) {
	c := m.cfg
	ptmx, tty, err := openPTY(size, c.Credential)
	if err != nil {
		return nil, err
	}
	defer tty.Close()
	cmd := exec.Command(c.Shell, c.Args...)
	cmd.Env = m.env()
	cmd.Dir = c.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid: true, Setctty: true, Ctty: 0, // fd 0 becomes the controlling terminal
		Credential: c.Credential, Pdeathsig: syscall.SIGHUP,
	}
	if err := c.Spawner.Do(cmd.Start); err != nil {
		ptmx.Close()
		return nil, fmt.Errorf("term: start %s: %w", c.Shell, err)
	}
	s := &Session{
		ID: newID(), Created: time.Now(), m: m, ptmx: ptmx, cmd: cmd,
		ring: newRing(c.Scrollback), viewers: map[*viewer]struct{}{}, lastSeen: time.Now(), size: size,
		progress: make(chan struct{}, 1), done: make(chan struct{}),
	}
	readerDone := make(chan struct{})
	m.wg.Add(2)
	go func() { // owns reading the PTY; ends at EIO or when ptmx is closed
		defer m.wg.Done()
		defer close(readerDone)
		s.readPTY()
	}()
	go func() { // owns cmd.Wait and the session's end
		defer m.wg.Done()
		s.wait(readerDone)
	}()
	return s, nil
}

// readPTY copies PTY output into the ring, paced by the viewers.
func (s *Session) readPTY() {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.ptmx.Read(buf)
		if n > 0 {
			if r := s.recording(); r != nil {
				r.Output(buf[:n])
			}
			s.publish(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// publish appends p to the ring once no pacing viewer would lose data.
func (s *Session) publish(p []byte) {
	s.mu.Lock()
	for {
		v, wait := s.blocker(len(p))
		if v == nil {
			break
		}
		s.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-s.progress:
		case <-t.C: // v may have stalled by now
		case <-s.done:
		}
		t.Stop()
		s.mu.Lock()
	}
	now := time.Now()
	for v := range s.viewers {
		if v.cursor == s.ring.end { // caught up: its stall clock starts now
			v.since = now
		}
	}
	s.ring.write(p)
	for v := range s.viewers {
		if v.cursor < s.ring.start && !v.lagging {
			v.lagging = true
			if v.writing { // blocked on a peer that reads nothing
				go v.closeNow()
			}
		}
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

// blocker returns a viewer that still paces and would lose output if n
// more bytes were written, and how long until it counts as stalled.
func (s *Session) blocker(n int) (*viewer, time.Duration) {
	stall := s.m.cfg.StallTimeout
	now := time.Now()
	for v := range s.viewers {
		if v.lagging || s.ring.end+int64(n)-v.cursor <= s.ring.size() {
			continue
		}
		if left := stall - now.Sub(v.since); left > 0 {
			return v, left
		}
	}
	return nil, 0
}

// wait reaps the shell, hangs up its process group, and ends the
// session once the reader has drained the PTY.
func (s *Session) wait(readerDone <-chan struct{}) {
	err := s.cmd.Wait()
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGHUP)
	// Background jobs that ignore SIGHUP keep the PTY open; do not wait
	// for them forever before ending the session.
	t := time.NewTimer(2 * time.Second)
	select {
	case <-readerDone:
	case <-t.C:
	}
	t.Stop()
	s.ptmx.Close()
	<-readerDone
	s.setRecording(nil) // everything it showed is in
	s.mu.Lock()
	s.ended, s.exitErr = true, err
	for v := range s.viewers {
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	close(s.done)
	s.m.remove(s)
	s.m.log.Info("terminal session ended", "session", s.ID, "pid", s.cmd.Process.Pid, "exit", exitText(err))
}

func exitText(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// hangup ends the shell: SIGHUP to its group, SIGKILL if it lingers.
func (s *Session) hangup(grace time.Duration) {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGHUP)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

func (s *Session) resize(sz Size) error {
	s.mu.Lock()
	changed := s.size != sz
	s.size = sz
	r := s.rec
	s.mu.Unlock()
	if r != nil && changed {
		r.Resize(sz.Columns, sz.Rows)
	}
	return setSize(s.ptmx, sz)
}

// write sends input to the shell. It never waits on output, so Ctrl-C
// gets through while output is flooding.
func (s *Session) write(p []byte) error {
	if r := s.recording(); r != nil {
		r.Input(p)
	}
	_, err := s.ptmx.Write(p)
	return err
}

// recording is the session's recording, or nil.
func (s *Session) recording() Recording {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec
}

// setRecording replaces the session's recording (nil: none), finishing
// the one it had.
func (s *Session) setRecording(r Recording) {
	s.mu.Lock()
	old := s.rec
	s.rec = r
	s.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

func (s *Session) lastSize() Size {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.size
}

// attach adds a viewer positioned for a replay of the scrollback.
func (s *Session) attach(readOnly bool, closeNow func()) (*viewer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return nil, errEnded
	}
	if len(s.viewers) >= s.m.cfg.MaxViewers {
		return nil, &ErrProtocol{Code: CloseTryLater, Reason: fmt.Sprintf("session has %d viewers already", len(s.viewers))}
	}
	v := &viewer{readOnly: readOnly, cursor: replayStart(s.ring), since: time.Now(), wake: make(chan struct{}, 1), closeNow: closeNow}
	s.viewers[v] = struct{}{}
	s.lastSeen = time.Now()
	return v, nil
}

func (s *Session) detach(v *viewer) {
	s.mu.Lock()
	delete(s.viewers, v)
	s.lastSeen = time.Now()
	s.mu.Unlock()
	s.poke()
}

// poke wakes a reader waiting for viewers.
func (s *Session) poke() {
	select {
	case s.progress <- struct{}{}:
	default:
	}
}

func (s *Session) setPaused(v *viewer, paused bool) {
	s.mu.Lock()
	v.paused = paused
	if !paused {
		v.since = time.Now()
	}
	s.mu.Unlock()
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

var (
	errEnded   = errors.New("term: session ended")
	errLagging = &ErrProtocol{Code: CloseLagging, Reason: "viewer fell behind the scrollback; reconnect"}
)
