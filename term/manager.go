package term

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/cubepod/deskd/proc"
)

// Conn is one client connection: whole messages in, whole messages out.
// Write may be called concurrently with Read.
type Conn interface {
	Read(ctx context.Context) ([]byte, error)
	Write(ctx context.Context, msg []byte) error
	// Close sends a close message with code and reason, then closes.
	Close(code int, reason string) error
	// CloseNow closes at once, unblocking Read and Write.
	CloseNow() error
}

// Config configures a Manager.
type Config struct {
	Shell string   // default /bin/bash
	Args  []string // default ["-l"]
	Home  string   // HOME (default "/")
	Dir   string   // working directory (default Home)
	User  string   // USER and LOGNAME
	Env   []string // added to the shell's environment
	// EnvFunc, when set, adds variables per new session (e.g. the
	// desktop's DISPLAY, which exists only once the desktop runs).
	EnvFunc    func() []string
	Credential *syscall.Credential // nil: deskd's own user
	Spawner    *proc.Spawner       // required
	Logger     *slog.Logger
	Title      string // window title (default "SHELL (hostname)")

	Scrollback   int           // bytes kept per session (default 1 MiB)
	IdleTimeout  time.Duration // a session with no viewer ends after this (default 30 min)
	StallTimeout time.Duration // a viewer with output pending this long stops pacing (default 3 s)
	WriteTimeout time.Duration // one message to a viewer (default 30 s)
	MaxSessions  int           // default 16
	MaxViewers   int           // per session, default 16

	// Record, when set, starts a recording of a session (its id and
	// size); nil from it records nothing. It is asked for each new
	// session while recording is on (SetRecording), and for the
	// sessions running when it is switched on.
	Record func(id string, size Size) Recording
}

// Recording receives what a session does (record.Cast is one). Its
// methods must not block for long and never fail the session.
type Recording interface {
	Output(p []byte)
	Input(p []byte)
	Resize(cols, rows int)
	Close() error
}

// Manager owns the sessions. Its methods are safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	sessions  map[string]*Session
	closed    bool
	recording bool

	quit chan struct{}
	wg   sync.WaitGroup
}

// NewManager starts a Manager and its idle reaper; Close stops both.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Spawner == nil {
		return nil, errors.New("term: no spawner")
	}
	if cfg.Shell == "" {
		cfg.Shell = "/bin/bash"
	}
	if cfg.Args == nil {
		cfg.Args = []string{"-l"}
	}
	if cfg.Home == "" {
		cfg.Home = "/"
	}
	if cfg.Dir == "" {
		cfg.Dir = cfg.Home
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Title == "" {
		host, _ := os.Hostname()
		cfg.Title = filepath.Base(cfg.Shell) + " (" + host + ")"
	}
	setDefault(&cfg.Scrollback, 1<<20)
	setDefault(&cfg.IdleTimeout, 30*time.Minute)
	setDefault(&cfg.StallTimeout, 3*time.Second)
	setDefault(&cfg.WriteTimeout, 30*time.Second)
	setDefault(&cfg.MaxSessions, 16)
	setDefault(&cfg.MaxViewers, 16)
	m := &Manager{cfg: cfg, log: cfg.Logger, sessions: map[string]*Session{}, quit: make(chan struct{})}
	m.wg.Add(1)
	go m.reap()
	return m, nil
}

func setDefault[T int | time.Duration](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}

func (m *Manager) env() []string {
	c := m.cfg
	env := []string{
		"TERM=xterm-256color", "COLORTERM=truecolor", "LANG=C.UTF-8",
		"HOME=" + c.Home, "SHELL=" + c.Shell,
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	if c.User != "" {
		env = append(env, "USER="+c.User, "LOGNAME="+c.User)
	}
	env = append(env, c.Env...)
	if c.EnvFunc != nil {
		env = append(env, c.EnvFunc()...)
	}
	return env
}

// Close ends every session and the reaper.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	close(m.quit)
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() { s.hangup(3 * time.Second) })
	}
	wg.Wait()
	m.wg.Wait()
}

// Closed reports whether Close was called: no session can start.
func (m *Manager) Closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// Count is the number of live sessions.
func (m *Manager) Count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}

func (m *Manager) remove(s *Session) {
	m.mu.Lock()
	if m.sessions[s.ID] == s {
		delete(m.sessions, s.ID)
	}
	m.mu.Unlock()
}

// reap ends sessions that have had no viewer for IdleTimeout.
func (m *Manager) reap() {
	defer m.wg.Done()
	every := max(m.cfg.IdleTimeout/4, 50*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.quit:
			return
		case <-t.C:
		}
		m.mu.Lock()
		var idle []*Session
		for _, s := range m.sessions {
			s.mu.Lock()
			if len(s.viewers) == 0 && time.Since(s.lastSeen) > m.cfg.IdleTimeout {
				idle = append(idle, s)
			}
			s.mu.Unlock()
		}
		m.mu.Unlock()
		for _, s := range idle {
			m.log.Info("terminal session idle; hanging up", "session", s.ID)
			s.hangup(3 * time.Second)
		}
	}
}

// SetRecording switches recording of the sessions on (those running and
// those to come) or off (finishing the recordings).
func (m *Manager) SetRecording(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recording = on && m.cfg.Record != nil
	for _, s := range m.sessions {
		switch {
		case m.recording && s.recording() == nil:
			s.setRecording(m.cfg.Record(s.ID, s.lastSize()))
		case !m.recording:
			s.setRecording(nil)
		}
	}
}

// Recording reports whether sessions are recorded.
func (m *Manager) Recording() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.recording
}

// ErrNoSession is what a viewer that may not start a session gets when
// the session it names does not exist.
var ErrNoSession = &ErrProtocol{Code: ClosePolicy, Reason: "no such terminal session (a view-only viewer may not start one)"}

// Has reports whether session id is live.
func (m *Manager) Has(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return id != "" && m.sessions[id] != nil
}

// session returns the live session id, or starts one unless noCreate.
func (m *Manager) session(id string, size Size, noCreate bool) (s *Session, created bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, false, &ErrProtocol{Code: CloseGoingAway, Reason: "server shutting down"}
	}
	if s := m.sessions[id]; s != nil {
		return s, false, nil
	}
	if noCreate {
		return nil, false, ErrNoSession
	}
	if len(m.sessions) >= m.cfg.MaxSessions {
		return nil, false, &ErrProtocol{Code: CloseTryLater, Reason: fmt.Sprintf("%d sessions already", len(m.sessions))}
	}
	s, err = m.start(size)
	if err != nil {
		return nil, false, err
	}
	m.sessions[s.ID] = s
	if m.recording && m.cfg.Record != nil {
		s.setRecording(m.cfg.Record(s.ID, size))
	}
	m.log.Info("terminal session started", "session", s.ID, "pid", s.cmd.Process.Pid, "size", fmt.Sprintf("%dx%d", size.Columns, size.Rows))
	return s, true, nil
}

// ServeOptions are per connection.
type ServeOptions struct {
	// Session is the id to reattach to; unknown or empty starts a new one.
	Session string
	// Announce sends the session id in the preferences message as
	// {"session": id} (deskd's page asks for it; ttyd's client would
	// treat the key as a terminal option, so it is sent only on request).
	Announce bool
	ReadOnly bool
	// NoCreate attaches to an existing session only (view-only tokens).
	NoCreate bool
	// OnStart, when set, hears the id of a session this connection
	// started.
	OnStart func(id string)
}

// HelloTimeout bounds the wait for the client's first message.
const HelloTimeout = 10 * time.Second

// Serve runs one viewer on c until the client leaves, the shell exits or
// ctx ends; it closes c with a code that says which.
func (m *Manager) Serve(ctx context.Context, c Conn, o ServeOptions) error {
	hctx, cancel := context.WithTimeout(ctx, HelloTimeout)
	b, err := c.Read(hctx)
	cancel()
	if err != nil {
		c.CloseNow()
		return fmt.Errorf("term: no hello: %w", err)
	}
	h, err := ParseHello(b)
	if err != nil {
		return closeFor(c, err)
	}
	s, created, err := m.session(o.Session, h.Size, o.NoCreate)
	if err != nil {
		return closeFor(c, err)
	}
	if created && o.OnStart != nil {
		o.OnStart(s.ID)
	}
	v, err := s.attach(o.ReadOnly, func() { c.CloseNow() })
	if err != nil {
		return closeFor(c, err)
	}
	defer s.detach(v)
	if !created && !o.ReadOnly {
		_ = s.resize(h.Size) // the newest writer's window decides
	}
	prefs := map[string]any{}
	if o.Announce {
		prefs["session"] = s.ID
	}
	pj, _ := json.Marshal(prefs)
	for _, f := range [][]byte{Frame(CmdSetTitle, []byte(m.cfg.Title)), Frame(CmdPreferences, pj)} {
		if err := m.write(ctx, c, f); err != nil {
			c.CloseNow()
			return err
		}
	}

	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	res := make(chan error, 2)
	go func() { res <- s.pump(ctx, m, c, v) }() // ends when ctx ends or its conn fails
	go func() { res <- m.readLoop(ctx, c, s, v) }()
	first := <-res
	closeFor(c, first) // unblocks the other side
	cancel()
	<-res
	if errors.Is(first, errEnded) || errors.Is(first, errClientGone) {
		return nil
	}
	return first
}

var errClientGone = errors.New("term: client closed")

func (m *Manager) write(ctx context.Context, c Conn, f []byte) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.WriteTimeout)
	defer cancel()
	return c.Write(ctx, f)
}

// sender writes one viewer's output. A context with a deadline for each
// message cost a WebSocket write 11 allocations and more time than the
// write (a timer, and the Conn's hook on the context's end); one timer,
// reset for each message, closes the Conn when a write outlasts the
// limit, and the Conn is given a context that never ends.
type sender struct {
	c     Conn
	ctx   context.Context
	watch *time.Timer
	limit time.Duration
}

func newSender(ctx context.Context, c Conn, limit time.Duration) *sender {
	w := &sender{c: c, ctx: context.WithoutCancel(ctx), limit: limit}
	w.watch = time.AfterFunc(limit, func() { c.CloseNow() })
	w.watch.Stop()
	return w
}

var errWriteTimeout = errors.New("term: write to viewer timed out")

func (w *sender) write(f []byte) error {
	w.watch.Reset(w.limit)
	err := w.c.Write(w.ctx, f)
	if !w.watch.Stop() { // it fired: the Conn is closed
		return errWriteTimeout
	}
	return err
}

func (w *sender) stop() { w.watch.Stop() }

// closeFor closes c with the code err calls for and returns err.
func closeFor(c Conn, err error) error {
	var pe *ErrProtocol
	switch {
	case errors.As(err, &pe):
		c.Close(pe.Code, pe.Reason)
	case errors.Is(err, errEnded):
		c.Close(CloseNormal, "exit")
	case errors.Is(err, context.Canceled):
		c.Close(CloseGoingAway, "server shutting down")
	default:
		c.CloseNow()
	}
	return err
}

// readLoop applies the client's messages to the session.
func (m *Manager) readLoop(ctx context.Context, c Conn, s *Session, v *viewer) error {
	// Serve closes c when the viewer ends, which ends a Read: a context
	// that ends would cost each message a hook on it (see sender).
	rctx := context.WithoutCancel(ctx)
	for {
		b, err := c.Read(rctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errClientGone
		}
		msg, err := ParseMessage(b)
		if err != nil {
			return err
		}
		switch msg.Cmd {
		case CmdInput:
			if !v.readOnly && len(msg.Input) > 0 {
				if err := s.write(msg.Input); err != nil {
					return errEnded
				}
			}
		case CmdResize:
			if !v.readOnly {
				_ = s.resize(msg.Size)
			}
		case CmdPause:
			s.setPaused(v, true)
		case CmdResume:
			s.setPaused(v, false)
		}
	}
}

// frameSize is the largest OUTPUT payload, and a viewer's only buffer.
const frameSize = 64 << 10

// FrameSize is the largest message a viewer is sent: the command byte
// and frameSize of output.
const FrameSize = 1 + frameSize

// pump sends the scrollback replay, then live output, to one viewer.
func (s *Session) pump(ctx context.Context, m *Manager, c Conn, v *viewer) error {
	// Replay: one filtered snapshot, so no query sequence is split.
	s.mu.Lock()
	snap := make([]byte, s.ring.end-v.cursor)
	n, _ := s.ring.readAt(v.cursor, snap)
	v.cursor += int64(n)
	s.mu.Unlock()
	replay := filterQueries(snap[:n])
	w := newSender(ctx, c, m.cfg.WriteTimeout)
	defer w.stop()
	for len(replay) > 0 {
		k := min(len(replay), frameSize)
		if err := w.write(Frame(CmdOutput, replay[:k])); err != nil {
			return err
		}
		replay = replay[k:]
	}

	frame := make([]byte, 1+frameSize)
	frame[0] = CmdOutput
	for {
		s.mu.Lock()
		for !v.lagging && (v.paused || v.cursor == s.ring.end) && !(s.ended && v.cursor == s.ring.end) {
			s.mu.Unlock()
			select {
			case <-v.wake:
			case <-ctx.Done():
				return ctx.Err()
			}
			s.mu.Lock()
		}
		if v.lagging || v.cursor < s.ring.start {
			s.mu.Unlock()
			return errLagging
		}
		if v.cursor == s.ring.end { // ended and drained
			s.mu.Unlock()
			return errEnded
		}
		n, _ := s.ring.readAt(v.cursor, frame[1:])
		v.writing = true
		s.mu.Unlock()

		err := w.write(frame[:1+n])

		s.mu.Lock()
		v.writing = false
		v.cursor += int64(n)
		v.since = time.Now()
		lag := v.lagging
		s.mu.Unlock()
		s.poke()
		if lag {
			return errLagging
		}
		if err != nil {
			return err
		}
	}
}
