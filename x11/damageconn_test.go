package x11

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"io"
	"strings"
	"testing"
	"time"
)

// damageCode is DamageNotify's event code in the fake streams.
const damageCode = 91

// xDamage is a DamageNotify event of area (x, y, w, h), code code.
func xDamage(code byte, x, y int16, w, h uint16) []byte {
	b := make([]byte, 32)
	b[0] = code
	binary.LittleEndian.PutUint16(b[16:], uint16(x))
	binary.LittleEndian.PutUint16(b[18:], uint16(y))
	binary.LittleEndian.PutUint16(b[20:], w)
	binary.LittleEndian.PutUint16(b[22:], h)
	return b
}

func TestDamageConnSetup(t *testing.T) {
	setup := setupOK(0x400000, 0x1fffff)
	tests := []struct {
		name    string
		script  []byte
		wantErr string
	}{
		{"accepted", join(setup, xReply(1, 0), xReply(3, 0)), ""},
		{"events between the replies", join(setup, xEvent(34, 0), xReply(1, 0), xEvent(35, 2), xReply(3, 0)), ""},
		{"no DAMAGE version", join(setup, xErr(1, 1)), "damage version: X error 1"},
		{"create refused", join(setup, xReply(1, 0), xErr(2, 8)), "X error 8 on request 2"},
		{"version reply twice", join(setup, xReply(1, 0), xReply(1, 0)), "reply to request 1"},
		{"refused connection", setupReply(0, []byte("No protocol specified\n")), "refused"},
		{"closed after the version", join(setup, xReply(1, 0)), "create damage"},
		{"silent server", join(setup, []byte(hang)), "i/o timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &xConn{conn: fakeServer(t, tt.script), opcode: 143, timeout: 200 * time.Millisecond}
			err := c.watchDamage(cookieName, make([]byte, 16), 0x123)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.seg != 0x400001 || c.seq != 3 {
					t.Fatalf("damage id %#x, sequence %d", c.seg, c.seq)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("setup: %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestReadDamage(t *testing.T) {
	many := bytes.Repeat(xDamage(damageCode, 1, 2, 3, 4), 3*damageBuffer/32+5) // more than a read's buffer
	tests := []struct {
		name    string
		stream  []byte
		want    []image.Rectangle
		wantErr string // "" : io.EOF
	}{
		{"two notifications", join(xDamage(damageCode, 0, 0, 10, 20), xDamage(damageCode, 100, 50, 1, 1)),
			[]image.Rectangle{image.Rect(0, 0, 10, 20), image.Rect(100, 50, 101, 51)}, ""},
		{"negative origin", xDamage(damageCode, -5, -7, 10, 10), []image.Rectangle{image.Rect(-5, -7, 5, 3)}, ""},
		{"largest area", xDamage(damageCode, 32767, 32767, 65535, 65535), []image.Rectangle{image.Rect(32767, 32767, 32767+65535, 32767+65535)}, ""},
		{"synthetic notification skipped", join(xDamage(damageCode|0x80, 0, 0, 9, 9), xDamage(damageCode, 1, 1, 1, 1)),
			[]image.Rectangle{image.Rect(1, 1, 2, 2)}, ""},
		{"other events skipped", join(xEvent(34, 0), xEvent(damageCode+1, 0), xDamage(damageCode, 1, 1, 1, 1)),
			[]image.Rectangle{image.Rect(1, 1, 2, 2)}, ""},
		{"generic event skipped", join(xEvent(35, 3), xDamage(damageCode, 1, 1, 1, 1)), []image.Rectangle{image.Rect(1, 1, 2, 2)}, ""},
		{"huge generic event", join(xEvent(35, 1<<30), xDamage(damageCode, 1, 1, 1, 1)), nil, "event of"},
		{"generic event cut short", xEvent(35, 3)[:40], nil, "unexpected EOF"},
		{"an X error", join(xDamage(damageCode, 1, 1, 1, 1), xErr(9, 3)), []image.Rectangle{image.Rect(1, 1, 2, 2)}, "X error 3"},
		{"a reply", xReply(9, 0), nil, "reply"},
		{"notification cut short", xDamage(damageCode, 1, 1, 1, 1)[:31], nil, "unexpected EOF"},
		{"nothing", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []image.Rectangle
			err := readDamage(bytes.NewReader(tt.stream), damageCode, func(r image.Rectangle) { got = append(got, r) })
			switch {
			case tt.wantErr == "" && !errors.Is(err, io.EOF):
				t.Fatalf("err %v, want EOF", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err %v, want one with %q", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("rectangle %d: %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
	t.Run("more than a read", func(t *testing.T) {
		n := 0
		err := readDamage(bytes.NewReader(many), damageCode, func(r image.Rectangle) {
			if r != image.Rect(1, 2, 4, 6) {
				t.Fatalf("rectangle %v", r)
			}
			n++
		})
		if !errors.Is(err, io.EOF) || n != len(many)/32 {
			t.Fatalf("%d notifications, %v; want %d and EOF", n, err, len(many)/32)
		}
	})
}

// FuzzReadDamage: whatever the server sends, readDamage ends with an
// error at the stream's end, and reports at most one area an event, each
// no bigger than X's 16-bit sizes allow.
func FuzzReadDamage(f *testing.F) {
	f.Add(xDamage(damageCode, 1, 2, 3, 4))
	f.Add(join(xEvent(35, 1), xDamage(damageCode, -1, -1, 65535, 0)))
	f.Add(xErr(1, 8))
	f.Add(xEvent(35, 0xffffffff))
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		err := readDamage(bytes.NewReader(b), damageCode, func(r image.Rectangle) {
			n++
			if r.Dx() < 0 || r.Dy() < 0 || r.Dx() > 65535 || r.Dy() > 65535 {
				t.Fatalf("area %v", r)
			}
		})
		if err == nil || n > len(b)/32 {
			t.Fatalf("%d areas from %d bytes, err %v", n, len(b), err)
		}
	})
}
