package term

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParseHello(t *testing.T) {
	tests := []struct {
		in       string
		want     Size
		wantCode int
	}{
		{`{"AuthToken":"","columns":120,"rows":40}`, Size{120, 40}, 0},
		{`{"columns":0,"rows":0}`, Size{DefaultColumns, DefaultRows}, 0},
		{`{"AuthToken":"x","columns":80,"rows":24,"extra":true}`, Size{80, 24}, 0},
		{`{"columns":100000,"rows":24}`, Size{}, ClosePolicy},
		{`{"columns":-1,"rows":24}`, Size{}, ClosePolicy},
		{`{"columns":"80"}`, Size{}, CloseInvalid},
		{`not json`, Size{}, CloseInvalid},
		{`{"columns":80}{"rows":1}`, Size{}, CloseInvalid},
		{``, Size{}, CloseInvalid},
		{`{"AuthToken":"` + strings.Repeat("a", MaxHelloLen) + `"}`, Size{}, CloseTooBig},
	}
	for _, tt := range tests {
		h, err := ParseHello([]byte(tt.in))
		if tt.wantCode != 0 {
			var pe *ErrProtocol
			if !errors.As(err, &pe) || pe.Code != tt.wantCode {
				t.Errorf("ParseHello(%.40q) = %v, %v; want close %d", tt.in, h, err, tt.wantCode)
			}
			continue
		}
		if err != nil || h.Size != tt.want {
			t.Errorf("ParseHello(%.40q) = %v, %v; want %v", tt.in, h.Size, err, tt.want)
		}
	}
}

func TestParseMessage(t *testing.T) {
	tests := []struct {
		in       string
		want     Message
		wantCode int
	}{
		{"0ls\r", Message{Cmd: CmdInput, Input: []byte("ls\r")}, 0},
		{"0", Message{Cmd: CmdInput, Input: []byte{}}, 0},
		{`1{"columns":100,"rows":30}`, Message{Cmd: CmdResize, Size: Size{100, 30}}, 0},
		{"2", Message{Cmd: CmdPause}, 0},
		{"3", Message{Cmd: CmdResume}, 0},
		{`1{"columns":100000,"rows":30}`, Message{}, ClosePolicy},
		{`1{"columns":0,"rows":30}`, Message{}, ClosePolicy},
		{`1{"columns":1e9,"rows":30}`, Message{}, CloseInvalid},
		{`1{bad`, Message{}, CloseInvalid},
		{`1{"columns":1,"rows":1}` + strings.Repeat(" ", MaxResizeLen), Message{}, CloseTooBig},
		{"2x", Message{}, CloseUnsupported},
		{"9", Message{}, CloseUnsupported},
		{`{"AuthToken":""}`, Message{}, CloseUnsupported},
		{"", Message{}, CloseUnsupported},
		{"0" + strings.Repeat("x", MaxInputLen+1), Message{}, CloseTooBig},
	}
	for _, tt := range tests {
		m, err := ParseMessage([]byte(tt.in))
		if tt.wantCode != 0 {
			var pe *ErrProtocol
			if !errors.As(err, &pe) || pe.Code != tt.wantCode {
				t.Errorf("ParseMessage(%.40q) = %+v, %v; want close %d", tt.in, m, err, tt.wantCode)
			}
			continue
		}
		if err != nil || m.Cmd != tt.want.Cmd || !bytes.Equal(m.Input, tt.want.Input) || m.Size != tt.want.Size {
			t.Errorf("ParseMessage(%.40q) = %+v, %v; want %+v", tt.in, m, err, tt.want)
		}
	}
}

// FuzzParseMessage: never panics; what parses is within bounds; errors
// carry a close code.
func FuzzParseMessage(f *testing.F) {
	for _, s := range []string{"0ls\r", `1{"columns":100,"rows":30}`, "2", "3", "9", `1{"columns":-5}`, ""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMessage(b)
		if err != nil {
			var pe *ErrProtocol
			if !errors.As(err, &pe) || pe.Code < 1000 {
				t.Fatalf("error without close code: %v", err)
			}
			return
		}
		if m.Cmd == CmdResize && (m.Size.Columns < 1 || m.Size.Columns > MaxColumns || m.Size.Rows < 1 || m.Size.Rows > MaxRows) {
			t.Fatalf("resize out of bounds accepted: %+v", m.Size)
		}
	})
}

func FuzzParseHello(f *testing.F) {
	f.Add([]byte(`{"AuthToken":"","columns":120,"rows":40}`))
	f.Add([]byte(`{"columns":1e99}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHello(b)
		if err == nil && (h.Columns < 1 || h.Columns > MaxColumns || h.Rows < 1 || h.Rows > MaxRows) {
			t.Fatalf("hello out of bounds accepted: %+v", h)
		}
	})
}

func TestRing(t *testing.T) {
	r := newRing(8)
	read := func(off int64) (string, bool) {
		buf := make([]byte, 16)
		n, ok := r.readAt(off, buf)
		return string(buf[:n]), ok
	}
	r.write([]byte("abc"))
	if s, ok := read(0); s != "abc" || !ok {
		t.Fatalf("read 0 = %q %v", s, ok)
	}
	r.write([]byte("defgh")) // exactly full
	if s, _ := read(0); s != "abcdefgh" || r.start != 0 {
		t.Fatalf("full ring = %q start %d", s, r.start)
	}
	r.write([]byte("ij")) // wraps: a, b dropped
	if s, ok := read(2); s != "cdefghij" || !ok || r.start != 2 {
		t.Fatalf("wrapped = %q %v start %d", s, ok, r.start)
	}
	if _, ok := read(1); ok {
		t.Fatal("dropped offset still readable")
	}
	r.write([]byte("0123456789ABC")) // longer than the ring
	if s, _ := read(r.start); s != "56789ABC" || r.end != 23 {
		t.Fatalf("after overlong write = %q end %d", s, r.end)
	}
	if s, _ := read(20); s != "ABC" {
		t.Fatalf("read mid = %q", s)
	}
}

// FuzzRing compares the ring with a plain slice holding all output.
func FuzzRing(f *testing.F) {
	f.Add([]byte("hello world, a long line"), uint8(5), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, size, chunk uint8) {
		sz := int(size%32) + 1
		ch := int(chunk%40) + 1
		r := newRing(sz)
		var all []byte
		for i := 0; i < len(data); i += ch {
			p := data[i:min(len(data), i+ch)]
			r.write(p)
			all = append(all, p...)
			if r.end != int64(len(all)) || r.end-r.start > int64(sz) || r.start < 0 {
				t.Fatalf("offsets start %d end %d after %d bytes, size %d", r.start, r.end, len(all), sz)
			}
			buf := make([]byte, sz)
			n, ok := r.readAt(r.start, buf)
			if !ok || !bytes.Equal(buf[:n], all[r.start:]) {
				t.Fatalf("ring holds %q, want %q", buf[:n], all[r.start:])
			}
		}
	})
}

func TestFilterQueries(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain text\r\n", "plain text\r\n"},
		{"a\x1b[cb", "ab"},                                                     // DA1
		{"a\x1b[>cb\x1b[>0c", "ab"},                                            // DA2
		{"x\x1b[6ny\x1b[5n\x1b[?6n", "xy"},                                     // DSR
		{"\x1b]11;?\x07\x1b]10;?\x1b\\keep", "keep"},                           // OSC colour queries
		{"\x1b]4;1;?\x07", ""},                                                 // palette query
		{"\x1bP$qm\x1b\\\x1bP+q544e\x1b\\z", "z"},                              // DECRQSS, XTGETTCAP
		{"\x1b[?2026$p\x1b[>q\x1b[?u\x1b[18t", ""},                             // DECRQM, XTVERSION, kitty, size
		{"\x1b[31mred\x1b[0m\x1b[2J\x1b[H", "\x1b[31mred\x1b[0m\x1b[2J\x1b[H"}, // kept
		{"\x1b]0;title\x07\x1b[?1049h\x1b[?1000h", "\x1b]0;title\x07\x1b[?1049h\x1b[?1000h"},
		{"\x1b[8;24;80t", "\x1b[8;24;80t"}, // a resize request, not a report
		{"cut\x1b[", "cut\x1b["},           // incomplete: kept as it is
		{"\x1b", "\x1b"},
		{"\x1b]52;c;?\x07", ""}, // clipboard read
		{"\x1b]52;c;aGk=\x07", "\x1b]52;c;aGk=\x07"},
	}
	for _, tt := range tests {
		if got := string(filterQueries([]byte(tt.in))); got != tt.want {
			t.Errorf("filterQueries(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzFilterQueries: the output is the input with whole pieces removed
// (a subsequence), and filtering twice changes nothing more.
func FuzzFilterQueries(f *testing.F) {
	for _, s := range []string{"a\x1b[cb", "\x1b]11;?\x07", "\x1bP$qm\x1b\\", "\x1b[31m", "\x1b[", "\x1b]"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out := filterQueries(b)
		if len(out) > len(b) {
			t.Fatalf("filter grew %d -> %d", len(b), len(out))
		}
		j := 0
		for i := 0; i < len(b) && j < len(out); i++ {
			if b[i] == out[j] {
				j++
			}
		}
		if j != len(out) {
			t.Fatalf("output %q is not a subsequence of %q", out, b)
		}
	})
}

func TestReplayStart(t *testing.T) {
	r := newRing(16)
	r.write([]byte("line1\nline2\n"))
	if got := replayStart(r); got != 0 {
		t.Fatalf("unwrapped ring replays from %d", got)
	}
	r.write([]byte("\x1b[31mline3\n")) // drops "line1\nli" and more
	got := replayStart(r)
	buf := make([]byte, 16)
	n, _ := r.readAt(got, buf)
	if s := string(buf[:n]); s != "\x1b[31mline3\n" {
		t.Fatalf("replay from %d = %q; want it to start after a newline", got, s)
	}
}
