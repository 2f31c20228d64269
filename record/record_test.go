package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
)

func TestCheckID(t *testing.T) {
	for _, id := range []string{"terminal-20261207T120000Z-0a1b2c3d", "terminal-19991231T235959Z-ffffffff"} {
		if err := CheckID(id); err != nil {
			t.Errorf("CheckID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", "terminal", "../etc/passwd", "terminal-20261207T120000Z-0a1b2c3d/../x", "video-20261207T120000Z-0a1b2c3d",
		"terminal-20261207T120000Z-0A1B2C3D", "terminal-2026120XT120000Z-0a1b2c3d", "terminal-20261207T120000Z-0a1b2c3", "terminal-20261207T120000Z_0a1b2c3d",
		"terminal-20261207T120000Z-0a1b2c3d.cast", "terminal-20261207T120000Z-0a1b2c3d\x00", strings.Repeat("terminal-", 20)} {
		if err := CheckID(id); err == nil {
			t.Errorf("CheckID(%q) passed", id)
		}
	}
}

func FuzzCheckID(f *testing.F) {
	f.Add("terminal-20261207T120000Z-0a1b2c3d")
	f.Add("../x")
	f.Fuzz(func(t *testing.T, id string) {
		if CheckID(id) == nil && (strings.ContainsAny(id, "/\\.\x00") || len(id) > MaxID) {
			t.Fatalf("%q passed", id)
		}
	})
}

// openStore opens a store in a new directory, bounded to maxBytes (0:
// the default) and an hour, closed when the test ends.
func openStore(t *testing.T, maxBytes int64) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), maxBytes, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// castLines parses an asciicast v2 file: its header and events.
func castLines(t *testing.T, b []byte) (map[string]any, [][]any) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	var hdr map[string]any
	var evs [][]any
	for i := 0; sc.Scan(); i++ {
		if i == 0 {
			if err := json.Unmarshal(sc.Bytes(), &hdr); err != nil {
				t.Fatalf("header %q: %v", sc.Text(), err)
			}
			continue
		}
		var ev []any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || len(ev) != 3 {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return hdr, evs
}

func TestCast(t *testing.T) {
	s := openStore(t, 0)
	f, err := s.Create(Terminal)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCast(f, 80, 24, "t", false)
	euro := []byte("€") // 3 bytes, split across outputs
	c.Output([]byte("hello <b>&\r\n"))
	c.Output(append([]byte("price "), euro[:1]...))
	c.Output(euro[1:2])
	c.Output(append(euro[2:], " ok\xff\r\n"...))
	c.Input([]byte("secret\r"))
	c.Resize(120, 40)
	c.Output([]byte("end \xe2\x82")) // ends inside a sequence: written at Close
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	rf, info, err := s.Get(f.ID)
	if err != nil || info.Active {
		t.Fatalf("get: %v %+v", err, info)
	}
	b, _ := os.ReadFile(rf.Name())
	rf.Close()
	hdr, evs := castLines(t, b)
	if hdr["version"] != 2.0 || hdr["width"] != 80.0 || hdr["height"] != 24.0 {
		t.Fatalf("header %v", hdr)
	}
	var out strings.Builder
	var kinds []string
	last := -1.0
	for _, ev := range evs {
		ts := ev[0].(float64)
		if ts < last {
			t.Fatalf("time goes back: %v", evs)
		}
		last = ts
		kinds = append(kinds, ev[1].(string))
		if ev[1] == "o" {
			out.WriteString(ev[2].(string))
		}
		if ev[1] == "r" && ev[2] != "120x40" {
			t.Fatalf("resize %v", ev)
		}
	}
	if got := out.String(); got != "hello <b>&\r\nprice € ok\uFFFD\r\nend \uFFFD\uFFFD" {
		t.Fatalf("output %q", got)
	}
	if strings.Contains(string(b), "secret") || !strings.Contains(strings.Join(kinds, ""), "r") {
		t.Fatalf("kinds %v; input recorded though not asked: %q", kinds, b)
	}
	if strings.Contains(string(b), `\u003c`) {
		t.Fatal("HTML escaping in the events")
	}
	if out := testenv.Asciinema(t, "cat", rf.Name()); !strings.Contains(out, "price € ok") {
		t.Fatalf("asciinema cat: %q", out)
	}
}

func TestStoreBounds(t *testing.T) {
	s := openStore(t, 10_000)
	dir := s.root.Name()
	mk := func(n int) string {
		f, err := s.Create(Terminal)
		if err != nil {
			t.Fatal(err)
		}
		f.Write(bytes.Repeat([]byte("x"), n))
		f.Close()
		time.Sleep(10 * time.Millisecond) // distinct modification times
		return f.ID
	}
	old, mid := mk(4000), mk(4000)
	// A third pushes out the oldest finished one.
	third := mk(1500)
	list, _ := s.List()
	var ids []string
	for _, i := range list {
		ids = append(ids, i.ID)
	}
	if len(list) != 2 || strings.Contains(strings.Join(ids, " "), old) || s.Bytes() > 10_000 {
		t.Fatalf("after the quota: %v (%d bytes), %s should be gone", ids, s.Bytes(), old)
	}
	// An active recording that finds no room stops; the others stay.
	f, err := s.Create(Terminal)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte("y"), 20_000)); !errors.Is(err, ErrQuota) {
		t.Fatalf("a write past the quota: %v", err)
	}
	list, _ = s.List()
	if len(list) == 0 || !list[0].Active || list[0].Stopped == "" {
		t.Fatalf("the stopped recording: %+v", list)
	}
	if err := s.Remove(f.ID); !errors.Is(err, ErrActive) {
		t.Fatalf("remove of an active recording: %v", err)
	}
	f.Close()
	if err := s.Remove(f.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(f.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if _, _, err := s.Get("../" + mid); err == nil {
		t.Fatal("a traversal id was served")
	}
	// A link planted under a recording's name is not followed.
	target := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(target, []byte("secret"), 0o600)
	planted := "terminal-20200101T000000Z-deadbeef"
	os.Symlink(target, filepath.Join(dir, planted+".cast"))
	if rf, _, err := s.Get(planted); err == nil {
		rf.Close()
		t.Fatal("a planted link was opened")
	}
	// Age: a finished recording older than the bound goes at the next list.
	old2 := time.Now().Add(-2 * time.Hour)
	os.Chtimes(filepath.Join(dir, third+".cast"), old2, old2)
	list, _ = s.List()
	for _, i := range list {
		if i.ID == third {
			t.Fatalf("%s outlived the age bound", third)
		}
	}
	_ = mid
}

// TestFullDisk: a recording on a full file system stops, logged; the
// writer gets an error and nothing else happens.
func TestFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("no tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	s, err := Open(dir, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := s.Create(Terminal)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCast(f, 80, 24, "", false)
	for range 100 {
		c.Output(bytes.Repeat([]byte("z"), 4096))
	}
	list, _ := s.List()
	if len(list) != 1 || !strings.Contains(list[0].Stopped, "no space") {
		t.Fatalf("on a full disk: %+v", list)
	}
	c.Close()
	// What was written before plays: every line whole but perhaps the last.
	b, _ := os.ReadFile(filepath.Join(dir, f.ID+".cast"))
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	castLines(t, append(bytes.Join(lines[:len(lines)-1], []byte("\n")), '\n'))
}

// TestListWhileWriting: listing and writing at once (their locks are
// taken in one order).
func TestListWhileWriting(t *testing.T) {
	s := openStore(t, 1<<20)
	f, err := s.Create(Terminal)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			f.Write(bytes.Repeat([]byte("w"), 600)) // past the quota: prunes, then stops
		}
	}()
	for range 200 {
		if _, err := s.List(); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("List and Write deadlocked")
	}
	f.Close()
}
