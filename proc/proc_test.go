package proc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func spawner(t *testing.T) *Spawner {
	sp := NewSpawner()
	t.Cleanup(sp.Close)
	return sp
}

func TestExitErrorCarriesOutputAndLog(t *testing.T) {
	sp := spawner(t)
	log := filepath.Join(t.TempDir(), "x.log")
	p, err := sp.Start(Spec{Name: "fail", Path: "/bin/sh", Args: []string{"-c", "echo first; echo boom >&2; exit 3"}, LogPath: log})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	msg := p.ExitError().Error()
	if !strings.Contains(msg, "exit status 3") || !strings.Contains(msg, "boom") {
		t.Fatalf("ExitError = %q; want the status and the output tail", msg)
	}
	b, _ := os.ReadFile(log)
	if !strings.Contains(string(b), "first\nboom\n") || !strings.Contains(string(b), "exited: exit status 3") {
		t.Fatalf("log = %q", b)
	}
}

func TestStopEscalatesToKill(t *testing.T) {
	sp := spawner(t)
	// A child that ignores SIGTERM and has a grandchild in its group.
	p, err := sp.Start(Spec{Name: "stubborn", Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; sleep 1000 & echo ready; wait"}})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p, "ready")
	start := time.Now()
	if err := p.Stop(t.Context(), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() {
		t.Fatal("not exited after Stop")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("Stop took %v: SIGTERM should have been ignored", d)
	}
	if live := LiveGroupMembers(p.Pid); len(live) > 0 {
		t.Fatalf("process group %d still has live members %v", p.Pid, live)
	}
}

func TestStopPolite(t *testing.T) {
	sp := spawner(t)
	p, err := sp.Start(Spec{Name: "polite", Path: "/bin/sh", Args: []string{"-c", "trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done"}})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p, "ready")
	if err := p.Stop(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Tail(), "bye") || p.Err() != nil {
		t.Fatalf("child did not exit on its own terms: err %v, output %q", p.Err(), p.Tail())
	}
}

func TestCredential(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch user")
	}
	sp := spawner(t)
	p, err := sp.Start(Spec{Name: "id", Path: "/bin/sh", Args: []string{"-c", "id -u; id -g"},
		Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatal(p.ExitError())
	}
	if got := p.Tail(); got != "1000\n1000\n" {
		t.Fatalf("child ran as %q, want uid/gid 1000", got)
	}
}

func TestStartMissingBinary(t *testing.T) {
	if _, err := spawner(t).Start(Spec{Name: "ghost", Path: "/nonexistent/ghost"}); err == nil || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("err = %v", err)
	}
}

func TestSpawnerClosedRefuses(t *testing.T) {
	sp := NewSpawner()
	sp.Close()
	sp.Close() // idempotent
	if _, err := sp.Start(Spec{Path: "/bin/true"}); err == nil {
		t.Fatal("closed spawner started a process")
	}
}

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		writes []string
		want   string
	}{
		{[]string{"abc", "def"}, "abcdef"},
		{[]string{strings.Repeat("x", TailSize+10)}, strings.Repeat("x", TailSize)},
		{[]string{strings.Repeat("a", TailSize-1), "bc"}, strings.Repeat("a", TailSize-2) + "bc"},
	}
	for _, tt := range tests {
		var b tailBuffer
		for _, w := range tt.writes {
			if n, _ := b.Write([]byte(w)); n != len(w) {
				t.Fatalf("Write returned %d, want %d", n, len(w))
			}
		}
		if got := b.String(); got != tt.want {
			t.Errorf("tail of %d writes = %d bytes, want %d", len(tt.writes), len(got), len(tt.want))
		}
	}
}

func waitOutput(t *testing.T, p *Process, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for !strings.Contains(p.Tail(), want) {
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in output %q", want, p.Tail())
		case <-p.Done():
			t.Fatalf("exited before %q: %v", want, p.ExitError())
		case <-time.After(5 * time.Millisecond): // output has no notification
		}
	}
}

// A child never sees deskd's environment, which may hold secrets.
func TestChildDoesNotInheritEnvironment(t *testing.T) {
	t.Setenv("DESKD_PANEL_SECRET", "parent-secret")
	sp := spawner(t)
	p, err := sp.Start(Spec{Name: "env", Path: "/usr/bin/env"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	out := p.Tail()
	if strings.Contains(out, "parent-secret") {
		t.Fatalf("child environment holds the parent's secret:\n%s", out)
	}
	if !strings.Contains(out, "PATH=") {
		t.Fatalf("child environment %q: want the minimal PATH", out)
	}
}
