package x11

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// authEntry is one Xauthority entry.
func authEntry(family uint16, addr, disp, name string, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, family)
	for _, f := range [][]byte{[]byte(addr), []byte(disp), []byte(name), data} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	return b
}

func TestFindCookie(t *testing.T) {
	c1, c2 := bytes.Repeat([]byte{1}, 16), bytes.Repeat([]byte{2}, 16)
	tests := []struct {
		name string
		file []byte
		want []byte
	}{
		{"wild, any display", authEntry(familyWild, "", "", cookieName, c1), c1},
		{"local, this host, this display", authEntry(familyLocal, "box", "3", cookieName, c1), c1},
		{"local, another host", authEntry(familyLocal, "other", "3", cookieName, c1), nil},
		{"another display first", join(authEntry(familyLocal, "box", "30", cookieName, c1), authEntry(familyLocal, "box", "3", cookieName, c2)), c2},
		{"another protocol", authEntry(familyWild, "", "", "XDM-AUTHORIZATION-1", c1), nil},
		{"cookie of 15 bytes", authEntry(familyWild, "", "", cookieName, c1[:15]), nil},
		{"network family", authEntry(0, "\x7f\x00\x00\x01", "3", cookieName, c1), nil},
		{"truncated entry", authEntry(familyWild, "", "", cookieName, c1)[:20], nil},
		{"truncated after a match", join(authEntry(familyWild, "", "", cookieName, c1), []byte{0xff}), c1},
		{"length past the end", []byte{0xff, 0xff, 0xff, 0xff}, nil},
		{"empty", nil, nil},
	}
	for _, tt := range tests {
		name, data := findCookie(tt.file, "box", "3")
		if tt.want == nil {
			if name != "" || data != nil {
				t.Errorf("%s: got %q %x, want none", tt.name, name, data)
			}
			continue
		}
		if name != cookieName || !bytes.Equal(data, tt.want) {
			t.Errorf("%s: got %q %x, want %x", tt.name, name, data, tt.want)
		}
	}
}

func FuzzFindCookie(f *testing.F) {
	f.Add(authEntry(familyWild, "", "", cookieName, make([]byte, 16)))
	f.Add(authEntry(familyLocal, "box", "3", cookieName, make([]byte, 16)))
	f.Add([]byte{0, 1, 0, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, data := findCookie(b, "box", "3")
		if (name == "") != (data == nil) || name != "" && (name != cookieName || len(data) != 16) {
			t.Fatalf("findCookie = %q %x", name, data)
		}
	})
}

func TestDisplayNumber(t *testing.T) {
	for in, want := range map[string]string{":0": "0", ":12": "12", ":3.0": "3", "host:0": "", ":": "", ":x": "", "": "", ":1234567": "", ":-1": ""} {
		got, err := displayNumber(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("displayNumber(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// join concatenates a fake server's packets.
func join(ps ...[]byte) []byte { return bytes.Join(ps, nil) }

// attached is a server's good setup and its answer to the attach's round
// trip: a connection ready to capture.
func attached() []byte { return join(setupOK(0x400000, 0x1fffff), xReply(2, 0)) }

// hang ends a fake server's script that stays open and says no more.
const hang = "\x00hang"

// X server packets for the fake server.
func setupReply(status byte, rest []byte) []byte {
	b := []byte{status, 0, 11, 0, 0, 0}
	if status == 0 {
		b[1] = byte(len(rest))
	}
	b = binary.LittleEndian.AppendUint16(b, uint16((len(rest)+3)/4))
	return append(b, append(rest, make([]byte, (4-len(rest)%4)%4)...)...)
}

func setupOK(base, mask uint32) []byte {
	rest := make([]byte, 32)
	binary.LittleEndian.PutUint32(rest[4:], base)
	binary.LittleEndian.PutUint32(rest[8:], mask)
	return setupReply(1, rest)
}

func xReply(seq uint16, extra uint32) []byte {
	b := make([]byte, 32+extra*4)
	b[0], b[1] = 1, 24
	binary.LittleEndian.PutUint16(b[2:], seq)
	binary.LittleEndian.PutUint32(b[4:], extra)
	return b
}

func xErr(seq uint16, code byte) []byte {
	b := make([]byte, 32)
	b[1] = code
	binary.LittleEndian.PutUint16(b[2:], seq)
	b[10] = 130
	return b
}

func xEvent(typ byte, extra uint32) []byte {
	b := make([]byte, 32+extra*4)
	b[0] = typ
	binary.LittleEndian.PutUint32(b[4:], extra)
	return b
}

// fakeServer serves script over a pipe (draining what the client
// writes), then closes it, or leaves it open and silent when script ends
// in hang; it returns the client's side.
func fakeServer(t *testing.T, script []byte) net.Conn {
	t.Helper()
	client, server := net.Pipe()
	t.Cleanup(func() { client.Close(); server.Close() })
	go io.Copy(io.Discard, server)
	go func() {
		body, stay := bytes.CutSuffix(script, []byte(hang))
		server.Write(body)
		if !stay {
			server.Close()
		}
	}()
	return client
}

// fakeX serves script to a capture xConn (fakeServer) and returns it
// after the setup and attach have run.
func fakeX(t *testing.T, script []byte, timeout time.Duration) (*xConn, error) {
	t.Helper()
	c := &xConn{conn: fakeServer(t, script), opcode: 130, timeout: timeout}
	return c, c.setup(cookieName, make([]byte, 16), 42)
}

func TestSHMConnSetup(t *testing.T) {
	ok := attached()
	tests := []struct {
		name    string
		script  []byte
		wantErr string
	}{
		{"accepted", ok, ""},
		{"events before the sync reply", join(setupOK(0x400000, 0x1fffff), xEvent(34, 0), xEvent(35, 3), xReply(2, 0)), ""},
		{"refused", setupReply(0, []byte("No protocol specified\n")), `refused: "No protocol specified"`},
		{"more authentication", setupReply(2, make([]byte, 8)), "status 2"},
		{"short setup", setupReply(1, make([]byte, 8)), "reply of 8 bytes"},
		{"no ids", join(setupOK(0x400000, 0), xReply(2, 0)), "resource ids"},
		{"base inside the mask", join(setupOK(0x400001, 0x1fffff), xReply(2, 0)), "resource ids"},
		{"attach failed", join(setupOK(0x400000, 0x1fffff), xErr(1, 10)), "X error 10 on request 1"},
		{"reply out of order", join(setupOK(0x400000, 0x1fffff), xReply(7, 0)), "reply to request 7"},
		{"huge generic event", join(setupOK(0x400000, 0x1fffff), xEvent(35, 1<<30)), "to skip"},
		{"closed mid-setup", setupOK(0x400000, 0x1fffff)[:20], "EOF"},
		{"silent server", []byte(hang), "i/o timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := fakeX(t, tt.script, 200*time.Millisecond)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.seg != 0x400001 || c.seq != 2 {
					t.Fatalf("segment id %#x, sequence %d", c.seg, c.seq)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("setup: %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestSHMConnGetImage(t *testing.T) {
	ok := attached()
	tests := []struct {
		name   string
		script []byte
		// per getImage: "" for success, "X" for an in-step X error, else
		// part of the stream-breaking error
		want []string
	}{
		{"replies", join(ok, xReply(3, 0), xReply(4, 0)), []string{"", ""}},
		{"mapping notify in between", join(ok, xEvent(34, 0), xReply(3, 0)), []string{""}},
		{"generic event skipped", join(ok, xEvent(35, 5), xReply(3, 0)), []string{""}},
		{"reply with extra words skipped", join(ok, xReply(3, 2), xReply(4, 0)), []string{"", ""}},
		{"X error then a reply: still in step", join(ok, xErr(3, 8), xReply(4, 0)), []string{"X", ""}},
		{"error for an earlier request", join(ok, xErr(1, 8)), []string{"on request 1"}},
		{"old reply", join(ok, xReply(2, 0)), []string{"reply to request 2"}},
		{"reply too long", join(ok, xReply(3, 1<<20)), []string{"to skip"}},
		{"endless events", join(ok, bytes.Repeat(xEvent(34, 0), maxEvents+1)), []string{"no reply"}},
		{"closed mid-reply", join(ok, xReply(3, 0)[:10]), []string{"EOF"}},
		{"no answer", join(ok, []byte(hang)), []string{"i/o timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := fakeX(t, tt.script, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tt.want {
				err := c.getImage(1, 0, 0, 10, 10, 0)
				var xe *xError
				switch {
				case want == "" && err != nil:
					t.Fatalf("getImage %d: %v", i, err)
				case want == "X" && !errors.As(err, &xe):
					t.Fatalf("getImage %d: %v, want an X error", i, err)
				case want != "" && want != "X" && (err == nil || errors.As(err, &xe) || !strings.Contains(err.Error(), want)):
					t.Fatalf("getImage %d: %v, want a broken stream with %q", i, err, want)
				}
			}
		})
	}
}

// FuzzSHMConnReply feeds arbitrary server bytes after a good setup: a
// capture returns, with a reply or an error, and never hangs or panics.
func FuzzSHMConnReply(f *testing.F) {
	f.Add(xReply(3, 0))
	f.Add(append(xEvent(35, 1), xReply(3, 0)...))
	f.Add(xErr(3, 8))
	f.Add(xReply(3, 0xffffffff))
	f.Fuzz(func(t *testing.T, b []byte) {
		script := join(attached(), b) // ends with a close (or a hang)
		c, err := fakeX(t, script, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		c.getImage(1, 0, 0, 1, 1, 0)
	})
}

func FuzzReadSetup(f *testing.F) {
	f.Add(setupOK(0x400000, 0x1fffff))
	f.Add(setupReply(0, []byte("no")))
	f.Add([]byte{1, 0, 11, 0, 0, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		base, mask, err := readSetup(bytes.NewReader(b))
		if err == nil && (mask == 0 || base&mask != 0) {
			t.Fatalf("accepted ids %#x/%#x", base, mask)
		}
	})
}

// TestSHMConnRedials breaks the capture connection of a real Xvfb: the
// capture that meets it dials again and is right.
func TestSHMConnRedials(t *testing.T) {
	x, s := startScreen(t, XvfbConfig{Resolution: Resolution{320, 240, 24}})
	if s.shmem == nil {
		t.Skip("no MIT-SHM with this X server")
	}
	r := image.Rect(0, 0, 320, 240)
	want := make([]byte, 320*240*4)
	if err := s.Capture(r, want, 320*4); err != nil {
		t.Fatal(err)
	}
	s.capMu.Lock()
	s.shmc.conn.Close()
	s.capMu.Unlock()
	got := make([]byte, 320*240*4)
	if err := s.Capture(r, got, 320*4); err != nil {
		t.Fatalf("capture after the break: %v", err)
	}
	if !bytes.Equal(got, want) || s.shmDials != 2 {
		t.Fatalf("after the break: same picture %v, %d connections made", bytes.Equal(got, want), s.shmDials)
	}
	// An X error (an area off the screen is clipped first, so ask the
	// connection directly) leaves the connection in step.
	s.capMu.Lock()
	err := s.shmc.getImage(uint32(s.root), 300, 0, 100, 10, 0)
	s.capMu.Unlock()
	var xe *xError
	if !errors.As(err, &xe) {
		t.Fatalf("capture past the screen's edge: %v, want an X error", err)
	}
	if err := s.Capture(r, got, 320*4); err != nil || !bytes.Equal(got, want) || s.shmDials != 2 {
		t.Fatalf("after an X error: %v, same picture %v, %d connections made", err, bytes.Equal(got, want), s.shmDials)
	}
	// With the X server gone, a capture fails, and once the screen knows
	// it is gone no capture dials again.
	x.Stop(t.Context(), 5*time.Second)
	if err := s.CaptureShared(r, func([]byte, int) { t.Error("captured with no X server") }); err == nil {
		t.Fatal("capture with no X server did not fail")
	}
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the screen did not notice its X server went away")
	}
	dials := s.shmDials
	if err := s.CaptureShared(r, func([]byte, int) {}); err == nil || !strings.Contains(err.Error(), "screen closed") || s.shmDials != dials {
		t.Fatalf("capture on a gone screen: %v, %d connections made (was %d)", err, s.shmDials, dials)
	}
}
