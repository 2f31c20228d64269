package h264enc

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// mp4Box is a box of a parsed MP4 file.
type mp4Box struct {
	typ  string
	body []byte
	at   int // offset of the body in the file
	kids []mp4Box
}

// containers are the boxes whose bodies are boxes (after a header of so
// many bytes).
var containers = map[string]int{"moov": 0, "trak": 0, "mdia": 0, "minf": 0, "dinf": 0, "stbl": 0, "dref": 8, "stsd": 8, "avc1": 78}

// parseBoxes parses the boxes of b, which starts at offset at of the file.
func parseBoxes(t *testing.T, b []byte, at int) []mp4Box {
	t.Helper()
	var out []mp4Box
	for i := 0; i < len(b); {
		if len(b)-i < 8 {
			t.Fatalf("box header cut at %d", at+i)
		}
		size, head := uint64(binary.BigEndian.Uint32(b[i:])), 8
		typ := string(b[i+4 : i+8])
		if size == 1 {
			size, head = binary.BigEndian.Uint64(b[i+8:]), 16
		}
		if size < uint64(head) || size > uint64(len(b)-i) {
			t.Fatalf("box %q of %d bytes at %d, %d left", typ, size, at+i, len(b)-i)
		}
		bx := mp4Box{typ: typ, body: b[i+head : i+int(size)], at: at + i + head}
		if skip, ok := containers[typ]; ok {
			bx.kids = parseBoxes(t, bx.body[skip:], bx.at+skip)
		}
		out = append(out, bx)
		i += int(size)
	}
	return out
}

// find returns the box at a path of types.
func find(t *testing.T, boxes []mp4Box, path ...string) mp4Box {
	t.Helper()
	for _, b := range boxes {
		if b.typ == path[0] {
			if len(path) == 1 {
				return b
			}
			return find(t, b.kids, path[1:]...)
		}
	}
	t.Fatalf("no box %v", path)
	return mp4Box{}
}

func u32s(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.BigEndian.Uint32(b[4*i:])
	}
	return out
}

// TestMP4Writer: pictures from a real x264 make a file whose index says
// where each is, how long it shows, which are key frames, and whose avcC
// holds x264's SPS and PPS; what a player needs is before the samples.
func TestMP4Writer(t *testing.T) {
	const w, h = 64, 48
	e := startX264(t, w, h, func(c *Config) { c.Preset, c.Profile, c.FPS = "veryfast", "high", 10 })
	var samples bytes.Buffer
	m, err := NewMP4Writer(&samples, w, h)
	if err != nil {
		t.Fatal(err)
	}
	times := []time.Duration{300 * time.Millisecond, 400 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond, 2500 * time.Millisecond}
	var sps []byte
	var wantKeys []uint32
	for i, at := range times {
		pic, key, err := e.Encode(nil, movingFrame(w, h, 4*w, i), 4*w, i == 3)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			sps = splitAnnexB(pic)[0]
		}
		if key {
			wantKeys = append(wantKeys, uint32(i+1))
		}
		if err := m.WriteFrame(pic, key, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.WriteFrame(nil, false, time.Second); err == nil {
		t.Fatal("a picture before the last was taken")
	}
	head, err := m.Close(3 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	file := append(head, samples.Bytes()...)
	boxes := parseBoxes(t, file, 0)
	if len(boxes) != 3 || boxes[0].typ != "ftyp" || boxes[1].typ != "moov" || boxes[2].typ != "mdat" {
		t.Fatalf("top boxes: %v", []string{boxes[0].typ, boxes[1].typ})
	}
	if d := binary.BigEndian.Uint32(find(t, boxes, "moov", "mvhd").body[16:]); d != 3000 {
		t.Fatalf("movie duration %d ms", d)
	}
	tk := find(t, boxes, "moov", "trak", "tkhd").body
	if gw, gh := binary.BigEndian.Uint32(tk[76:])>>16, binary.BigEndian.Uint32(tk[80:])>>16; gw != w || gh != h {
		t.Fatalf("track size %dx%d", gw, gh)
	}
	stbl := []string{"moov", "trak", "mdia", "minf", "stbl"}
	avcC := find(t, boxes, append(stbl, "stsd", "avc1", "avcC")...).body
	if n := int(binary.BigEndian.Uint16(avcC[6:])); !bytes.Equal(avcC[8:8+n], sps) || avcC[1] != sps[1] || avcC[3] != sps[3] {
		t.Fatalf("avcC %x does not hold the SPS %x", avcC, sps)
	}
	if avcC[1] != 100 {
		t.Fatalf("profile_idc %d, want 100 (high, as asked)", avcC[1])
	}
	// Durations: each to the next picture, the first from 0, the last to 3 s.
	stts := u32s(find(t, boxes, append(stbl, "stts")...).body[4:])
	var durs []uint32
	for i := 1; i+1 < len(stts); i += 2 {
		for range stts[i] {
			durs = append(durs, stts[i+1])
		}
	}
	if got, want := fmt.Sprint(durs), "[400 100 400 1600 500]"; got != want {
		t.Fatalf("durations %s, want %s (stts %v)", got, want, stts)
	}
	if got := u32s(find(t, boxes, append(stbl, "stss")...).body[8:]); fmt.Sprint(got) != fmt.Sprint(wantKeys) || len(got) < 2 {
		t.Fatalf("key frames %v, want %v (the first and the one asked for)", got, wantKeys)
	}
	sizes := u32s(find(t, boxes, append(stbl, "stsz")...).body[12:])
	off := int(u32s(find(t, boxes, append(stbl, "stco")...).body[4:])[1])
	mdat := find(t, boxes, "mdat")
	if off != mdat.at || len(sizes) != len(times) {
		t.Fatalf("chunk at %d, mdat's samples at %d; %d sizes", off, mdat.at, len(sizes))
	}
	for i, n := range sizes {
		s := file[off : off+int(n)]
		for j := 0; j < len(s); {
			l := int(binary.BigEndian.Uint32(s[j:]))
			if j+4+l > len(s) {
				t.Fatalf("sample %d: NAL of %d bytes at %d of %d", i, l, j, len(s))
			}
			if typ := s[j+4] & 0x1f; typ == nalSPS || typ == nalPPS || typ == nalAUD {
				t.Fatalf("sample %d holds NAL type %d", i, typ)
			}
			j += 4 + l
		}
		off += int(n)
	}
	if off != len(file) {
		t.Fatalf("samples end at %d of %d", off, len(file))
	}
}

func TestMP4WriterRefuses(t *testing.T) {
	if _, err := NewMP4Writer(&bytes.Buffer{}, 8, 8); err == nil {
		t.Fatal("8x8 taken")
	}
	m, _ := NewMP4Writer(&bytes.Buffer{}, 64, 64)
	if _, err := m.Close(time.Second); err == nil {
		t.Fatal("a file without pictures")
	}
	m, _ = NewMP4Writer(&bytes.Buffer{}, 64, 64)
	slice := []byte{0, 0, 0, 1, 0x41, 0x9a, 1, 2}
	if err := m.WriteFrame(slice, false, 0); err == nil {
		t.Fatal("a picture with no SPS before it")
	}
	m, _ = NewMP4Writer(&bytes.Buffer{}, 64, 64)
	params := []byte{0, 0, 0, 1, 0x67, 0x42, 0xc0, 0x1f, 0, 0, 1, 0x68, 0xce}
	if err := m.WriteFrame(append(params, slice...), false, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Close(time.Second); err == nil {
		t.Fatal("a file that does not start with a key frame")
	}
	if err := m.WriteFrame(append(params, slice...), true, -time.Second); err == nil {
		t.Fatal("a negative time")
	}
}

func TestSplitAnnexB(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{nil, "[]"},
		{[]byte{1, 2, 3}, "[]"},
		{[]byte{0, 0, 1, 0x67, 1, 0, 0, 0, 1, 0x68, 2, 0, 0, 1, 0x65}, "[[103 1] [104 2] [101]]"},
		{[]byte{0, 0, 0, 1, 0x09, 0x10, 0, 0}, "[[9 16]]"},
		{[]byte{0, 0, 1, 0, 0, 1, 0x41}, "[[65]]"},
	} {
		if got := fmt.Sprint(splitAnnexB(tc.in)); got != tc.want {
			t.Errorf("splitAnnexB(%v) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
