package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openDir follows a link only where nobody but root could have made it.
func TestOpenDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: links owned by another user")
	}
	base := t.TempDir()
	trusted := filepath.Join(base, "trusted") // root's, 0755
	open := filepath.Join(base, "open")       // 0777: the GUI user may plant here
	for _, d := range []string{trusted, open, filepath.Join(base, "real")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(open, 0o777)
	links := []struct {
		at, to string
		uid    int
	}{
		{filepath.Join(trusted, "root-link"), filepath.Join(base, "real"), 0},
		{filepath.Join(trusted, "user-link"), filepath.Join(base, "real"), 1000},
		{filepath.Join(open, "root-link"), filepath.Join(base, "real"), 0},
		{filepath.Join(open, "user-link"), "/etc", 1000},
	}
	for _, l := range links {
		if err := os.Symlink(l.to, l.at); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(l.at, l.uid, l.uid); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		path    string
		wantErr string
	}{
		{filepath.Join(trusted, "root-link", "made"), ""},
		{filepath.Join(trusted, "user-link", "made"), "symbolic link"},
		{filepath.Join(open, "root-link", "made"), "symbolic link"},
		{filepath.Join(open, "user-link", "made"), "symbolic link"},
		{filepath.Join(open, "plain", "made"), ""},
		{"relative/dir", "not absolute"},
		{trusted + "/../x", "no . or .."},
	}
	for _, tt := range tests {
		fd, _, _, err := openDir(tt.path, true, 0o700)
		if err == nil {
			unix.Close(fd)
		}
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("openDir(%s) = %v, want %q", tt.path, err, tt.wantErr)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "real", "made")); err != nil {
		t.Errorf("not made through root's link in root's directory: %v", err)
	}
	if _, err := os.Stat("/etc/made"); err == nil {
		os.Remove("/etc/made")
		t.Error("made /etc/made through the GUI user's link")
	}
}
