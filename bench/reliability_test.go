package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
)

var (
	buildOnce sync.Once
	binDir    string
	deskdPath string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// deskdBinary builds deskd once for the suites that run it as a
// supervisor would, and skips when the desktop's programs are missing
// (DESKD_REQUIRE_ALL=1 makes that a failure).
func deskdBinary(t *testing.T) string {
	t.Helper()
	testenv.LookPath(t, "Xvfb")
	testenv.Chromium(t)
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "deskd-bench-bin-")
		if buildErr != nil {
			return
		}
		if buildErr = os.Chmod(binDir, 0o755); buildErr != nil { // the GUI user runs it too (deskd drops to it)
			return
		}
		deskdPath = filepath.Join(binDir, "deskd")
		out, err := exec.Command("go", "build", "-o", deskdPath, "../cmd/deskd").CombinedOutput()
		if err != nil {
			buildErr = err
			deskdPath = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build deskd: %v\n%s", buildErr, deskdPath)
	}
	return deskdPath
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(string(p[:len(p)-min(1, len(p))]))
	return len(p), nil
}

// kill -9 of each part of the desktop with viewers, an agent and a
// terminal connected: everything comes back, nothing is left behind.
func TestFaults(t *testing.T) {
	bin := deskdBinary(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	rep, err := Faults(ctx, ReliabilityConfig{Deskd: bin, Viewers: 3, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
	if len(rep.Faults) != len(faultOrder) {
		t.Fatalf("%d faults reported, want %d", len(rep.Faults), len(faultOrder))
	}
}

// Every entry point refuses hostile input with the expected status or
// close, and deskd serves on.
func TestHostile(t *testing.T) {
	bin := deskdBinary(t)
	rep, err := Hostile(t.Context(), bin, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Cases {
		if !c.OK {
			t.Errorf("%s: %s: got %q, want %q", c.Entry, c.Name, c.Got, c.Want)
		}
	}
	if len(rep.Cases) < 40 {
		t.Errorf("only %d cases ran", len(rep.Cases))
	}
}

// A short load of every client class: deskd gives back its goroutines,
// descriptors and memory afterwards and logs no error. make bench runs
// the full 60 s with 50 viewers.
func TestLoadShort(t *testing.T) {
	bin := deskdBinary(t)
	rep, err := Load(t.Context(), bin, LoadConfig{Viewers: 8, Terminals: 2, CDPClients: 3, Duration: 5 * time.Second}, testLog{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Error(p)
	}
}

// The bench's browser viewer: real noVNC in a headless Chromium watches
// deskd's desktop scrolling a page in wheel steps (10 a second, a clock
// ticking): its canvas changes at about that rate, bytes arrive, and the
// server's CPU is counted.
func TestNoVNCViewer(t *testing.T) {
	bin := deskdBinary(t)
	chromium := testenv.Chromium(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dk, err := startDeskd(ctx, Config{Deskd: bin})
	if err != nil {
		t.Fatal(err)
	}
	defer dk.stop()
	display, err := startDesktop(ctx, dk, wheelPage)
	if err != nil {
		t.Fatal(err)
	}
	nv, err := startNoVNC(ctx, chromium, "http://"+dk.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nv.close()
	m, err := newMarker(display)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	tag, err := m.findTag(fctx)
	fcancel()
	if err != nil {
		t.Fatal(err)
	}
	r, err := nv.measure(ctx, "ws://"+dk.addr+"/websockify", 3*time.Second, &tag, func() time.Duration { return cpuOf(dk.pid) })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("noVNC: %.1f canvas changes a second, %.1f page frames a second, %.1f KB and %.2f ms of deskd's CPU a page frame", r.fps, r.pageFPS, r.kbPerPage, r.cpuPerPage)
	if r.fps < 3 || r.fps > 61 {
		t.Errorf("%.1f canvas changes a second, for a page that changes 10 times a second", r.fps)
	}
	// The page's tag steps 10 times a second: noVNC shows at most that
	// many page frames (a little more: the window's ends), each at least
	// one canvas change.
	if r.pageFPS < 3 || r.pageFPS > 11 || r.pageFPS > r.fps+0.5 {
		t.Errorf("%.1f page frames a second (%.1f canvas changes), for a page that changes 10 times a second", r.pageFPS, r.fps)
	}
	if r.kbPerFrame <= 0 || r.cpuPerFrame <= 0 || r.kbPerPage <= 0 || r.cpuPerPage <= 0 {
		t.Errorf("nothing counted: %+v", r)
	}
}
