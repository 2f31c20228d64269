package cdp

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/x11"
)

func TestFlags(t *testing.T) {
	f := Flags(ChromiumConfig{ProfileDir: "/p", Port: 9333, Width: 800, Height: 600, NoSandbox: true, URL: "http://x/"})
	for _, want := range []string{
		"--user-data-dir=/p", "--remote-debugging-port=9333", "--remote-debugging-address=127.0.0.1",
		"--disable-background-networking", "--disable-component-update", "--no-first-run",
		"--disable-dev-shm-usage", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--disable-gpu-compositing",
		"--window-size=800,600", "--no-sandbox", "--test-type", "--start-maximized",
		"--disable-blink-features=AutomationControlled", "--disable-session-crashed-bubble",
		"--hide-crash-restore-bubble", "--disable-features=TranslateUI",
	} {
		if !slices.Contains(f, want) {
			t.Errorf("flags lack %s: %q", want, f)
		}
	}
	if f[len(f)-1] != "http://x/" || f[len(f)-2] != "--" {
		t.Errorf("URL must come last, after --: %q", f)
	}
	if slices.Contains(Flags(ChromiumConfig{ProfileDir: "/p"}), "--no-sandbox") {
		t.Error("--no-sandbox without being asked")
	}
	if got := Flags(ChromiumConfig{ProfileDir: "/p"}); slices.Contains(got, "--") {
		t.Errorf("no URL, yet %q", got)
	}
	if got := Flags(ChromiumConfig{ProfileDir: "/p", Locale: "de-DE"}); !slices.Contains(got, "--lang=de-DE") || !slices.Contains(got, "--accept-lang=de-DE") {
		t.Errorf("locale: %q", got)
	}
}

var localeTests = []struct {
	in      string
	wantErr bool
}{
	{"", false}, {"en", false}, {"de-DE", false}, {"zh-Hans-CN", false}, {"pt_BR", false}, {"es-419", false},
	{"e", true}, {"-en", true}, {"en-", true}, {"en--US", true}, {"en US", true}, {"--lang=x", true},
	{"de-DE --renderer-cmd-prefix=x", true}, {"1a", true}, {"abcdefghi", true}, {strings.Repeat("ab-", 20), true},
	{"en\x00", true}, {"ü", true}, {"en-ü", true},
}

func TestCheckLocale(t *testing.T) {
	for _, tt := range localeTests {
		if err := CheckLocale(tt.in); (err != nil) != tt.wantErr {
			t.Errorf("CheckLocale(%q) = %v, wantErr %v", tt.in, err, tt.wantErr)
		}
	}
}

func FuzzCheckLocale(f *testing.F) {
	for _, tt := range localeTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckLocale(s) != nil {
			return
		}
		// An accepted locale is one argv word Chromium cannot take for
		// anything but the value of --lang.
		if len(s) > MaxLocale || strings.ContainsAny(s, " =\x00/") || strings.HasPrefix(s, "-") {
			t.Fatalf("accepted %q", s)
		}
	})
}

func TestCheckTimezone(t *testing.T) {
	for _, tt := range []struct {
		in      string
		wantErr bool
	}{
		{"", false}, {"UTC", false}, {"Europe/Berlin", false}, {"America/Argentina/Buenos_Aires", false},
		{"Mars/Olympus", true}, {"../../etc/passwd", true}, {"/etc/localtime", true}, {strings.Repeat("A", 100), true},
		{"Europe/Berlin\n", true},
	} {
		if err := CheckTimezone(tt.in); (err != nil) != tt.wantErr {
			t.Errorf("CheckTimezone(%q) = %v, wantErr %v", tt.in, err, tt.wantErr)
		}
	}
}

func TestCheckStartURL(t *testing.T) {
	tests := []struct {
		url     string
		wantErr string
	}{
		{"", ""},
		{"about:blank", ""},
		{"https://example.com/a?b=c", ""},
		{"HTTP://example.com/", ""},
		{"file:///tmp/x.html", ""},
		{"data:text/html,<b>hi</b>", ""},
		{"--renderer-cmd-prefix=/bin/sh -c id", "no scheme"},
		{"-x", "no scheme"},
		{"javascript:alert(1)", "not allowed"},
		{"chrome://settings", "not allowed"},
		{"ftp://x/", "not allowed"},
		{"http://x/\n--flag", "control character"},
		{"http://x/\x00", "control character"},
		{"https://x/" + strings.Repeat("a", MaxStartURL), "max"},
	}
	for _, tt := range tests {
		err := CheckStartURL(tt.url)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("CheckStartURL(%.40q) = %v; want %q", tt.url, err, tt.wantErr)
		}
	}
}

func FuzzCheckStartURL(f *testing.F) {
	for _, s := range []string{"about:blank", "https://x/", "--flag", "data:,x", "javascript:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if CheckStartURL(s) == nil && strings.HasPrefix(s, "-") {
			t.Fatalf("%q accepted: it would read as a switch", s)
		}
	})
}

// TestStaleSingletonFromOtherHost: a profile copied from another machine
// (or left by a container with another hostname) carries Singleton*
// links that make Chromium refuse to start; they must be cleaned.
func TestStaleSingletonFromOtherHost(t *testing.T) {
	chromium := testenv.Chromium(t)
	xvfb := testenv.LookPath(t, "Xvfb")
	sp := proc.NewSpawner()
	defer sp.Close()
	x, err := x11.StartXvfb(t.Context(), sp, x11.XvfbConfig{Path: xvfb, Resolution: x11.Resolution{Width: 1024, Height: 768, Depth: 24}})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Stop(context.Background(), 5*time.Second)

	root := testenv.TempDir(t)
	profile := filepath.Join(root, "profile")
	os.MkdirAll(profile, 0o700)
	for name, target := range map[string]string{
		"SingletonLock":   "some-other-host-4242",
		"SingletonCookie": "1234567890",
		"SingletonSocket": "/tmp/.org.chromium.Chromium.gone/SingletonSocket",
	} {
		if err := os.Symlink(target, filepath.Join(profile, name)); err != nil {
			t.Fatal(err)
		}
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 { // as in the image: the GUI runs as 1000:1000
		cred = &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}
	}
	port := testenv.FreePort(t)
	c, err := StartChromium(t.Context(), sp, ChromiumConfig{
		Path: chromium, Port: port, ProfileDir: profile, Display: x.Display, Width: 1024, Height: 768,
		Credential: cred, NoSandbox: true, LogPath: filepath.Join(root, "chromium.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background(), 10*time.Second)
	if !strings.HasPrefix(c.Version.Browser, "Chrome/") {
		t.Fatalf("version %+v", c.Version)
	}
	link, err := os.Readlink(filepath.Join(profile, "SingletonLock"))
	host, _ := os.Hostname()
	if err != nil || link != fmt.Sprintf("%s-%d", host, c.Pid) {
		t.Fatalf("SingletonLock -> %q (%v); want this Chromium's %s-%d", link, err, host, c.Pid)
	}
	if pids := ProfilePids(profile); !slices.Equal(pids, []int{c.Pid}) {
		t.Fatalf("ProfilePids = %v, want [%d]", pids, c.Pid)
	}
	if cred != nil {
		if uid := procUID(t, c.Pid); uid != "1000" {
			t.Fatalf("chromium runs as uid %s, want 1000", uid)
		}
	}
	// Polite stop: Chromium exits on SIGTERM by itself, flushing the profile.
	if err := c.Stop(t.Context(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, ok := c.Err().(interface{ ExitCode() int }); ok && st.ExitCode() == -1 {
		t.Fatalf("chromium had to be killed: %v", c.Err())
	}
	if _, err := os.Stat(filepath.Join(profile, "Default", "Preferences")); err != nil {
		t.Fatalf("profile not flushed: %v", err)
	}
}

func procUID(t *testing.T, pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			return f[1]
		}
	}
	return ""
}

func TestPortTaken(t *testing.T) {
	port := testenv.FreePort(t)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sp := proc.NewSpawner()
	defer sp.Close()
	_, err = StartChromium(t.Context(), sp, ChromiumConfig{Path: "/bin/true", Port: port, ProfileDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "taken") {
		t.Fatalf("err = %v", err)
	}
}
