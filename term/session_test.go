package term

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/proc"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pipe is an in-memory Conn pair: unbuffered, so a client that does not
// read blocks the server's writes as a full socket would.
type pipe struct {
	toServer, toClient chan []byte
	closed             chan struct{}
	once               sync.Once
	mu                 sync.Mutex
	code               int
	reason             string
}

func newPipe() *pipe {
	return &pipe{toServer: make(chan []byte), toClient: make(chan []byte), closed: make(chan struct{})}
}

var errPipeClosed = errors.New("pipe closed")

// server side (term.Conn)
func (p *pipe) Read(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.toServer:
		return b, nil
	case <-p.closed:
		return nil, errPipeClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipe) Write(ctx context.Context, b []byte) error {
	select {
	case p.toClient <- bytes.Clone(b):
		return nil
	case <-p.closed:
		return errPipeClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipe) Close(code int, reason string) error {
	p.once.Do(func() {
		p.mu.Lock()
		p.code, p.reason = code, reason
		p.mu.Unlock()
		close(p.closed)
	})
	return nil
}

func (p *pipe) CloseNow() error { return p.Close(-1, "") }

func (p *pipe) closeCode() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code, p.reason
}

// client side
func (p *pipe) send(t *testing.T, msg string) {
	t.Helper()
	select {
	case p.toServer <- []byte(msg):
	case <-p.closed:
		t.Fatalf("send %q: closed", msg)
	case <-time.After(10 * time.Second):
		t.Fatalf("send %q: timeout", msg)
	}
}

// expect reads output until want appears; it returns all output read.
func (p *pipe) expect(t *testing.T, want string) string {
	t.Helper()
	var out strings.Builder
	deadline := time.After(15 * time.Second)
	for !strings.Contains(out.String(), want) {
		select {
		case b := <-p.toClient:
			if len(b) > 0 && b[0] == CmdOutput {
				out.Write(b[1:])
			}
		case <-p.closed:
			t.Fatalf("closed while waiting for %q; got %q", want, out.String())
		case <-deadline:
			t.Fatalf("no %q in %q", want, out.String())
		}
	}
	return out.String()
}

// drain reads and drops output until the pipe closes.
func (p *pipe) drain() {
	for {
		select {
		case <-p.toClient:
		case <-p.closed:
			return
		}
	}
}

func newManager(t *testing.T, mod func(*Config)) *Manager {
	t.Helper()
	sp := proc.NewSpawner()
	cfg := Config{Shell: "/bin/bash", Args: []string{"--norc", "--noprofile"}, Spawner: sp, Home: t.TempDir(),
		Env: []string{"PS1=$ "}}
	if mod != nil {
		mod(&cfg)
	}
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); sp.Close() })
	return m
}

// connect starts Serve on a new pipe and returns it, with the session id
// the server announced.
func connect(t *testing.T, m *Manager, o ServeOptions, hello string) (*pipe, string, chan error) {
	t.Helper()
	p := newPipe()
	done := make(chan error, 1)
	go func() { done <- m.Serve(t.Context(), p, o) }()
	p.send(t, hello)
	var id string
	for _, want := range []byte{CmdSetTitle, CmdPreferences} {
		select {
		case b := <-p.toClient:
			if b[0] != want {
				t.Fatalf("message %q, want command %q", b, want)
			}
			if want == CmdPreferences {
				var prefs struct{ Session string }
				if err := strictJSON(b[1:], &prefs); err != nil {
					t.Fatalf("preferences %q: %v", b, err)
				}
				id = prefs.Session
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no title/preferences")
		}
	}
	return p, id, done
}

const hello = `{"AuthToken":"","columns":100,"rows":30}`

func TestEchoResizeExit(t *testing.T) {
	m := newManager(t, nil)
	p, id, done := connect(t, m, ServeOptions{Announce: true}, hello)
	if id == "" {
		t.Fatal("no session id announced")
	}
	p.send(t, "0echo hi-$((40+2))\r")
	p.expect(t, "hi-42")
	p.send(t, "0stty size\r")
	p.expect(t, "30 100")
	p.send(t, `1{"columns":120,"rows":40}`)
	p.send(t, "0stty size\r")
	p.expect(t, "40 120")
	p.send(t, "0echo $TERM\r")
	p.expect(t, "xterm-256color")
	p.send(t, "0exit\r")
	go p.drain()
	if err := <-done; err != nil {
		t.Fatalf("Serve after exit: %v", err)
	}
	if code, reason := p.closeCode(); code != CloseNormal || reason != "exit" {
		t.Fatalf("closed %d %q, want 1000 exit", code, reason)
	}
	waitCount(t, m, 0)
}

// A job that ignores the hang-up keeps the terminal open after the shell
// exits: the session still ends (the reader, waiting in the poller, is
// woken by closing the PTY), and the job's later output goes nowhere.
var holderRE = regexp.MustCompile(`holder=(\d+)\r\n`)

func TestExitWithJobHoldingTerminal(t *testing.T) {
	m := newManager(t, nil)
	p, _, done := connect(t, m, ServeOptions{}, hello)
	p.send(t, "0(trap '' HUP; exec sleep 30) & echo hol\"\"der=$!\r")
	out := p.expect(t, "holder=")
	for !holderRE.MatchString(out) {
		out += p.expect(t, "\n")
	}
	pid, _ := strconv.Atoi(holderRE.FindStringSubmatch(out)[1])
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	t0 := time.Now()
	p.send(t, "0exit\r")
	go p.drain()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("session did not end while a job held its terminal")
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the holder died: the test proves nothing")
	}
	t.Logf("ended %v after exit", time.Since(t0))
	waitCount(t, m, 0)
}

func TestReattachReplaysWithoutQueries(t *testing.T) {
	m := newManager(t, nil)
	p, id, done := connect(t, m, ServeOptions{Announce: true}, hello)
	// The program asks for the cursor position and a colour: a terminal
	// answering those again on replay would type into the shell.
	p.send(t, "0printf 'before\\033[6n\\033]11;?\\007after-%s\\n' mark\r")
	p.expect(t, "after-mark")
	p.CloseNow()
	<-done

	q, id2, done2 := connect(t, m, ServeOptions{Session: id, Announce: true}, hello)
	if id2 != id {
		t.Fatalf("reattached to %q, want %q", id2, id)
	}
	out := q.expect(t, "after-mark")
	if strings.Contains(out, "\x1b[6n") || strings.Contains(out, "\x1b]11;?") {
		t.Fatalf("replay re-sent a query: %q", out)
	}
	if !strings.Contains(out, "before") {
		t.Fatalf("replay lost output: %q", out)
	}
	q.send(t, "0echo still-$((1+1))\r")
	q.expect(t, "still-2")
	q.CloseNow()
	<-done2
	if m.Count() != 1 {
		t.Fatalf("session gone after its viewer left: %d", m.Count())
	}
}

func TestUnknownSessionStartsNew(t *testing.T) {
	m := newManager(t, nil)
	p, id, done := connect(t, m, ServeOptions{Session: "no-such-session", Announce: true}, hello)
	if id == "" || id == "no-such-session" {
		t.Fatalf("announced %q", id)
	}
	p.CloseNow()
	<-done
}

func TestTwoViewersReadOnly(t *testing.T) {
	m := newManager(t, nil)
	rw, id, d1 := connect(t, m, ServeOptions{Announce: true}, hello)
	ro, _, d2 := connect(t, m, ServeOptions{Session: id, ReadOnly: true}, hello)
	ro.send(t, "0echo from-reader\r") // ignored
	rw.send(t, "0echo from-writer-$((2*3))\r")
	out := ro.expect(t, "from-writer-6")
	rw.expect(t, "from-writer-6")
	if strings.Contains(out, "from-reader") {
		t.Fatalf("read-only input reached the shell: %q", out)
	}
	rw.CloseNow()
	ro.CloseNow()
	<-d1
	<-d2
}

func TestIdleSessionReaped(t *testing.T) {
	m := newManager(t, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	p, _, done := connect(t, m, ServeOptions{}, hello)
	if m.Count() != 1 {
		t.Fatal("no session")
	}
	p.CloseNow()
	<-done
	waitCount(t, m, 0)
}

func TestMaxSessions(t *testing.T) {
	m := newManager(t, func(c *Config) { c.MaxSessions = 1 })
	p, _, d1 := connect(t, m, ServeOptions{}, hello)
	q := newPipe()
	d2 := make(chan error, 1)
	go func() { d2 <- m.Serve(t.Context(), q, ServeOptions{}) }()
	q.send(t, hello)
	<-d2
	if code, _ := q.closeCode(); code != CloseTryLater {
		t.Fatalf("over the cap: close %d, want %d", code, CloseTryLater)
	}
	p.CloseNow()
	<-d1
}

// A viewer whose peer takes nothing is closed once one write has waited
// WriteTimeout; the session lives on.
func TestWriteTimeoutClosesViewer(t *testing.T) {
	m := newManager(t, func(c *Config) { c.WriteTimeout = 300 * time.Millisecond; c.StallTimeout = time.Minute })
	p, _, done := connect(t, m, ServeOptions{}, hello)
	p.send(t, "0echo unread\r") // its echo and output are never read
	t0 := time.Now()
	select {
	case err := <-done:
		// The write fails, or the read of the closed Conn ends first.
		if err != nil && !errors.Is(err, errWriteTimeout) {
			t.Fatalf("Serve = %v, want %v", err, errWriteTimeout)
		}
		if code, _ := p.closeCode(); code != -1 {
			t.Fatalf("closed with code %d, want an abrupt close", code)
		}
		if d := time.Since(t0); d < 250*time.Millisecond {
			t.Fatalf("closed after %v, before the write timeout", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write to a peer that reads nothing never timed out")
	}
	if m.Count() != 1 {
		t.Fatalf("%d sessions after the viewer was dropped, want 1", m.Count())
	}
}

func TestMalformedCloses(t *testing.T) {
	m := newManager(t, nil)
	tests := []struct {
		name, hello, msg string
		code             int
	}{
		{"bad hello", "{nope", "", CloseInvalid},
		{"giant hello size", `{"columns":99999,"rows":9}`, "", ClosePolicy},
		{"unknown command", hello, "7", CloseUnsupported},
		{"giant resize", hello, `1{"columns":65535,"rows":65535}`, ClosePolicy},
		{"bad resize", hello, `1[1,2]`, CloseInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipe()
			done := make(chan error, 1)
			go func() { done <- m.Serve(t.Context(), p, ServeOptions{}) }()
			p.send(t, tt.hello)
			if tt.msg != "" {
				<-p.toClient // title
				<-p.toClient // preferences
				p.send(t, tt.msg)
			}
			go p.drain()
			if err := <-done; err == nil {
				t.Fatal("Serve returned no error")
			}
			if code, _ := p.closeCode(); code != tt.code {
				t.Fatalf("close %d, want %d", code, tt.code)
			}
		})
	}
}

func waitCount(t *testing.T, m *Manager, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.Count() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions, want %d", m.Count(), want)
		}
		time.Sleep(10 * time.Millisecond) // sessions end in other goroutines
	}
}

func TestExec(t *testing.T) {
	sp := proc.NewSpawner()
	defer sp.Close()
	m, err := NewManager(Config{Shell: "/bin/bash", Spawner: sp, Home: t.TempDir(), Env: []string{"GREETING=hi"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tests := []struct {
		cmd       string
		timeout   time.Duration
		max       int
		wantOut   string
		wantCode  int
		timedOut  bool
		truncated bool
	}{
		{"echo $GREETING; tty >/dev/null && echo tty", 5 * time.Second, 0, "hi\r\ntty\r\n", 0, false, false},
		{"exit 7", 5 * time.Second, 0, "", 7, false, false},
		{"yes | head -c 100000", 5 * time.Second, 1000, "y\r\ny", 0, false, true},
		{"sleep 30 & sleep 30", 300 * time.Millisecond, 0, "", -1, true, false},
	}
	for _, tt := range tests {
		t0 := time.Now()
		r, err := m.Exec(t.Context(), tt.cmd, tt.timeout, tt.max)
		if err != nil {
			t.Fatalf("%q: %v", tt.cmd, err)
		}
		if !strings.HasPrefix(r.Output, tt.wantOut) || r.ExitCode != tt.wantCode || r.TimedOut != tt.timedOut || r.Truncated != tt.truncated {
			t.Errorf("%q = %+v (%.40q); want code %d timedOut %v truncated %v output %q", tt.cmd, r, r.Output, tt.wantCode, tt.timedOut, tt.truncated, tt.wantOut)
		}
		if tt.max > 0 && len(r.Output) > tt.max {
			t.Errorf("%q: %d bytes kept, bound %d", tt.cmd, len(r.Output), tt.max)
		}
		if d := time.Since(t0); d > tt.timeout+3*time.Second {
			t.Errorf("%q took %v", tt.cmd, d)
		}
	}
	for _, bad := range []struct {
		cmd string
		d   time.Duration
	}{{"", time.Second}, {"true", 0}, {"true", time.Hour}, {strings.Repeat("x", MaxExecCommand+1), time.Second}} {
		if _, err := m.Exec(t.Context(), bad.cmd, bad.d, 0); err == nil {
			t.Errorf("Exec(%.20q, %v) accepted", bad.cmd, bad.d)
		}
	}
}
