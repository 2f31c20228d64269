package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"github.com/cubepod/deskd/panel"
)

// fileReq sends a files API request as a local page would.
func fileReq(t *testing.T, h http.Handler, method, target string, body io.Reader, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	req.Host = "127.0.0.1:8080"
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	if body == nil {
		req.ContentLength = 0
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestFilesRoundTrip(t *testing.T) {
	home := t.TempDir()
	h := newServer(t, Config{FilesRoot: home}).Handler()
	data := bytes.Repeat([]byte("deskd\x00\xff"), 100000)
	if rec := fileReq(t, h, "PUT", "/files/Downloads/r%C3%A9sum%C3%A9%20%E2%82%AC.bin", bytes.NewReader(data)); rec.Code != 201 {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
	}
	got, err := os.ReadFile(filepath.Join(home, "Downloads", "résumé €.bin"))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("file on disk: %d bytes, %v", len(got), err)
	}
	// Listing: the file, and no upload leftovers.
	rec := fileReq(t, h, "GET", "/files/Downloads/", nil)
	var l fileListing
	if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || rec.Code != 200 || l.Path != "Downloads/" || len(l.Entries) != 1 ||
		l.Entries[0].Name != "résumé €.bin" || l.Entries[0].Size != int64(len(data)) || l.Entries[0].Type != "file" {
		t.Fatalf("listing %d %s (%v)", rec.Code, rec.Body, err)
	}
	if rec := fileReq(t, h, "GET", "/files/", nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), `"name":"Downloads","type":"dir"`) {
		t.Fatalf("home listing %d %s", rec.Code, rec.Body)
	}
	// Download: the bytes, as an attachment that cannot run as a page.
	rec = fileReq(t, h, "GET", "/files/Downloads/r%C3%A9sum%C3%A9%20%E2%82%AC.bin", nil)
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), data) {
		t.Fatalf("GET = %d, %d bytes", rec.Code, rec.Body.Len())
	}
	for k, want := range map[string]string{"Content-Disposition": "attachment; filename*=utf-8''r%C3%A9sum%C3%A9%20%E2%82%AC.bin",
		"Content-Type": "application/octet-stream", "X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"} {
		if got := rec.Header().Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	rec = fileReq(t, h, "GET", "/files/Downloads/r%C3%A9sum%C3%A9%20%E2%82%AC.bin", nil, "Range", "bytes=8-15")
	if rec.Code != 206 || !bytes.Equal(rec.Body.Bytes(), data[8:16]) {
		t.Fatalf("range = %d %q", rec.Code, rec.Body.Bytes())
	}
	// If-None-Match: * does not replace; a plain PUT does.
	if rec := fileReq(t, h, "PUT", "/files/Downloads/r%C3%A9sum%C3%A9%20%E2%82%AC.bin", strings.NewReader("x"), "If-None-Match", "*"); rec.Code != 412 {
		t.Fatalf("exclusive PUT over a file = %d %s", rec.Code, rec.Body)
	}
	if rec := fileReq(t, h, "PUT", "/files/Downloads/r%C3%A9sum%C3%A9%20%E2%82%AC.bin", strings.NewReader("new")); rec.Code != 201 {
		t.Fatalf("PUT over = %d", rec.Code)
	}
	if got, _ := os.ReadFile(filepath.Join(home, "Downloads", "résumé €.bin")); string(got) != "new" {
		t.Fatalf("after replace: %q", got)
	}
	// Directories: made with a trailing slash, removed when empty.
	if rec := fileReq(t, h, "PUT", "/files/a/b/c/", nil); rec.Code != 201 {
		t.Fatalf("mkdir = %d %s", rec.Code, rec.Body)
	}
	if rec := fileReq(t, h, "DELETE", "/files/a/b", nil); rec.Code != 409 {
		t.Fatalf("DELETE of a non-empty dir = %d", rec.Code)
	}
	for _, p := range []string{"/files/a/b/c", "/files/a/b", "/files/Downloads/r%C3%A9sum%C3%A9%20%E2%82%AC.bin"} {
		if rec := fileReq(t, h, "DELETE", p, nil); rec.Code != 204 {
			t.Fatalf("DELETE %s = %d %s", p, rec.Code, rec.Body)
		}
	}
	if rec := fileReq(t, h, "GET", "/files/Downloads/r%C3%A9sum%C3%A9%20%E2%82%AC.bin", nil); rec.Code != 404 {
		t.Fatalf("GET after DELETE = %d", rec.Code)
	}
}

// Uploads are owned by the GUI user when deskd runs as root for another.
func TestFilesOwnedByGUIUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to hand files to another user")
	}
	// The home does not exist yet (the desktop never ran): a listing is a
	// 404 and makes nothing; an upload makes it, the GUI user's.
	home := filepath.Join(t.TempDir(), "home")
	h := newServer(t, Config{FilesRoot: home, FilesOwner: &syscall.Credential{Uid: 1000, Gid: 1000}}).Handler()
	if rec := fileReq(t, h, "GET", "/files/", nil); rec.Code != 404 {
		t.Fatalf("GET of a home not made yet = %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(home); err == nil {
		t.Fatal("a listing made the home")
	}
	if rec := fileReq(t, h, "PUT", "/files/Downloads/sub/f.txt", strings.NewReader("hi")); rec.Code != 201 {
		t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
	}
	if fi, err := os.Stat(home); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("home made by an upload: %v %v", fi.Mode(), err)
	}
	for _, p := range []string{".", "Downloads", "Downloads/sub", "Downloads/sub/f.txt"} {
		fi, err := os.Lstat(filepath.Join(home, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("%s owned by %d:%d, want 1000:1000", p, st.Uid, st.Gid)
		}
	}
}

// Hostile input: nothing outside the home is read, written or removed,
// bounds hold, and a failed upload leaves nothing behind.
func TestFilesHostile(t *testing.T) {
	base := t.TempDir()
	home := filepath.Join(base, "home")
	outside := filepath.Join(base, "secret")
	if err := os.MkdirAll(filepath.Join(home, "full"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte("top secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "full", "x"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{{outside, "link"}, {base, "linkdir"}, {"/etc", "etc"}} {
		if err := os.Symlink(l[0], filepath.Join(home, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	// What a view link may read (~/Downloads), what it may not (the
	// user's keys), and a link from the one to the other.
	for p, data := range map[string]string{"Downloads/report.txt": "report", ".ssh/id_ed25519": "PRIVATE KEY"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(home, p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, p), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../.ssh", filepath.Join(home, "Downloads", "keys")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(home, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Chromium's profile inside the home (as in the image), and a link to it.
	profile := filepath.Join(home, "chromium-profile")
	if err := os.MkdirAll(filepath.Join(profile, "Default"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profile, "Default", "Cookies"), []byte("session=1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("chromium-profile/Default", filepath.Join(home, "cookies-link")); err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{FilesRoot: home, MaxUpload: 1 << 20, PanelSecret: secret, SandboxID: "sb1", FilesDeny: []string{profile}})
	h := s.Handler()
	full := "/panel/" + token(t, panel.Claims{SID: "sb1"})
	view := "/panel/" + token(t, panel.Claims{SID: "sb1", Scope: panel.ScopeView})
	big := strings.Repeat("A", 1<<20+1)
	tests := []struct {
		name, method, path string
		body               io.Reader
		hdr                []string
		want               int
		wantBody           string
	}{
		{"no token", "GET", "/files/", nil, nil, 403, ""},
		{"traversal", "GET", full + "/files/%2e%2e/secret", nil, nil, 400, ""},
		{"traversal in the middle", "GET", full + "/files/full/%2e%2e/%2e%2e/secret", nil, nil, 400, ""},
		{"absolute", "GET", full + "/files//etc/passwd", nil, nil, 400, "absolute"},
		{"dot", "PUT", full + "/files/./x", strings.NewReader("x"), nil, 400, ""},
		{"empty component", "PUT", full + "/files/a//b", strings.NewReader("x"), nil, 400, "empty name"},
		{"NUL", "PUT", full + "/files/a%00b", strings.NewReader("x"), nil, 400, "control"},
		{"newline", "PUT", full + "/files/a%0Ab", strings.NewReader("x"), nil, 400, "control"},
		{"not UTF-8", "PUT", full + "/files/a%FFb", strings.NewReader("x"), nil, 400, "UTF-8"},
		{"long name", "PUT", full + "/files/" + strings.Repeat("n", 256), strings.NewReader("x"), nil, 400, "max 255"},
		{"long path", "GET", full + "/files/" + strings.Repeat("d/", 2049), nil, nil, 400, "max 4096"},
		{"symlink out (file)", "GET", full + "/files/link", nil, nil, 403, ""},
		{"symlink out (dir)", "GET", full + "/files/linkdir/secret", nil, nil, 403, ""},
		{"symlink to /etc", "GET", full + "/files/etc/passwd", nil, nil, 403, ""},
		{"write through a symlink", "PUT", full + "/files/linkdir/planted", strings.NewReader("x"), nil, 403, ""},
		{"replace a symlink's target", "PUT", full + "/files/link", strings.NewReader("pwned"), nil, 201, ""},
		{"delete through a symlink", "DELETE", full + "/files/linkdir/secret", nil, nil, 403, ""},
		{"delete the home", "DELETE", full + "/files/", nil, nil, 400, "cannot be removed"},
		{"fifo", "GET", full + "/files/fifo", nil, nil, 403, "not a regular file"},
		{"missing", "GET", full + "/files/nope", nil, nil, 404, ""},
		{"declared too big", "PUT", full + "/files/big", strings.NewReader(big), nil, 413, "max"},
		{"streamed too big", "PUT", full + "/files/big", io.NopCloser(strings.NewReader(big)), []string{"X-Chunked", "1"}, 413, "over"},
		{"body cut short", "PUT", full + "/files/short", iotest.ErrReader(io.ErrUnexpectedEOF), []string{"X-Chunked", "1"}, 500, ""},
		{"dir over a file", "PUT", full + "/files/full/x/", nil, nil, 409, ""},
		{"file over a dir", "PUT", full + "/files/full", strings.NewReader("x"), nil, 409, ""},
		{"view may list Downloads", "GET", view + "/files/Downloads/", nil, nil, 200, "report.txt"},
		{"view may download from Downloads", "GET", view + "/files/Downloads/report.txt", nil, nil, 200, "report"},
		{"view may not list the home", "GET", view + "/files/", nil, nil, 403, "Downloads only"},
		{"view may not read the keys", "GET", view + "/files/.ssh/id_ed25519", nil, nil, 403, "Downloads only"},
		{"view may not read elsewhere", "GET", view + "/files/full/x", nil, nil, 403, "Downloads only"},
		{"view through a link out of Downloads", "GET", view + "/files/Downloads/keys/id_ed25519", nil, nil, 403, "not shared"},
		{"view lists a link out of Downloads", "GET", view + "/files/Downloads/keys/", nil, nil, 403, "not shared"},
		{"full may read the home", "GET", full + "/files/.ssh/id_ed25519", nil, nil, 200, "PRIVATE KEY"},
		{"view may not upload", "PUT", view + "/files/v", strings.NewReader("x"), nil, 403, ""},
		{"view may not mkdir", "PUT", view + "/files/vd/", nil, nil, 403, ""},
		{"view may not delete", "DELETE", view + "/files/full/x", nil, nil, 403, ""},
		{"the profile", "GET", full + "/files/chromium-profile/Default/Cookies", nil, nil, 403, "not shared"},
		{"the profile listed", "GET", full + "/files/chromium-profile/", nil, nil, 403, "not shared"},
		{"the profile by a link", "GET", full + "/files/cookies-link/Cookies", nil, nil, 403, "not shared"},
		{"the profile's link listed", "GET", full + "/files/cookies-link/", nil, nil, 403, "not shared"},
		{"write into the profile", "PUT", full + "/files/chromium-profile/Default/Cookies", strings.NewReader("x"), nil, 403, "not shared"},
		{"write through the profile's link", "PUT", full + "/files/cookies-link/planted", strings.NewReader("x"), nil, 403, "not shared"},
		{"delete the profile", "DELETE", full + "/files/chromium-profile/Default/Cookies", nil, nil, 403, "not shared"},
		{"the home hides the profile", "GET", full + "/files/", nil, nil, 200, "fifo"},
		{"cross-site upload", "PUT", full + "/files/csrf", strings.NewReader("x"), []string{"Origin", "https://evil.example"}, 403, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.path, tt.body)
			req.Host = "127.0.0.1:8080"
			for i := 0; i+1 < len(tt.hdr); i += 2 {
				if tt.hdr[i] == "X-Chunked" {
					req.ContentLength = -1
					continue
				}
				req.Header.Set(tt.hdr[i], tt.hdr[i+1])
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Fatalf("%s %s = %d %.200q; want %d with %q", tt.method, tt.path, rec.Code, rec.Body.String(), tt.want, tt.wantBody)
			}
			if strings.Contains(rec.Body.String(), base) {
				t.Errorf("answer names the home's path: %s", rec.Body)
			}
		})
	}
	if rec := fileReq(t, h, "GET", full+"/files/", nil); strings.Contains(rec.Body.String(), `"chromium-profile"`) {
		t.Errorf("the home's listing shows the profile: %s", rec.Body)
	}
	if b, _ := os.ReadFile(filepath.Join(profile, "Default", "Cookies")); string(b) != "session=1" {
		t.Fatalf("the profile's cookies now hold %q", b)
	}
	if _, err := os.Lstat(filepath.Join(profile, "Default", "planted")); err == nil {
		t.Fatal("an upload landed in the profile")
	}
	// Outside the home nothing changed; a symlink replaced by an upload is
	// a file in the home now, its old target untouched.
	if b, _ := os.ReadFile(outside); string(b) != "top secret" {
		t.Fatalf("the file outside the home now holds %q", b)
	}
	if _, err := os.Lstat(filepath.Join(base, "planted")); err == nil {
		t.Fatal("an upload through a symlink landed outside the home")
	}
	ents, _ := os.ReadDir(home)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), uploadPrefix) || e.Name() == "big" || e.Name() == "short" || e.Name() == "v" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// An upload's memory is its copy buffer, whatever the file's size.
func TestFilesUploadMemory(t *testing.T) {
	home := t.TempDir()
	h := newServer(t, Config{FilesRoot: home}).Handler()
	const size = 64 << 20
	allocs := testing.AllocsPerRun(1, func() {
		req := httptest.NewRequest("PUT", "/files/zero.bin", io.LimitReader(zeroReader{}, size))
		req.Host = "127.0.0.1:8080"
		req.ContentLength = size
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 201 {
			t.Fatalf("PUT = %d %s", rec.Code, rec.Body)
		}
	})
	// A handful of small allocations and one buffer; a copy growing with
	// the file would be thousands.
	if allocs > 400 {
		t.Fatalf("%v allocations for a 64 MiB upload", allocs)
	}
	f, _ := os.Open(filepath.Join(home, "zero.bin"))
	defer f.Close()
	hsum := sha256.New()
	if n, _ := io.Copy(hsum, f); n != size {
		t.Fatalf("%d bytes on disk", n)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

var filePathTests = []struct {
	in      string
	name    string
	dir     bool
	wantErr bool
}{
	{"", ".", true, false},
	{"Downloads/", "Downloads", true, false},
	{"Downloads/a b.txt", "Downloads/a b.txt", false, false},
	{".bashrc", ".bashrc", false, false},
	{"日本/€", "日本/€", false, false},
	{"..", "", false, true},
	{"a/../b", "", false, true},
	{"./a", "", false, true},
	{"/etc", "", false, true},
	{"a//b", "", false, true},
	{"a\x00", "", false, true},
	{"a\x7f", "", false, true},
	{"\xff", "", false, true},
	{strings.Repeat("x", 256), "", false, true},
}

func TestFilePath(t *testing.T) {
	for _, tt := range filePathTests {
		name, dir, err := FilePath(tt.in)
		if (err != nil) != tt.wantErr || name != tt.name || dir != tt.dir {
			t.Errorf("FilePath(%q) = %q, %v, %v; want %q, %v, err %v", tt.in, name, dir, err, tt.name, tt.dir, tt.wantErr)
		}
	}
}

func FuzzFilePath(f *testing.F) {
	for _, tt := range filePathTests {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, p string) {
		name, _, err := FilePath(p)
		if err != nil {
			return
		}
		if name == "." {
			return
		}
		// What is accepted stays below the root: relative, clean, bounded.
		if filepath.IsAbs(name) || filepath.Clean(name) != name || len(name) > maxFilePath {
			t.Fatalf("FilePath(%q) accepted %q", p, name)
		}
		for _, c := range strings.Split(name, "/") {
			if c == ".." || c == "." || c == "" || len(c) > maxFileName || strings.ContainsAny(c, "\x00\n\r") {
				t.Fatalf("FilePath(%q) accepted component %q", p, c)
			}
		}
	})
}
