package testenv

import (
	"bytes"
	"io"
	"os/exec"
	"testing"

	"github.com/creack/pty"
)

// Asciinema runs Debian's asciinema (2.x) with args on a terminal of its
// own (it opens /dev/tty) and returns what it printed.
func Asciinema(t testing.TB, args ...string) string {
	t.Helper()
	path := LookPath(t, "asciinema")
	cmd := exec.Command(path, args...)
	ptmx, err := pty.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var out bytes.Buffer
	io.Copy(&out, ptmx) // until the child is gone (EIO)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("asciinema %v: %v: %q", args, err, out.String())
	}
	return out.String()
}
