// Package testenv says whether the programs a test needs are installed.
// Under `make test` (DESKD_REQUIRE_ALL=1) a missing program fails the
// test, so CI cannot pass by skipping; elsewhere the test is skipped.
package testenv

import (
	"net"
	"os"
	"os/exec"
	"testing"
)

// Required reports whether missing programs are failures.
func Required() bool { return os.Getenv("DESKD_REQUIRE_ALL") == "1" }

// LookPath returns the path of the first of names that is installed, or
// ends the test.
func LookPath(t testing.TB, names ...string) string {
	t.Helper()
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	if Required() {
		t.Fatalf("none of %q is installed (install it; .ci/run does)", names)
	}
	t.Skipf("none of %q is installed", names)
	return ""
}

// Chromium returns the installed Chromium.
func Chromium(t testing.TB) string {
	t.Helper()
	return LookPath(t, "chromium", "chromium-browser", "google-chrome-stable", "google-chrome")
}

// TempDir is a temporary directory that other users can traverse, for
// children that run as the GUI user (t.TempDir's parent is 0700).
func TempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "deskd-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
