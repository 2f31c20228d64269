package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cubepod/deskd/internal/testenv"
)

// scripts/deps.sh is what lets `make run` work on a fresh Debian machine:
// it names the packages that are missing, installs them as root, and
// prints the exact command otherwise. Run here against a PATH that lacks
// the desktop's programs.
func TestDepsScript(t *testing.T) {
	script, _ := filepath.Abs("../../scripts/deps.sh")
	bare := testenv.TempDir(t) // a PATH with a shell and Go, nothing of the desktop
	for _, name := range []string{"bash", "sh", "id", "go", "apt-get"} {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("%s: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(bare, name)); err != nil {
			t.Fatal(err)
		}
	}
	noGo := testenv.TempDir(t)
	for _, name := range []string{"bash", "sh", "id", "apt-get"} {
		p, _ := exec.LookPath(name)
		os.Symlink(p, filepath.Join(noGo, name))
	}
	run := func(path string, uid int) (string, string, int) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bare, "bash"), script)
		cmd.Env = []string{"PATH=" + path, "DESKD_DEPS_DRY=1"}
		if uid != 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	const pkgs = "xvfb xauth chromium openbox x264 npm"
	if os.Geteuid() == 0 {
		out, _, code := run(bare, 0)
		if code != 0 || !strings.Contains(out, "apt-get install -y --no-install-recommends "+pkgs) {
			t.Errorf("as root: exit %d, would run %q; want apt-get install of %s", code, out, pkgs)
		}
		_, errOut, code := run(bare, 1000)
		if code != 1 || !strings.Contains(errOut, "sudo sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "+pkgs) {
			t.Errorf("as a user without sudo: exit %d, %q; want 1 and the exact command", code, errOut)
		}
	}
	if _, errOut, code := run(noGo, os.Geteuid()); code != 1 || !strings.Contains(errOut, "Go is not installed") {
		t.Errorf("without Go: exit %d, %q", code, errOut)
	}
	// This machine (CI installs the packages): nothing to do, nothing said.
	if out, errOut, code := run(os.Getenv("PATH"), os.Geteuid()); code != 0 || out != "" || errOut != "" {
		t.Errorf("with everything installed: exit %d, %q %q", code, out, errOut)
	}
}
