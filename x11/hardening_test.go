package x11

import (
	"context"
	"fmt"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// Typing more distinct unmapped characters than there are spare keycodes
// keeps working: the least recently used keycode is lent again.
func TestSpareKeycodesRecycled(t *testing.T) {
	x, s := startScreen(t, XvfbConfig{Resolution: Resolution{640, 480, 24}})
	spares := len(s.kb.spares.free)
	if spares == 0 {
		t.Fatal("no spare keycodes on this server")
	}
	n := spares*2 + 10
	var last xproto.Keysym
	for i := range n {
		ks := uint32(0x1004e00 + i) // CJK ideographs: no key on a US layout
		if err := s.Key(ks, true); err != nil {
			t.Fatalf("key %d of %d (%d spare keycodes): %v", i+1, n, spares, err)
		}
		if err := s.Key(ks, false); err != nil {
			t.Fatal(err)
		}
		last = xproto.Keysym(ks)
	}
	// The server's mapping says the last one, where deskd bound it.
	kc := s.kb.spares.bound[last]
	c, err := xgb.NewConnDisplay(x.Display)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := xproto.GetKeyboardMapping(c, kc, 1).Reply()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Keysyms) == 0 || m.Keysyms[0] != last {
		t.Fatalf("keycode %d maps to %v, want %#x", kc, m.Keysyms, last)
	}
	if len(s.kb.spares.bound) > spares {
		t.Fatalf("%d keysyms bound on %d spare keycodes", len(s.kb.spares.bound), spares)
	}
	// A key held down keeps its keycode while others come and go.
	held := uint32(0x1005000)
	if err := s.Key(held, true); err != nil {
		t.Fatal(err)
	}
	hk := s.kb.spares.bound[xproto.Keysym(held)]
	for i := range spares + 5 {
		ks := uint32(0x1006000 + i)
		if err := s.Key(ks, true); err != nil {
			t.Fatal(err)
		}
		s.Key(ks, false)
	}
	if s.kb.spares.bound[xproto.Keysym(held)] != hk {
		t.Fatal("the keycode of a key held down was lent to another keysym")
	}
	s.Key(held, false)
}

// When the damage queue overflows, the last change still reaches the
// reader: dropped events leave a whole-screen rectangle behind.
func TestDamageOverflowKeepsTheLastChange(t *testing.T) {
	x, s := startScreen(t, XvfbConfig{Resolution: Resolution{640, 480, 24}})
	c, err := xgb.NewConnDisplay(x.Display)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	root := xproto.Setup(c).DefaultScreen(c).Root
	gc, _ := xproto.NewGcontextId(c)
	xproto.CreateGC(c, gc, xproto.Drawable(root), xproto.GcForeground, []uint32{0xffffff})
	// Whatever is queued (the screen's first damage is all of it) is
	// taken first, up to a marker drawn last.
	xproto.PolyFillRectangle(c, xproto.Drawable(root), gc, []xproto.Rectangle{{X: 0, Y: 200, Width: 5, Height: 5}})
	xproto.GetInputFocus(c).Reply()
	marker := image.Rect(0, 200, 5, 205)
	for seen := false; !seen; {
		select {
		case r := <-s.Damage():
			seen = r == marker
		case <-time.After(10 * time.Second):
			t.Fatal("no damage for the marker")
		}
	}
	// More separate damage than the queue holds, nobody reading, then a
	// last change somewhere else: a notification each (one 1×1
	// rectangle), all read once the screen has counted them.
	before := s.damaged.Load()
	n := cap(s.damage) + 2000
	for i := range n {
		xproto.PolyFillRectangle(c, xproto.Drawable(root), gc, []xproto.Rectangle{{X: int16(i % 600), Y: int16(i / 600 % 100), Width: 1, Height: 1}})
	}
	final := image.Rect(500, 400, 510, 410)
	xproto.PolyFillRectangle(c, xproto.Drawable(root), gc, []xproto.Rectangle{{X: 500, Y: 400, Width: 10, Height: 10}})
	xproto.GetInputFocus(c).Reply() // round trip: all drawn
	for deadline := time.Now().Add(10 * time.Second); s.damaged.Load() < before+int64(n)+1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d notifications read", s.damaged.Load()-before, n+1)
		}
	}
	var got image.Rectangle
	for drained := false; !drained; {
		select {
		case r := <-s.Damage():
			got = got.Union(r)
		default:
			drained = true
		}
	}
	if !final.In(got) {
		t.Fatalf("the last change %v never reached the reader (union of damage %v)", final, got)
	}
}

// With an authority file, Xvfb admits only clients that present its
// cookie.
func TestXAuthority(t *testing.T) {
	path := testenv.LookPath(t, "Xvfb")
	xdpyinfo := testenv.LookPath(t, "xdpyinfo")
	auth := filepath.Join(t.TempDir(), "xauthority")
	if err := WriteAuthority(auth, -1, -1); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(auth); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("authority file: %v %v", fi, err)
	}
	t.Setenv("XAUTHORITY", auth) // StartXvfb's own connections present it
	sp := proc.NewSpawner()
	defer sp.Close()
	x, err := StartXvfb(t.Context(), sp, XvfbConfig{Path: path, Resolution: Resolution{640, 480, 24}, AuthFile: auth})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Stop(context.Background(), 5*time.Second)
	run := func(xauth string) error {
		cmd := exec.Command(xdpyinfo, "-display", x.Display)
		cmd.Env = []string{"XAUTHORITY=" + xauth, "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %.200s", err, out)
		}
		return nil
	}
	if err := run(auth); err != nil {
		t.Fatalf("a client with the cookie was refused: %v", err)
	}
	other := filepath.Join(t.TempDir(), "other")
	WriteAuthority(other, -1, -1)
	for name, xa := range map[string]string{"no cookie": "/nonexistent", "another cookie": other} {
		if err := run(xa); err == nil {
			t.Fatalf("a client with %s was admitted", name)
		}
	}
	t.Setenv("XAUTHORITY", other)
	if s, err := OpenScreen(x.Display, nil); err == nil {
		s.Close()
		t.Fatal("xgb with another cookie was admitted")
	}
	t.Setenv("XAUTHORITY", auth)
	s, err := OpenScreen(x.Display, nil)
	if err != nil {
		t.Fatalf("xgb with the cookie: %v", err)
	}
	defer s.Close()
	// The capture connection (shmconn.go) presents the cookie too.
	if s.shmc == nil {
		t.Fatal("no MIT-SHM capture connection with the cookie")
	}
	if err := s.CaptureShared(image.Rect(0, 0, 640, 480), func([]byte, int) {}); err != nil {
		t.Fatalf("capture with the cookie: %v", err)
	}
	c2, err := dialSHM(x.Display, s.shmOp, s.shmID)
	if err != nil {
		t.Fatalf("a second capture connection with the cookie: %v", err)
	}
	c2.Close()
	t.Setenv("XAUTHORITY", other)
	if c, err := dialSHM(x.Display, s.shmOp, s.shmID); err == nil || !strings.Contains(err.Error(), "refused") {
		if c != nil {
			c.Close()
		}
		t.Fatalf("a capture connection with another cookie: %v, want refused", err)
	}
}

// The VNC server and the computer API each hold an X connection to one
// display: they share one Keyboard, so a keycode one lends is never lent
// by the other to another keysym (an agent's "€" once typed the "ж" a
// person typed meanwhile), and a mapping changed by another client
// (setxkbmap in a shell) is read again at its MappingNotify.
func TestKeyboardSharedAndRefreshed(t *testing.T) {
	x, _ := startScreen(t, XvfbConfig{Resolution: Resolution{640, 480, 24}})
	kb := NewKeyboard()
	open := func() *Screen {
		s, err := OpenScreenWith(x.Display, kb, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	agent, person := open(), open()
	c, err := xgb.NewConnDisplay(x.Display)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	serverSym := func(kc xproto.Keycode) xproto.Keysym {
		m, err := xproto.GetKeyboardMapping(c, kc, 1).Reply()
		if err != nil || len(m.Keysyms) == 0 {
			t.Fatalf("mapping of %d: %v", kc, err)
		}
		return m.Keysyms[0]
	}
	// The keycode the agent's next key of ks goes to.
	keycodeOf := func(ks xproto.Keysym) xproto.Keycode {
		kb.mu.Lock()
		defer kb.mu.Unlock()
		if err := kb.ensure(agent.c, agent.minKey, agent.maxKey); err != nil {
			t.Fatal(err)
		}
		kc, _, ok := kb.lookup(ks)
		if !ok {
			t.Fatalf("keysym %#x has no keycode", ks)
		}
		return kc
	}
	const euro, zhe = 0x20ac, 0x6d6 // €, Cyrillic ж
	for _, k := range []struct {
		s  *Screen
		ks uint32
	}{{agent, euro}, {person, zhe}, {agent, euro}} {
		if err := k.s.Key(k.ks, true); err != nil {
			t.Fatal(err)
		}
		k.s.Key(k.ks, false)
	}
	if kc := keycodeOf(euro); serverSym(kc) != euro {
		t.Fatalf("the agent's € goes to keycode %d, which the server maps to %#x", kc, serverSym(kc))
	}
	if kc := keycodeOf(zhe); serverSym(kc) != zhe {
		t.Fatalf("the person's ж goes to keycode %d, which the server maps to %#x", kc, serverSym(kc))
	}

	// Another client maps €'s keycode to something else.
	kc := keycodeOf(euro)
	before := kb.reloads.Load()
	m, err := xproto.GetKeyboardMapping(c, kc, 1).Reply()
	if err != nil {
		t.Fatal(err)
	}
	syms := make([]xproto.Keysym, m.KeysymsPerKeycode)
	for i := range syms {
		syms[i] = 0x1004e2d // 中
	}
	if err := xproto.ChangeKeyboardMappingChecked(c, 1, kc, m.KeysymsPerKeycode, syms).Check(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !kb.stale.Load(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no MappingNotify reached deskd's screens")
		}
	}
	if err := agent.Key(euro, true); err != nil {
		t.Fatal(err)
	}
	agent.Key(euro, false)
	if kb.reloads.Load() == before {
		t.Fatal("the mapping was not read again after a MappingNotify")
	}
	if kc := keycodeOf(euro); serverSym(kc) != euro {
		t.Fatalf("after another client's change the agent's € goes to keycode %d, mapped to %#x", kc, serverSym(kc))
	}
	if kc := keycodeOf(0x1004e2d); serverSym(kc) != 0x1004e2d {
		t.Fatalf("中 (mapped by another client) at keycode %d, which maps to %#x", kc, serverSym(kc))
	}
}
