package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Who runs as whom. The agent's code runs as the GUI user and can do all
// that user can; deskd must never do file work as root where that user
// reaches (its home, the profile, a run dir it may write). So deskd runs
// as the GUI user. Started as root with --user, it does what needs root
// first (the run dir and the home made or handed over, the keys read, the
// ports bound) and then drops to the GUI user for good, on every thread,
// before it starts a child or serves a request.

// dirNoFollow opens a directory, never through a symbolic link.
const dirNoFollow = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// needsDrop reports whether this process is root and the GUI account is
// another user: the case where deskd must prepare and then drop.
func needsDrop(cred *syscall.Credential) bool {
	return cred != nil && os.Geteuid() == 0 && cred.Uid != 0
}

// dropCLI switches a CLI command run as root with --user to the GUI user
// before it touches the run dir; start first makes (or hands over) the
// run dir and home as the daemon would.
func (c *Config) dropCLI(prepare bool) error {
	acct, err := c.account()
	if err != nil {
		return err
	}
	if !needsDrop(acct.cred) {
		return nil
	}
	if prepare {
		if err := prepareAsRoot(c.RunDir, c.home(acct), acct.cred); err != nil {
			return err
		}
	}
	return dropPrivileges(acct.cred)
}

// checkAccount refuses a --user that a non-root deskd cannot become.
func checkAccount(cred *syscall.Credential) error {
	if cred == nil || os.Geteuid() == 0 {
		return nil
	}
	return fmt.Errorf("--user %d:%d: deskd runs as uid %d and cannot switch users; start it as that user (the image does) or as root", cred.Uid, cred.Gid, os.Geteuid())
}

// prepareAsRoot makes the directories the GUI user's deskd will need and
// that it could not make itself, each opened without following a link
// that someone other than root could have planted:
//   - the run dir: made if missing, handed to the GUI user (mode 0755, so
//     a 0777 emptyDir stops being everyone's); entries an earlier root
//     deskd left (root's, one link) are handed over too, nothing else;
//   - the home, when it is not under the run dir: made if missing (0700),
//     or handed over when it is root's and world-writable (an emptyDir);
//   - /tmp/.X11-unix (1777, root's) for Xvfb's socket, and /tmp's sticky
//     bit when it is world-writable without it.
func prepareAsRoot(runDir, home string, cred *syscall.Credential) error {
	uid, gid := int(cred.Uid), int(cred.Gid)
	runDir, err := filepath.Abs(runDir)
	if err != nil {
		return err
	}
	if home, err = filepath.Abs(home); err != nil {
		return err
	}
	fd, st, _, err := openDir(runDir, true, 0o755)
	if err != nil {
		return fmt.Errorf("run dir: %w", err)
	}
	defer unix.Close(fd)
	if int(st.Uid) != uid {
		if st.Uid == 0 {
			if err := adoptEntries(fd, uid, gid, "logs"); err != nil {
				return fmt.Errorf("run dir: %w", err)
			}
		}
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return fmt.Errorf("run dir: %w", err)
		}
	}
	if st.Mode&0o7777 != 0o755 {
		if err := unix.Fchmod(fd, 0o755); err != nil {
			return fmt.Errorf("run dir: %w", err)
		}
	}
	if home != "" && !within(home, runDir) {
		hfd, hst, made, err := openDir(home, true, 0o700)
		if err != nil {
			return fmt.Errorf("home: %w", err)
		}
		if hst.Uid == 0 && (made || hst.Mode&0o002 != 0) {
			if err := unix.Fchown(hfd, uid, gid); err == nil {
				err = unix.Fchmod(hfd, 0o700)
			}
			if err != nil {
				unix.Close(hfd)
				return fmt.Errorf("home: %w", err)
			}
		}
		unix.Close(hfd)
	}
	if tfd, tst, _, err := openDir("/tmp", false, 0); err == nil {
		if tst.Uid == 0 && tst.Mode&0o002 != 0 && tst.Mode&unix.S_ISVTX == 0 {
			_ = unix.Fchmod(tfd, 0o1777)
		}
		if err := unix.Mkdirat(tfd, ".X11-unix", 0o755); err == nil {
			if xfd, err := unix.Openat(tfd, ".X11-unix", dirNoFollow, 0); err == nil {
				_ = unix.Fchmod(xfd, 0o1777)
				unix.Close(xfd)
			}
		}
		unix.Close(tfd)
	}
	return nil
}

// dropPrivileges switches the whole process (every thread: Go applies
// set*id to all of them) to cred for good, then checks that root cannot
// be regained, and keeps same-uid processes out of deskd's memory and
// /proc entries (ptrace, environ).
func dropPrivileges(cred *syscall.Credential) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("drop to %d:%d: setgroups: %w", cred.Uid, cred.Gid, err)
	}
	if err := syscall.Setresgid(int(cred.Gid), int(cred.Gid), int(cred.Gid)); err != nil {
		return fmt.Errorf("drop to %d:%d: setgid: %w", cred.Uid, cred.Gid, err)
	}
	if err := syscall.Setresuid(int(cred.Uid), int(cred.Uid), int(cred.Uid)); err != nil {
		return fmt.Errorf("drop to %d:%d: setuid: %w", cred.Uid, cred.Gid, err)
	}
	if syscall.Setuid(0) == nil || os.Geteuid() != int(cred.Uid) || os.Getegid() != int(cred.Gid) {
		return fmt.Errorf("drop to %d:%d: still privileged", cred.Uid, cred.Gid)
	}
	return notDumpable()
}

// notDumpable keeps processes of deskd's own uid out of its memory and
// /proc entries (the key is in memory; a child's exec resets the flag).
func notDumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	return nil
}

// openDir opens the absolute directory path, making missing components
// (root's, mode perm for the last, 0755 for the others) when create is
// set. A symbolic link is followed only where nobody but root could have
// made it: in a directory owned by root that no one else may write.
// Anywhere else a link is an error (O_NOFOLLOW), so a path through a
// directory the GUI user may write cannot be bent elsewhere.
// made says the last component was made here.
func openDir(path string, create bool, perm uint32) (fd int, st unix.Stat_t, made bool, err error) {
	if !filepath.IsAbs(path) {
		return -1, st, false, fmt.Errorf("%q is not absolute", path)
	}
	return walkDir(path, create, perm, 0)
}

func walkDir(path string, create bool, perm uint32, links int) (int, unix.Stat_t, bool, error) {
	var st unix.Stat_t
	made := false
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, st, false, err
	}
	parts := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	for i, name := range parts {
		if name == "." || name == ".." {
			unix.Close(fd)
			return -1, st, false, fmt.Errorf("%q: no . or .. components", path)
		}
		last := i == len(parts)-1
		var pst unix.Stat_t
		if err := unix.Fstat(fd, &pst); err != nil {
			unix.Close(fd)
			return -1, st, false, err
		}
		trusted := pst.Uid == 0 && pst.Mode&0o022 == 0
		next, err := unix.Openat(fd, name, dirNoFollow, 0)
		if errors.Is(err, unix.ENOENT) && create {
			mode := uint32(0o755)
			if last {
				mode = perm
			}
			merr := unix.Mkdirat(fd, name, mode)
			if merr != nil && !errors.Is(merr, unix.EEXIST) {
				unix.Close(fd)
				return -1, st, false, merr
			}
			made = last && merr == nil
			next, err = unix.Openat(fd, name, dirNoFollow, 0)
		}
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			var lst unix.Stat_t
			if serr := unix.Fstatat(fd, name, &lst, unix.AT_SYMLINK_NOFOLLOW); serr == nil && lst.Mode&unix.S_IFMT == unix.S_IFLNK {
				if !trusted || lst.Uid != 0 {
					unix.Close(fd)
					return -1, st, false, fmt.Errorf("%q: %s is a symbolic link in a directory others may write", path, name)
				}
				if links >= 8 {
					unix.Close(fd)
					return -1, st, false, fmt.Errorf("%q: too many links", path)
				}
				target, rerr := readlinkat(fd, name)
				unix.Close(fd)
				if rerr != nil {
					return -1, st, false, rerr
				}
				base := "/" + strings.Join(parts[:i], "/")
				if !filepath.IsAbs(target) {
					target = filepath.Join(base, target)
				}
				rest := filepath.Join(append([]string{target}, parts[i+1:]...)...)
				return walkDir(rest, create, perm, links+1)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, st, false, fmt.Errorf("%s: %w", "/"+strings.Join(parts[:i+1], "/"), err)
		}
		fd = next
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, false, err
	}
	return fd, st, made, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		return "", fmt.Errorf("%s: link too long", name)
	}
	return string(buf[:n]), nil
}

// adoptEntries hands the GUI user what an earlier deskd running as root
// left in the run dir (and one level into the named subdirectories):
// only entries owned by root with a single link (a hard link to a file
// elsewhere has two), never followed.
func adoptEntries(dirfd, uid, gid int, subdirs ...string) error {
	names, err := readDirNames(dirfd)
	if err != nil {
		return err
	}
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		if st.Uid != 0 {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			for _, sub := range subdirs {
				if name != sub {
					continue
				}
				sfd, err := unix.Openat(dirfd, name, dirNoFollow, 0)
				if err != nil {
					return err
				}
				err = adoptEntries(sfd, uid, gid)
				unix.Close(sfd)
				if err != nil {
					return err
				}
			}
		case unix.S_IFREG, unix.S_IFSOCK:
			if st.Nlink != 1 {
				continue
			}
		default:
			continue
		}
		if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("hand over %s: %w", name, err)
		}
	}
	return nil
}

func readDirNames(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	names, err := f.Readdirnames(4096)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return names, err
}

// within reports whether path is dir or under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
