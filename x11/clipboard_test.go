package x11

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
)

// TestClipboard exchanges text with xclip, an X client we did not write,
// both ways, through CLIPBOARD and PRIMARY, small and large (the large
// text crosses xgb's request-size limit, so it goes out in INCR pieces).
func TestClipboard(t *testing.T) {
	xclip := testenv.LookPath(t, "xclip")
	x, s := startScreen(t, XvfbConfig{Resolution: Resolution{320, 240, 24}})

	xclipCmd := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, xclip, append([]string{"-display", x.Display}, args...)...)
		return cmd
	}
	read := func(sel, target string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		out, err := xclipCmd(ctx, "-o", "-selection", sel, "-target", target).Output()
		if err != nil {
			t.Fatalf("xclip -o %s %s: %v", sel, target, err)
		}
		return string(out)
	}
	// waitRead polls until the selection reads want (SetClipboard is
	// applied by the clipboard's goroutine, asynchronously).
	waitRead := func(sel, target, want string) {
		t.Helper()
		var got string
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if got = read(sel, target); got == want {
				return
			}
		}
		t.Fatalf("%s as %s: got %d bytes %.60q, want %d bytes %.60q", sel, target, len(got), got, len(want), want)
	}

	// Viewers → X.
	small := "héllo € ✓ 漢字\nline 2"
	if err := s.SetClipboard(small); err != nil {
		t.Fatal(err)
	}
	waitRead("clipboard", "UTF8_STRING", small)
	waitRead("primary", "UTF8_STRING", small)
	waitRead("clipboard", "STRING", "h\xe9llo ? ? ??\nline 2") // Latin-1, '?' where it has no letter
	if targets := read("clipboard", "TARGETS"); !strings.Contains(targets, "UTF8_STRING") {
		t.Fatalf("TARGETS = %q", targets)
	}
	large := strings.Repeat("0123456789abcdé\n", 60000) // 1,020,000 bytes, just under the limit: INCR pieces
	if err := s.SetClipboard(large); err != nil {
		t.Fatal(err)
	}
	waitRead("clipboard", "UTF8_STRING", large)
	if err := s.SetClipboard(strings.Repeat("x", MaxClipboard+1)); err == nil {
		t.Fatal("SetClipboard accepted text over the limit")
	}

	// X → viewers: xclip owns the selection and serves it while it runs.
	for _, c := range []struct{ sel, text string }{
		{"clipboard", "ünïcødé from X ✓"},
		{"primary", "selected with the mouse"},
		{"clipboard", large[:300<<10] + "end"},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		cmd := xclipCmd(ctx, "-quiet", "-selection", c.sel, "-i")
		cmd.Stdin = strings.NewReader(c.text)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-s.ClipboardChanged():
			if got != c.text {
				t.Errorf("from xclip (%s): got %d bytes %.40q, want %d bytes %.40q", c.sel, len(got), got, len(c.text), c.text)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no clipboard change after xclip took %s", c.sel)
		}
		cancel()
		cmd.Wait()
	}

	// Our own ownership is not reported back as a change.
	if err := s.SetClipboard("ours"); err != nil {
		t.Fatal(err)
	}
	waitRead("clipboard", "UTF8_STRING", "ours")
	select {
	case got := <-s.ClipboardChanged():
		t.Fatalf("our own SetClipboard came back as a change (%.40q)", got)
	case <-time.After(300 * time.Millisecond):
	}
}
