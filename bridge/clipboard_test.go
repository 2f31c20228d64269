package bridge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zlib"
)

// clipScreen is a memScreen with a clipboard.
type clipScreen struct {
	*memScreen
	cmu     sync.Mutex
	set     []string
	changed chan string
}

func (c *clipScreen) SetClipboard(text string) error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	c.set = append(c.set, text)
	return nil
}

func (c *clipScreen) ClipboardChanged() <-chan string { return c.changed }

func (c *clipScreen) waitSet(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		c.cmu.Lock()
		n := len(c.set)
		last := ""
		if n > 0 {
			last = c.set[n-1]
		}
		c.cmu.Unlock()
		if last == want {
			return
		}
	}
	c.cmu.Lock()
	defer c.cmu.Unlock()
	t.Fatalf("screen clipboard %q, want last %q", c.set, want)
}

// cutText reads a ServerCutText: its payload, and whether it is extended.
func (c *rfbClient) cutText() ([]byte, bool) {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.c.SetReadDeadline(time.Time{})
	h := c.read(8)
	if h[0] != msgServerCutText {
		c.t.Fatalf("message type %d, want ServerCutText", h[0])
	}
	n := int32(binary.BigEndian.Uint32(h[4:]))
	if n < 0 {
		return c.read(int(-n)), true
	}
	return c.read(int(n)), false
}

// extMessage reads an extended clipboard message and checks its flags.
func (c *rfbClient) extMessage(wantFlags uint32) []byte {
	c.t.Helper()
	p, ext := c.cutText()
	if !ext || len(p) < 4 {
		c.t.Fatalf("got plain cut text %q, want extended flags %#x", p, wantFlags)
	}
	if f := binary.BigEndian.Uint32(p); f != wantFlags {
		c.t.Fatalf("extended clipboard flags %#x, want %#x", f, wantFlags)
	}
	return p[4:]
}

func (c *rfbClient) clientCut(payload []byte, extended bool) {
	n := uint32(len(payload))
	if extended {
		n = uint32(-int32(n))
	}
	b := binary.BigEndian.AppendUint32([]byte{msgClientCutText, 0, 0, 0}, n)
	c.write(append(b, payload...))
}

func extFlags(f uint32) []byte { return binary.BigEndian.AppendUint32(nil, f) }

// provide builds a viewer's provide message as noVNC does.
func provide(text string) []byte {
	t := strings.ReplaceAll(text, "\n", "\r\n") + "\x00"
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	binary.Write(w, binary.BigEndian, uint32(len(t)))
	io.WriteString(w, t)
	w.Close()
	return append(extFlags(clipProvide|clipFormatText), z.Bytes()...)
}

func decodeProvide(t *testing.T, body []byte) string {
	t.Helper()
	zr, err := zlib.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.BigEndian.Uint32(b)
	if int(n) != len(b)-4 || b[len(b)-1] != 0 {
		t.Fatalf("provide size %d for %d bytes %q", n, len(b)-4, b)
	}
	return string(b[4 : len(b)-1])
}

func TestClipboardBothWays(t *testing.T) {
	scr := &clipScreen{memScreen: newMemScreen(64, 64), changed: make(chan string, 1)}
	s, err := NewServer(scr, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	plain := dialRFB(t, s, version38, "", ConnOptions{})
	plain.setEncodings(EncRaw)
	ext := dialRFB(t, s, version38, "", ConnOptions{})
	ext.setEncodings(EncRaw, EncExtendedClipboard)
	caps := ext.extMessage(clipCaps | clipRequest | clipPeek | clipNotify | clipProvide | clipFormatText)
	if binary.BigEndian.Uint32(caps) != MaxCutText {
		t.Fatalf("caps max size %d", binary.BigEndian.Uint32(caps))
	}
	ext.clientCut(append(extFlags(clipCaps|clipFormatText), 0, 0, 0, 0), true) // noVNC's caps reply
	view := dialRFB(t, s, version38, "", ConnOptions{ViewOnly: true})

	// The screen's clipboard changes: the plain viewer gets Latin-1, the
	// extended one a notify, then the text on request.
	scr.changed <- "hé €\nline"
	if p, ext := plain.cutText(); ext || string(p) != "h\xe9 ?\nline" {
		t.Fatalf("plain viewer got %q (extended %v)", p, ext)
	}
	ext.extMessage(clipNotify | clipFormatText)
	ext.clientCut(extFlags(clipRequest|clipFormatText), true)
	if got := decodeProvide(t, ext.extMessage(clipProvide|clipFormatText)); got != "hé €\r\nline" {
		t.Fatalf("provide %q", got)
	}

	// A plain viewer pastes Latin-1: the screen gets UTF-8, the extended
	// viewer a notify, the sender nothing back.
	plain.clientCut([]byte("caf\xe9"), false)
	scr.waitSet(t, "café")
	ext.extMessage(clipNotify | clipFormatText)
	ext.clientCut(extFlags(clipRequest|clipFormatText), true)
	if got := decodeProvide(t, ext.extMessage(clipProvide|clipFormatText)); got != "café" {
		t.Fatalf("provide %q", got)
	}

	// The extended viewer has text: notify, our request, its provide.
	ext.clientCut(extFlags(clipNotify|clipFormatText), true)
	ext.extMessage(clipRequest | clipFormatText)
	ext.clientCut(provide("x\ny ✓"), true)
	scr.waitSet(t, "x\ny ✓")
	if p, _ := plain.cutText(); string(p) != "x\ny ?" {
		t.Fatalf("plain viewer got %q", p)
	}
	// Peek: a notify saying we have text.
	ext.clientCut(extFlags(clipPeek), true)
	ext.extMessage(clipNotify | clipFormatText)

	// A view-only viewer neither sets nor receives the clipboard.
	view.clientCut([]byte("from the viewer"), false)
	view.clientCut(provide("nor this"), true)
	view.setEncodings(EncRaw)
	view.request(false)
	if rs := view.update(); len(rs) == 0 { // an update, not cut text, comes first
		t.Fatal("no update")
	}
	scr.cmu.Lock()
	n := len(scr.set)
	scr.cmu.Unlock()
	if n != 2 {
		t.Fatalf("screen clipboard set %d times, want 2 (the view-only viewer's ignored)", n)
	}

	// A provide whose data is not zlib ends the connection clearly.
	ext.clientCut(append(extFlags(clipProvide|clipFormatText), 1, 2, 3, 4, 5), true)
	select {
	case err := <-ext.closed:
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("Serve ended with %v, want a protocol error", err)
		}
		ext.closed <- err
	case <-time.After(5 * time.Second):
		t.Fatal("connection not ended by a corrupt provide")
	}
}

func TestParseProvideBounds(t *testing.T) {
	big := func(n uint32) []byte {
		var z bytes.Buffer
		w := zlib.NewWriter(&z)
		binary.Write(w, binary.BigEndian, n)
		w.Write(make([]byte, 1000))
		w.Close()
		return z.Bytes()
	}
	for _, tc := range []struct {
		name    string
		flags   uint32
		data    []byte
		want    string
		wantOK  bool
		wantErr bool
	}{
		{"text", clipProvide | clipFormatText, provide("a\nb")[4:], "a\nb", true, false},
		{"no text format", clipProvide | 1<<1, big(10), "", false, false},
		{"size over the limit", clipProvide | clipFormatText, big(MaxCutText + 1), "", false, true},
		{"size past the data", clipProvide | clipFormatText, big(5000), "", false, true},
		{"not zlib", clipProvide | clipFormatText, []byte("garbage"), "", false, true},
		{"empty", clipProvide | clipFormatText, nil, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := parseProvide(tc.flags, tc.data)
			if (err != nil) != tc.wantErr || ok != tc.wantOK || got != tc.want {
				t.Fatalf("parseProvide = %q, %v, %v; want %q, %v, error %v", got, ok, err, tc.want, tc.wantOK, tc.wantErr)
			}
		})
	}
}

func FuzzParseProvide(f *testing.F) {
	f.Add(uint32(clipProvide|clipFormatText), provide("hello\nworld")[4:])
	f.Add(uint32(clipProvide|0xffff), provide("x")[4:])
	f.Add(uint32(clipProvide|clipFormatText), []byte{0x78, 0x9c, 0x03, 0x00})
	// from the hostile suite: an item claiming 1 GiB
	f.Add(uint32(clipProvide|clipFormatText), zlibOf([]byte{0x40, 0, 0, 0, 'a', 'b'}))
	f.Fuzz(func(t *testing.T, flags uint32, data []byte) {
		text, ok, err := parseProvide(flags, data)
		if err != nil && (ok || text != "") {
			t.Fatal("error with a result")
		}
		if len(text) > MaxCutText*3 { // U+FFFD replacement may grow it
			t.Fatalf("text of %d bytes", len(text))
		}
	})
}
