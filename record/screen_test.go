package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"strings"
	"testing"

	"github.com/klauspost/compress/zlib"
)

// rfbStream builds what deskd's server sends a viewer.
type rfbStream struct{ b []byte }

func serverHandshake(w, h int) []byte {
	b := []byte("RFB 003.008\n")
	b = append(b, 1, 1)       // one security type: None
	b = append(b, 0, 0, 0, 0) // SecurityResult OK
	b = binary.BigEndian.AppendUint16(b, uint16(w))
	b = binary.BigEndian.AppendUint16(b, uint16(h))
	b = append(b, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, 5)
	return append(b, "deskd"...)
}

func (s *rfbStream) update(n int) *rfbStream {
	s.b = append(s.b, 0, 0)
	s.b = binary.BigEndian.AppendUint16(s.b, uint16(n))
	return s
}

func (s *rfbStream) rect(x, y, w, h int, enc int32, body ...byte) *rfbStream {
	for _, v := range []int{x, y, w, h} {
		s.b = binary.BigEndian.AppendUint16(s.b, uint16(v))
	}
	s.b = binary.BigEndian.AppendUint32(s.b, uint32(enc))
	s.b = append(s.b, body...)
	return s
}

func compact(n int) []byte {
	b := []byte{byte(n & 0x7f)}
	if n > 0x7f {
		b[0] |= 0x80
		b = append(b, byte(n>>7&0x7f))
		if n > 0x3fff {
			b[1] |= 0x80
			b = append(b, byte(n>>14))
		}
	}
	return b
}

// zstream is one of the server's Tight zlib streams.
type zstream struct {
	buf bytes.Buffer
	w   *zlib.Writer
}

func (z *zstream) chunk(data []byte) []byte {
	if z.w == nil {
		z.w = zlib.NewWriter(&z.buf)
	}
	z.w.Write(data)
	z.w.Flush()
	out := bytes.Clone(z.buf.Bytes())
	z.buf.Reset()
	return append(compact(len(out)), out...)
}

func jpegOf(t testing.TB, w, h int, c color.RGBA) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = c.R, c.G, c.B, 255
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	return append(compact(b.Len()), b.Bytes()...)
}

// pixel returns the screen's R, G, B at x, y.
func pixel(s *Screen, x, y int) [3]byte {
	p := s.Pix[(y*s.W+x)*4:]
	return [3]byte{p[2], p[1], p[0]}
}

// goodStream is every kind of message and rectangle deskd sends.
func goodStream(t testing.TB) []byte {
	var z0, z1 zstream
	s := &rfbStream{b: serverHandshake(64, 48)}
	s.update(3).
		rect(0, 0, 64, 48, 7, 0x80, 10, 20, 30). // fill
		rect(0, 0, 2, 1, 0, 1, 2, 3, 0, 4, 5, 6, 0).
		rect(8, 8, 16, 16, 7, append([]byte{0x90}, jpegOf(t, 16, 16, color.RGBA{200, 100, 50, 255})...)...)
	// Palette of two (1 bit a pixel, row of 4 bytes) on stream 1, then
	// copy filter through stream 0, then a few bytes unpacked.
	bits := bytes.Repeat([]byte{0xf0, 0x0f, 0xff, 0x00}, 4)
	raw := bytes.Repeat([]byte{1, 2, 3}, 32*2)
	s.update(5).
		rect(32, 0, 32, 4, 7, append([]byte{0x50, 1, 1, 255, 0, 0, 0, 0, 255}, z1.chunk(bits)...)...).
		rect(0, 40, 32, 2, 7, append([]byte{0x00}, z0.chunk(raw)...)...).
		rect(60, 40, 2, 1, 7, 0x40, 0, 9, 9, 9, 8, 8, 8).
		rect(56, 40, 3, 1, 7, 0x40, 1, 0, 7, 7, 7, 0, 0, 0). // a palette of one: a byte a pixel
		rect(0, 0, 0, 0, -224)                               // LastRect: the fifth is not sent
	s.b = append(s.b, 2)                                          // bell
	s.b = append(s.b, 248, 0, 0, 0, 0, 0, 0, 1, 3, 'a', 'b', 'c') // fence
	s.b = append(s.b, 3, 0, 0, 0, 0, 0, 0, 2, 'h', 'i')           // cut text
	s.b = append(s.b, 3, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe, 0, 0)   // extended clipboard
	s.b = append(s.b, 150)
	cursor := make([]byte, 2*2*4+2)
	grad := []byte{10, 10, 10, 5, 5, 5, 1, 2, 3, 0, 0, 0} // differences from the prediction
	s.update(6).
		rect(1, 1, 2, 2, -239, cursor...).
		rect(0, 0, 8, 8, 1, 0, 0, 0, 40). // CopyRect of the rows at 40 to the top
		rect(0, 0, 0, 0, 50, 0, 0, 0, 2, 0, 0, 0, 1, 0xaa, 0xbb).
		rect(40, 20, 2, 2, 7, append([]byte{0x40, 2}, z0.chunk(grad)...)...).
		rect(0, 0, 80, 60, -308, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 80, 0, 60, 0, 0, 0, 0).
		rect(70, 50, 10, 10, 7, 0x80, 1, 1, 1)
	return s.b
}

// TestScreenDecodes: every kind of rectangle lands where and as it was
// sent, however the bytes are split.
func TestScreenDecodes(t *testing.T) {
	stream := goodStream(t)
	for _, split := range []int{1, 7, 100, len(stream)} {
		s := &Screen{}
		for b := stream; len(b) > 0; {
			n := min(split, len(b))
			if _, err := s.Write(b[:n]); err != nil {
				t.Fatalf("split %d: %v", split, err)
			}
			b = b[n:]
		}
		if s.W != 80 || s.H != 60 || len(s.pending) != 0 {
			t.Fatalf("split %d: %dx%d, %d bytes pending", split, s.W, s.H, len(s.pending))
		}
		jp := pixel(s, 16, 16)
		for _, tc := range []struct {
			x, y int
			want [3]byte
		}{
			{5, 30, [3]byte{10, 20, 30}},  // fill
			{35, 0, [3]byte{0, 0, 255}},   // palette: 0xf0, the first four bits set
			{36, 0, [3]byte{255, 0, 0}},   // palette
			{44, 0, [3]byte{0, 0, 255}},   // second byte 0x0f: its low half
			{0, 41, [3]byte{1, 2, 3}},     // copy filter through zlib
			{61, 40, [3]byte{8, 8, 8}},    // unpacked
			{0, 0, [3]byte{1, 2, 3}},      // CopyRect of the copy-filter rows over the raw pixels
			{40, 20, [3]byte{10, 10, 10}}, // gradient
			{41, 20, [3]byte{15, 15, 15}}, // left + 5
			{40, 21, [3]byte{11, 12, 13}}, // above + 1,2,3
			{41, 21, [3]byte{16, 17, 18}}, // left + above - above-left
			{75, 55, [3]byte{1, 1, 1}},    // after the resize
			{64, 10, [3]byte{0, 0, 0}},    // new area is black
		} {
			if got := pixel(s, tc.x, tc.y); got != tc.want {
				t.Errorf("split %d: pixel %d,%d = %v, want %v", split, tc.x, tc.y, got, tc.want)
			}
		}
		if jp[0] < 190 || jp[1] < 90 || jp[1] > 110 || jp[2] > 60 {
			t.Errorf("split %d: JPEG pixel %v, want about 200,100,50", split, jp)
		}
	}
}

// TestScreenHostile: damaged and hostile streams end in ErrScreen
// without allocating what they claim, and the picture stays.
func TestScreenHostile(t *testing.T) {
	hs := serverHandshake(64, 48)
	upd := func(rects ...[]byte) []byte {
		b := append(bytes.Clone(hs), 0, 0, 0, byte(len(rects)))
		for _, r := range rects {
			b = append(b, r...)
		}
		return b
	}
	rect := func(x, y, w, h int, enc int32, body ...byte) []byte {
		return (&rfbStream{}).rect(x, y, w, h, enc, body...).b
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"version", []byte("RFB 003.003\n"), "server version"},
		{"refused", append([]byte("RFB 003.008\n"), 0), "refused"},
		{"no None", append([]byte("RFB 003.008\n"), 1, 2), "without None"},
		{"security failed", append([]byte("RFB 003.008\n"), 1, 1, 0, 0, 0, 1), "security result"},
		{"huge screen", func() []byte { b := bytes.Clone(hs); b[18], b[19] = 0x40, 1; return b }(), "screen of"},
		{"empty screen", func() []byte { b := bytes.Clone(hs); b[18], b[19] = 0, 0; return b }(), "screen of"},
		{"long name", func() []byte { b := bytes.Clone(hs); b[len(b)-9] = 0x10; return b[:len(b)-5] }(), "desktop name"},
		{"message type", append(bytes.Clone(hs), 7), "message type 7"},
		{"fence", append(bytes.Clone(hs), 248, 0, 0, 0, 0, 0, 0, 0, 65), "fence of 65"},
		{"cut text", append(bytes.Clone(hs), 3, 0, 0, 0, 0x7f, 0, 0, 0), "cut text of"},
		{"rect outside", upd(rect(60, 0, 8, 8, 7, 0x80, 1, 2, 3)), "outside"},
		{"raw outside", upd(rect(0, 47, 1, 2, 0)), "outside"},
		{"copy from outside", upd(rect(0, 0, 8, 8, 1, 0, 60, 0, 0)), "CopyRect from"},
		{"encoding", upd(rect(0, 0, 8, 8, 16)), "encoding 16"},
		{"tight control", upd(rect(0, 0, 8, 8, 7, 0xa0)), "control byte"},
		{"tight filter", upd(rect(0, 0, 8, 8, 7, 0x40, 3)), "filter 3"},
		{"jpeg size", upd(rect(0, 0, 8, 8, 7, append([]byte{0x90}, jpegOf(t, 16, 16, color.RGBA{})...)...)), "16x16 in a 8x8"},
		{"jpeg garbage", upd(rect(0, 0, 8, 8, 7, 0x90, 3, 1, 2, 3)), "JPEG"},
		{"zlib garbage", upd(rect(0, 0, 8, 8, 7, 0x00, 4, 1, 2, 3, 4)), "zlib"},
		{"palette index", upd(rect(0, 0, 2, 2, 7, 0x40, 1, 2, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 0, 0, 0)), "palette index 3"},
		{"cursor", upd(rect(0, 0, 2000, 2, -239)), "cursor of"},
		{"h264", upd(rect(0, 0, 8, 8, 50, 0x7f, 0, 0, 0, 0, 0, 0, 0)), "H.264 rectangle"},
		{"resize", upd(rect(0, 0, 5000, 10, -223)), "screen of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Screen{}
			_, err := s.Write(tc.in)
			if !errors.Is(err, ErrScreen) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if _, err2 := s.Write([]byte{0}); err2 != err {
				t.Fatalf("after an error: %v", err2)
			}
		})
	}
	// A rectangle that claims more than has come waits for it, holding
	// only what came.
	s := &Screen{}
	if _, err := s.Write(upd(rect(0, 0, 64, 48, 0))); err != nil || len(s.pending) != 16 {
		t.Fatalf("a raw rectangle not whole: %v, %d bytes held", err, len(s.pending))
	}
}

// FuzzScreen: any bytes, split anywhere, decode or end in ErrScreen.
func FuzzScreen(f *testing.F) {
	// Small seeds: the fuzzer's minimizer of a new input is quadratic in
	// its size, and a 1 KiB seed stalled it for its whole run.
	hs := serverHandshake(64, 48)
	f.Add(hs, uint8(1))
	good := goodStream(f)
	f.Add(append(bytes.Clone(hs), good[bytes.Index(good, []byte{0, 0, 0, 5}):]...), uint8(7))
	f.Add(append(bytes.Clone(hs), (&rfbStream{}).update(1).rect(0, 0, 8, 8, 7, append([]byte{0x90}, jpegOf(f, 8, 8, color.RGBA{R: 9})...)...).b...), uint8(40))
	f.Fuzz(func(t *testing.T, b []byte, split uint8) {
		s := &Screen{}
		n := max(int(split), 1)
		for len(b) > 0 {
			k := min(n, len(b))
			if _, err := s.Write(b[:k]); err != nil {
				if !errors.Is(err, ErrScreen) {
					t.Fatalf("error %v is not ErrScreen", err)
				}
				return
			}
			b = b[k:]
		}
		if s.started && len(s.Pix) != s.W*s.H*4 {
			t.Fatalf("%dx%d screen with %d bytes", s.W, s.H, len(s.Pix))
		}
	})
}
