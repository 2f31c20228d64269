package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
)

var gui = &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}

// The agent's code runs as the GUI user beside deskd. Acting as that user
// (links planted in the run dir and the profile, the log dir renamed, a
// forged pid file, its own Chromium killed so deskd prepares the profile
// again), it must not change anything it could not change itself: a
// directory of root's, its files and a root process are checked before and
// after. Run as the image runs deskd (as uid 1000) and as root with --user.
func TestPrivilegeDrop(t *testing.T) {
	if os.Geteuid() != 0 {
		if testenv.Required() {
			t.Fatal("needs root: deskd as root with --user, and acting as uid 1000")
		}
		t.Skip("needs root")
	}
	for _, mode := range []string{"root with --user", "as uid 1000"} {
		t.Run(mode, func(t *testing.T) {
			sentinel := testenv.TempDir(t) // root's, 0755: out of the GUI user's reach
			if err := os.WriteFile(filepath.Join(sentinel, "secret"), []byte("root's\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(sentinel, "etc"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sentinel, "etc", "passwd"), []byte("root:x:0:0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, sentinel)
			victim := exec.Command("sleep", "600") // a root process a forged pid file names
			if err := victim.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })

			runDir := testenv.TempDir(t)
			if err := os.Chmod(runDir, 0o777); err != nil { // a Kubernetes emptyDir
				t.Fatal(err)
			}
			home := filepath.Join(testenv.TempDir(t), "desktop")
			if err := os.Mkdir(home, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(home, 1000, 1000); err != nil {
				t.Fatal(err)
			}
			profile := filepath.Join(home, "chromium-profile")
			e := &install{t: t, runDir: runDir, listen: "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))}
			e.flags = []string{"--run-dir", runDir, "--listen", e.listen, "--cdp-port", strconv.Itoa(testenv.FreePort(t)),
				"--resolution", "800x600x24", "--home", home, "--profile-dir", profile}
			if mode == "root with --user" {
				e.flags = append(e.flags, "--user", "1000:1000")
			} else {
				e.cred = gui
			}
			t.Cleanup(func() {
				e.run("stop", "--daemon")
				if t.Failed() {
					for _, name := range []string{"deskd.log", "chromium.log"} {
						for _, dir := range []string{"logs", "logs.old"} {
							b, _ := os.ReadFile(filepath.Join(runDir, dir, name))
							t.Logf("--- %s/%s (tail):\n%s", dir, name, tail(string(b), 1500))
						}
					}
				}
			})
			out, code := e.run("start")
			st := e.status(out)
			if code != 0 || st.Status != "running" {
				t.Fatalf("start: exit %d %v", code, out)
			}
			daemon := st.Pids["deskd"]
			for _, pid := range descendants(daemon) {
				if ids := procIDs(pid); ids != "1000 1000 1000 1000|1000 1000 1000 1000|" {
					t.Errorf("%s (pid %d) runs as uid/gid/groups %q, want the GUI user's alone", procName(pid), pid, ids)
				}
			}
			if mode == "root with --user" {
				var s syscall.Stat_t
				if err := syscall.Stat(runDir, &s); err != nil || s.Uid != 1000 || s.Mode&0o7777 != 0o755 {
					t.Errorf("run dir: uid %d mode %o (%v), want the GUI user's, 0755", s.Uid, s.Mode&0o7777, err)
				}
			}
			// Same uid, still kept out of deskd's memory and environment.
			if err := asGUI(t, fmt.Sprintf("cat /proc/%d/environ >/dev/null", daemon)); err == nil {
				t.Errorf("the GUI user reads deskd's /proc/%d/environ", daemon)
			}

			// 1. Links where root used to write: the logs, the lock, the
			// profile's preferences; then the user kills its own Chromium
			// and deskd prepares the profile again.
			chromium := st.Pids["chromium"]
			err := asGUI(t, fmt.Sprintf(`set -e
cd %[1]s
mv logs logs.old && mkdir logs
for f in chromium xvfb wm deskd; do ln -s %[2]s/secret logs/$f.log; done
ln -sf %[2]s/created-by-lock cli.lock
rm -f %[3]s/Default/Preferences && ln -s %[2]s/created-by-prefs %[3]s/Default/Preferences
kill -9 %[4]d`, runDir, sentinel, profile, chromium))
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "Chromium restarted", func() bool {
				out, _ := e.run("status")
				st := e.status(out)
				return st.Pids["chromium"] != 0 && st.Pids["chromium"] != chromium && st.Status == "running"
			})
			out, _ = e.run("start") // the CLI opens the planted lock
			t.Logf("start after the links: %v", out)

			// 2. The profile itself is a link to a directory of root's.
			out, _ = e.run("status")
			chromium = e.status(out).Pids["chromium"]
			if err := asGUI(t, fmt.Sprintf("set -e; kill -9 %d; mv %[2]s %[2]s.old; ln -s %[3]s/etc %[2]s", chromium, profile, sentinel)); err != nil {
				t.Fatal(err)
			}
			out, code = e.run("start") // prepares the profile now, whatever the restart backoff
			t.Logf("start with the profile a link: exit %d %v", code, out)

			// 3. A forged pid file: stop must stop deskd, and nothing else.
			if err := asGUI(t, fmt.Sprintf("echo %d > %s/deskd.pid", victim.Process.Pid, runDir)); err != nil {
				t.Errorf("the GUI user cannot write deskd's pid file (deskd is not its user): %v", err)
			}
			if out, code := e.run("stop", "--daemon"); code != 0 {
				t.Errorf("stop --daemon with a forged pid file: exit %d %v", code, out)
			}
			if err := victim.Process.Signal(syscall.Signal(0)); err != nil {
				t.Errorf("the root process the forged pid file named was signalled: %v", err)
			}
			if alive := pidAlive(daemon); alive {
				t.Errorf("deskd (pid %d) still runs after stop --daemon", daemon)
			}

			// 4. A fresh start with links at the pid file, the daemon's log
			// and the lock: they are replaced, not written through.
			err = asGUI(t, fmt.Sprintf(`set -e
cd %[1]s
rm -f %[3]s && mv %[3]s.old %[3]s
ln -sf %[2]s/secret deskd.pid
ln -sf %[2]s/secret logs/deskd.log
ln -sf %[2]s/created-by-lock deskd.lock`, runDir, sentinel, profile))
			if err != nil {
				t.Fatal(err)
			}
			if out, code := e.run("start"); code != 0 {
				t.Errorf("start with planted links: exit %d %v", code, out)
			}
			if out, code := e.run("stop", "--daemon"); code != 0 {
				t.Errorf("stop --daemon: exit %d %v", code, out)
			}

			after := snapshot(t, sentinel)
			for _, k := range sortedKeys(before, after) {
				if before[k] != after[k] {
					t.Errorf("%s changed: %q -> %q", k, before[k], after[k])
				}
			}
		})
	}
}

// procIDs is the Uid, Gid and Groups lines of /proc/PID/status.
func procIDs(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "1000 1000 1000 1000|1000 1000 1000 1000|" // gone meanwhile
	}
	var uid, gid, groups string
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.Join(strings.Fields(v), " ")
		switch k {
		case "Uid":
			uid = v
		case "Gid":
			gid = v
		case "Groups":
			groups = v
		}
	}
	return uid + "|" + gid + "|" + groups
}

func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// asGUI runs a shell script as uid 1000.
func asGUI(t *testing.T, script string) error {
	t.Helper()
	c := exec.Command("/bin/sh", "-c", script)
	c.SysProcAttr = &syscall.SysProcAttr{Credential: gui}
	c.Dir = "/"
	b, err := c.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, b)
	}
	return nil
}

// snapshot records every entry under dir: owner, mode, and content or
// link target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		s := fi.Sys().(*syscall.Stat_t)
		v := fmt.Sprintf("%d:%d %v", s.Uid, s.Gid, fi.Mode())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			v += " " + hex.EncodeToString(h[:8])
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			v += " -> " + target
		}
		m[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sortedKeys(ms ...map[string]string) []string {
	var ks []string
	for _, m := range ms {
		for k := range m {
			if !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
	}
	slices.Sort(ks)
	return ks
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
