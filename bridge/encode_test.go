package bridge

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"image/jpeg"
	"io"
	"math/rand/v2"
	"testing"
)

// testFrame paints regions of different kinds: a solid block, two-colour
// "text", a few-colour area and noise (photo-like).
func testFrame(w, h int) *Frame {
	f := NewFrame(w, h)
	rng := rand.New(rand.NewPCG(1, 2))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			var c uint32
			switch {
			case x < w/4:
				c = 0x336699
			case x < w/2:
				if (x/3+y/5)%2 == 0 {
					c = 0xffffff
				} else {
					c = 0x101010
				}
			case x < 3*w/4:
				c = []uint32{0xff0000, 0x00ff00, 0x0000ff, 0xffff00, 0x808080}[(x*y/7)%5]
			default:
				c = rng.Uint32() & 0xffffff
			}
			p := f.at(x, y)
			p[0], p[1], p[2], p[3] = byte(c), byte(c>>8), byte(c>>16), 0xAA // X byte is garbage
		}
	}
	return f
}

// inflater is a client's persistent zlib stream.
type inflater struct {
	in bytes.Buffer
	r  io.Reader
}

func (z *inflater) inflate(t *testing.T, chunk []byte, n int) []byte {
	t.Helper()
	z.in.Write(chunk)
	if z.r == nil {
		r, err := zlib.NewReader(&z.in)
		if err != nil {
			t.Fatal(err)
		}
		z.r = r
	}
	out := make([]byte, n)
	if _, err := io.ReadFull(z.r, out); err != nil {
		t.Fatalf("inflate %d bytes: %v", n, err)
	}
	return out
}

// readPixel decodes one PIXEL of pf to 0x00RRGGBB (at pf's precision).
func readPixel(pf PixelFormat, b []byte) uint32 {
	var v uint32
	switch pf.BPP {
	case 8:
		v = uint32(b[0])
	case 16:
		if pf.BigEndian {
			v = uint32(binary.BigEndian.Uint16(b))
		} else {
			v = uint32(binary.LittleEndian.Uint16(b))
		}
	default:
		if pf.BigEndian {
			v = binary.BigEndian.Uint32(b)
		} else {
			v = binary.LittleEndian.Uint32(b)
		}
	}
	ch := func(shift uint8, max uint16) uint32 { return (v >> shift & uint32(max)) * 255 / uint32(max) }
	return ch(pf.RedShift, pf.RedMax)<<16 | ch(pf.GreenShift, pf.GreenMax)<<8 | ch(pf.BlueShift, pf.BlueMax)
}

// quantise is what a pixel looks like after the trip through pf.
func quantise(pf PixelFormat, rgb uint32) uint32 {
	var b []byte
	b = newPixelWriter(pf).put(b, rgb)
	return readPixel(pf, b)
}

var (
	noVNCFormat = PixelFormat{BPP: 32, Depth: 24, TrueColour: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 0, GreenShift: 8, BlueShift: 16}
	bgr233      = PixelFormat{BPP: 8, Depth: 8, TrueColour: true, RedMax: 7, GreenMax: 7, BlueMax: 3, RedShift: 0, GreenShift: 3, BlueShift: 6}
	rgb565BE    = PixelFormat{BPP: 16, Depth: 16, BigEndian: true, TrueColour: true, RedMax: 31, GreenMax: 63, BlueMax: 31, RedShift: 11, GreenShift: 5, BlueShift: 0}
	formats     = map[string]PixelFormat{"server": ServerFormat, "noVNC": noVNCFormat, "bgr233": bgr233, "rgb565be": rgb565BE}
)

func checkPixels(t *testing.T, pf PixelFormat, f *Frame, r Rect, got []uint32, tolerance int) {
	t.Helper()
	bad := 0
	for i, c := range got {
		x, y := r.X+i%r.W, r.Y+i/r.W
		want := quantise(pf, f.bgr(x, y))
		if diff(c, want) > tolerance {
			if bad++; bad < 4 {
				t.Errorf("pixel (%d,%d) = %06x, want %06x", x, y, c, want)
			}
		}
	}
	if len(got) != r.W*r.H {
		t.Fatalf("decoded %d pixels, want %d", len(got), r.W*r.H)
	}
}

func diff(a, b uint32) int {
	d := 0
	for s := 0; s < 24; s += 8 {
		x, y := int(a>>s&0xff), int(b>>s&0xff)
		d = max(d, max(x-y, y-x))
	}
	return d
}

func TestRawAndZlibRoundTrip(t *testing.T) {
	f := testFrame(130, 70)
	for name, pf := range formats {
		t.Run(name, func(t *testing.T) {
			e := newEncoder(pf)
			var z inflater
			bpp := int(pf.BPP) / 8
			for _, r := range []Rect{{0, 0, 130, 70}, {5, 7, 33, 21}, {129, 69, 1, 1}} {
				raw := e.encodeRaw(nil, f, r)
				checkPixels(t, pf, f, r, pixels(pf, raw), 0)
				body := e.encodeZlib(nil, f, r)
				n := binary.BigEndian.Uint32(body)
				if int(n) != len(body)-4 {
					t.Fatalf("zlib length %d, body %d", n, len(body)-4)
				}
				checkPixels(t, pf, f, r, pixels(pf, z.inflate(t, body[4:], r.W*r.H*bpp)), 0)
			}
		})
	}
}

func pixels(pf PixelFormat, b []byte) []uint32 {
	bpp := int(pf.BPP) / 8
	out := make([]uint32, 0, len(b)/bpp)
	for i := 0; i+bpp <= len(b); i += bpp {
		out = append(out, readPixel(pf, b[i:]))
	}
	return out
}

// tightDecoder decodes what encodeTight writes, as a viewer would.
type tightDecoder struct {
	z  [4]inflater
	pf PixelFormat
	// As noVNC 1.7's zlib (pako 1.0) decodes: a stream reset after it
	// was used has no window any more, so only a rectangle that resets
	// it again may use it (pako's updatewindow sizes the window only
	// when it allocates it; inflateReset zeroes the size).
	used, windowless [4]bool
}

// compact parses Tight's compact length from the front of b.
func (d *tightDecoder) compact(b []byte) (int, []byte) {
	i := 0
	n := readCompact(func(int) []byte { i++; return b[i-1 : i] })
	return n, b[i:]
}

// readCompact reads a 1-3 byte compact length through next.
func readCompact(next func(int) []byte) int {
	n := 0
	for i := 0; i < 3; i++ {
		c := next(1)[0]
		if i == 2 {
			return n | int(c)<<14
		}
		n |= int(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			break
		}
	}
	return n
}

// decode decodes one rectangle body at the front of b.
func (d *tightDecoder) decode(t *testing.T, b []byte, r Rect) ([]uint32, bool, []byte) {
	t.Helper()
	next := func(n int) []byte {
		if n > len(b) {
			t.Fatalf("rectangle truncated: need %d bytes, %d left", n, len(b))
		}
		out := b[:n]
		b = b[n:]
		return out
	}
	px, jpeg := d.decodeFrom(t, next, r)
	return px, jpeg, b
}

// decodeFrom decodes one rectangle body, reading exactly what it needs.
func (d *tightDecoder) decodeFrom(t *testing.T, next func(int) []byte, r Rect) ([]uint32, bool) {
	t.Helper()
	tp3 := newPixelWriter(d.pf).tpixel3
	size := 3
	if !tp3 {
		size = int(d.pf.BPP) / 8
	}
	tpixels := func(b []byte) []uint32 {
		out := make([]uint32, len(b)/size)
		for i := range out {
			p := b[i*size:]
			if tp3 {
				out[i] = uint32(p[0])<<16 | uint32(p[1])<<8 | uint32(p[2])
			} else {
				out[i] = readPixel(d.pf, p)
			}
		}
		return out
	}
	reset := byte(0)
	data := func(stream, n int) []byte {
		if n < tightMinToZlib {
			return next(n)
		}
		if d.windowless[stream] && reset&(1<<stream) == 0 {
			t.Fatalf("rect %v continues Tight stream %d after a reset: noVNC has no window for it", r, stream)
		}
		d.used[stream] = true
		l := readCompact(next)
		return d.z[stream].inflate(t, next(l), n)
	}
	ctl := next(1)[0]
	switch {
	case ctl == tightFill:
		c := tpixels(next(size))[0]
		out := make([]uint32, r.W*r.H)
		for i := range out {
			out[i] = c
		}
		return out, false
	case ctl == tightJPEG:
		img, err := jpeg.Decode(bytes.NewReader(next(readCompact(next))))
		if err != nil {
			t.Fatal(err)
		}
		out := make([]uint32, 0, r.W*r.H)
		for y := 0; y < r.H; y++ {
			for x := 0; x < r.W; x++ {
				cr, cg, cb, _ := img.At(x, y).RGBA()
				out = append(out, (cr>>8)<<16|(cg>>8)<<8|cb>>8)
			}
		}
		return out, true
	case ctl&0x80 != 0:
		t.Fatalf("bad control byte %#x", ctl)
	}
	reset = ctl & 0xf
	for k := range 4 { // low bits: reset these streams first
		if ctl&(1<<k) != 0 {
			d.z[k] = inflater{}
			d.windowless[k] = d.windowless[k] || d.used[k]
		}
	}
	stream := int(ctl >> 4 & 3)
	if ctl&tightExplicit != 0 {
		if f := next(1)[0]; f != tightPalette {
			t.Fatalf("filter %d", f)
		}
		n := int(next(1)[0]) + 1
		pal := tpixels(next(n * size))
		row := r.W
		if n == 2 {
			row = (r.W + 7) / 8
		}
		idx := data(stream, row*r.H)
		out := make([]uint32, 0, r.W*r.H)
		for y := 0; y < r.H; y++ {
			for x := 0; x < r.W; x++ {
				if n == 2 {
					out = append(out, pal[idx[y*row+x/8]>>(7-x%8)&1])
				} else {
					out = append(out, pal[idx[y*row+x]])
				}
			}
		}
		return out, false
	}
	return tpixels(data(stream, r.W*r.H*size)), false
}

func TestTightRoundTrip(t *testing.T) {
	f := testFrame(256, 64)
	tiles := map[string]Rect{"solid": {0, 0, 64, 64}, "text": {64, 0, 64, 64}, "few colours": {128, 0, 64, 64}, "photo": {192, 0, 64, 64}, "tiny": {0, 0, 2, 2}, "text, odd width": {64, 3, 37, 23}, "few colours, odd": {131, 5, 13, 9}}
	for _, quality := range []int{-1, 6} {
		for name, pf := range map[string]PixelFormat{"noVNC": noVNCFormat, "server": ServerFormat, "rgb565be": rgb565BE} {
			e := newEncoder(pf)
			e.quality = quality
			d := &tightDecoder{pf: pf}
			for tile, r := range tiles {
				body := e.encodeTight(nil, f, r)
				px, wasJPEG, rest := d.decode(t, body, r)
				if len(rest) != 0 {
					t.Fatalf("%s/%s: %d bytes left after the rectangle", name, tile, len(rest))
				}
				tol := 0
				if wasJPEG {
					tol = 255 // noise does not survive JPEG; mean error checked below
					if quality < 0 {
						t.Fatalf("%s/%s: JPEG without a quality level", name, tile)
					}
				}
				if tile != "photo" && wasJPEG {
					t.Fatalf("%s/%s: lossless content sent as JPEG", name, tile)
				}
				checkPixels(t, pf, f, r, px, tol)
			}
		}
	}
}

func TestZRLERoundTrip(t *testing.T) {
	f := testFrame(200, 150)
	for name, pf := range map[string]PixelFormat{"noVNC": noVNCFormat, "server": ServerFormat, "rgb565be": rgb565BE} {
		e := newEncoder(pf)
		var z inflater
		for _, r := range []Rect{{0, 0, 200, 150}, {30, 40, 70, 90}} {
			body := e.encodeZRLE(nil, f, r)
			n := binary.BigEndian.Uint32(body)
			// The decoder below pulls bytes from the stream as it parses.
			z.in.Write(body[4 : 4+n])
			if z.r == nil {
				z.r, _ = zlib.NewReader(&z.in)
			}
			got := make([]uint32, r.W*r.H)
			// A CPIXEL is the PIXEL without the byte that holds no colour
			// (RFC 6143 §7.7.6), computed here from the format alone.
			drop := -1
			if pf.BPP == 32 && pf.Depth <= 24 {
				top := max(pf.RedShift, pf.GreenShift, pf.BlueShift) + 8
				switch {
				case top <= 24 && !pf.BigEndian:
					drop = 3
				case top <= 24:
					drop = 0
				}
			}
			readCP := func() uint32 {
				n := int(pf.BPP) / 8
				if drop >= 0 {
					n--
				}
				b := make([]byte, n)
				io.ReadFull(z.r, b)
				if drop >= 0 {
					b = append(b[:drop], append([]byte{0}, b[drop:]...)...)
				}
				return readPixel(pf, b)
			}
			for ty := 0; ty < r.H; ty += 64 {
				for tx := 0; tx < r.W; tx += 64 {
					tw, th := min(64, r.W-tx), min(64, r.H-ty)
					var sub [1]byte
					io.ReadFull(z.r, sub[:])
					set := func(x, y int, c uint32) { got[(ty+y)*r.W+tx+x] = c }
					switch s := int(sub[0]); {
					case s == 0:
						for y := 0; y < th; y++ {
							for x := 0; x < tw; x++ {
								set(x, y, readCP())
							}
						}
					case s == 1:
						c := readCP()
						for y := 0; y < th; y++ {
							for x := 0; x < tw; x++ {
								set(x, y, c)
							}
						}
					case s <= 16:
						pal := make([]uint32, s)
						for i := range pal {
							pal[i] = readCP()
						}
						bits := map[bool]int{true: 1}[s <= 2]
						if bits == 0 {
							bits = map[bool]int{true: 2, false: 4}[s <= 4]
						}
						row := make([]byte, (tw*bits+7)/8)
						for y := 0; y < th; y++ {
							io.ReadFull(z.r, row)
							for x := 0; x < tw; x++ {
								bit := x * bits
								set(x, y, pal[int(row[bit/8]>>(8-bits-bit%8))&(1<<bits-1)])
							}
						}
					default:
						t.Fatalf("subencoding %d", s)
					}
				}
			}
			checkPixels(t, pf, f, r, got, 0)
			_ = name
		}
	}
}

func TestCompactLen(t *testing.T) {
	d := &tightDecoder{}
	for _, n := range []int{0, 1, 127, 128, 16383, 16384, 4194303} {
		b := compactLen(nil, n)
		got, rest := d.compact(append(b, 0xEE))
		if got != n || len(rest) != 1 || len(b) > 3 {
			t.Errorf("compactLen(%d) = %x decodes to %d", n, b, got)
		}
	}
}

func TestSplitArea(t *testing.T) {
	sq := func(n int) Rect { return Rect{W: n, H: 1} }
	tests := []struct {
		rs   []Rect
		want int
	}{
		{[]Rect{sq(10), sq(10), sq(10), sq(10)}, 2},
		{[]Rect{sq(100), sq(1), sq(1)}, 1}, // the big one alone
		{[]Rect{sq(1), sq(1), sq(100)}, 2}, // never empty on the right
		{[]Rect{sq(5), sq(5)}, 1},
		{[]Rect{sq(1), sq(2), sq(3), sq(4)}, 3}, // 6 | 4 is as close as 3 | 7
	}
	for _, tt := range tests {
		if got := splitArea(tt.rs, area(tt.rs)); got != tt.want {
			t.Errorf("splitArea(%v) = %d, want %d", tt.rs, got, tt.want)
		}
	}
}

// TestTightSubencoding checks which Tight sub-encoding a rectangle of n
// colours gets, and that the lossless ones decode exactly.
func TestTightSubencoding(t *testing.T) {
	const fill, palette, jpegBody, copyBody = "fill", "palette", "jpeg", "copy"
	for _, tc := range []struct {
		n, w, h int
		quality int
		bg      bool // half the pixels are colour 0 (text on a background)
		want    string
	}{
		{1, 64, 64, 6, false, fill},
		{2, 64, 64, 6, false, palette},
		{3, 37, 23, 6, false, palette},
		{16, 64, 64, -1, false, palette},
		{17, 64, 64, -1, false, palette}, // anti-aliased text: a byte a pixel
		{100, 64, 64, 6, true, palette},
		{tightMaxPalette, 64, 64, 6, true, palette},
		{17, 64, 64, 6, false, jpegBody},                  // a smooth gradient: no colour covers much
		{100, 64, 64, 6, false, jpegBody},                 // (tightPhotoShare)
		{17, 64, 64, -1, false, palette},                  // unless the viewer takes no JPEG
		{tightMaxPalette + 1, 64, 64, 6, false, jpegBody}, // photo-like
		{tightMaxPalette + 1, 64, 64, -1, false, copyBody},
		{250, 64, 64, -1, false, copyBody},
		{17, 8, 8, -1, false, copyBody}, // the palette would outweigh the pixels
		{16, 8, 8, 6, false, palette},
		{200, 7, 64, 6, false, copyBody}, // too narrow for JPEG
	} {
		name := fmt.Sprintf("%d colours %dx%d q%d bg %t", tc.n, tc.w, tc.h, tc.quality, tc.bg)
		t.Run(name, func(t *testing.T) {
			f := NewFrame(tc.w+3, tc.h+2)
			r := Rect{3, 2, tc.w, tc.h}
			for i := range tc.w * tc.h {
				c := uint32(i%tc.n) * 0x010305 // n distinct colours, in runs of one
				if tc.bg && i%2 == 0 {
					c = 0
				}
				p := f.at(r.X+i%tc.w, r.Y+i/tc.w)
				p[0], p[1], p[2], p[3] = byte(c), byte(c>>8), byte(c>>16), 0x5A
			}
			e := newEncoder(noVNCFormat)
			e.quality = tc.quality
			body := e.encodeTight(nil, f, r)
			got := copyBody
			switch {
			case body[0] == tightFill:
				got = fill
			case body[0]&0xf0 == tightJPEG:
				got = jpegBody
			case body[0]&tightExplicit != 0:
				got = palette
			}
			if got != tc.want {
				t.Fatalf("sent as %s, want %s", got, tc.want)
			}
			d := &tightDecoder{pf: noVNCFormat}
			px, lossy, rest := d.decode(t, body, r)
			if len(rest) != 0 {
				t.Fatalf("%d bytes left after the rectangle", len(rest))
			}
			if !lossy {
				checkPixels(t, noVNCFormat, f, r, px, 0)
			}
		})
	}
}

// TestTightMergedJPEG: tiles side by side in a row that all go JPEG are
// one rectangle; a tile that does not (text) ends the run and goes as
// itself; every rectangle decodes, and the picture is the frame's.
func TestTightMergedJPEG(t *testing.T) {
	photo, text := photoFrame(), textFrame(t)
	f := NewFrame(1280, 192)
	for y := range f.H { // rows 0 and 2 photo, row 1 photo with a text tile at x 320
		for x := range f.W {
			src := photo
			if y >= 64 && y < 128 && x >= 320 && x < 384 {
				src = text
			}
			copy(f.at(x, y), src.at(x, y+200))
		}
	}
	var rects []Rect
	for y := 0; y < f.H; y += tile {
		for x := 0; x < f.W; x += tile {
			if y == 128 && x == 640 {
				continue // a gap: the run stops at it
			}
			rects = append(rects, Rect{x, y, tile, tile})
		}
	}
	e := newEncoder(noVNCFormat)
	e.quality = 6
	out, n := e.appendRects(nil, f, rects, EncTight, nil)
	want := []Rect{{0, 0, 1280, 64}, {0, 64, 320, 64}, {320, 64, 64, 64}, {384, 64, 896, 64}, {0, 128, 640, 64}, {704, 128, 576, 64}}
	if n != len(want) {
		t.Fatalf("%d rectangles, want %d", n, len(want))
	}
	d := &tightDecoder{pf: noVNCFormat}
	for i, w := range want {
		be := binary.BigEndian
		got := Rect{int(be.Uint16(out)), int(be.Uint16(out[2:])), int(be.Uint16(out[4:])), int(be.Uint16(out[6:]))}
		if got != w || int32(be.Uint32(out[8:])) != EncTight {
			t.Fatalf("rectangle %d: %v encoding %d, want %v Tight", i, got, int32(be.Uint32(out[8:])), w)
		}
		px, lossy, rest := d.decode(t, out[12:], got)
		if lossy == (got.W == tile && got.X == 320) {
			t.Fatalf("rectangle %v: JPEG %t", got, lossy)
		}
		if !lossy {
			checkPixels(t, noVNCFormat, f, got, px, 0)
		} else if e := meanError(noVNCFormat, f, got, px); e > 8 {
			// grain does not survive JPEG, the picture must
			t.Fatalf("rectangle %v: mean error %.1f per channel", got, e)
		}
		out = rest
	}
	if len(e.lossy) != 5 {
		t.Fatalf("lossy rectangles noted: %v", e.lossy)
	}
}

// meanError is the mean difference per channel between got and f's r.
func meanError(pf PixelFormat, f *Frame, r Rect, got []uint32) float64 {
	sum := 0
	for i, c := range got {
		want := quantise(pf, f.bgr(r.X+i%r.W, r.Y+i/r.W))
		for s := 0; s < 24; s += 8 {
			x, y := int(c>>s&0xff), int(want>>s&0xff)
			sum += max(x-y, y-x)
		}
	}
	return float64(sum) / float64(3*len(got))
}

// gradientFrame is a 1280x800 frame like the bench's 30 fps canvas: a
// diagonal gradient under soft discs, dithered by a level as Chromium
// draws gradients (no grain).
func gradientFrame() *Frame {
	rng := rand.New(rand.NewPCG(3, 4))
	f := NewFrame(1280, 800)
	discs := [][3]float64{{200, 150, 120}, {700, 300, 180}, {1100, 600, 150}, {400, 650, 90}}
	for y := range f.H {
		for x := range f.W {
			t := float64(x+y) / 2080
			r, g, b := 120+100*t, 40+150*t, 180-120*t
			for _, d := range discs {
				dx, dy := float64(x)-d[0], float64(y)-d[1]
				if k := 1 - (dx*dx+dy*dy)/(d[2]*d[2]); k > 0 {
					r, g, b = r+(255-r)*k*0.8, g+(220-g)*k*0.8, b*(1-k*0.5)
				}
			}
			d := float64(rng.IntN(3) - 1)
			p := f.at(x, y)
			p[0], p[1], p[2] = byte(b+d), byte(g+d), byte(r+d)
		}
	}
	return f
}

// TestTightClassify: the sampled rows decide only what the whole tile
// would: text never goes JPEG, gradients and photos do.
func TestTightClassify(t *testing.T) {
	for _, tc := range []struct {
		name     string
		f        *Frame
		minPhoto float64 // share of tiles that must go JPEG
		maxPhoto float64
		sampled  float64 // share of tiles the sample must decide (the saving)
	}{
		{"text", textFrame(t), 0, 0.02, 0}, // 5 tiles of over 190 colours (pictures)
		{"gradient", gradientFrame(), 0.9, 1, 0.9},
		{"photo", photoFrame(), 1, 1, 1},
	} {
		e := newEncoder(noVNCFormat)
		e.quality = 6
		photos, tiles, sampled := 0, 0, 0
		for y := 0; y < tc.f.H; y += tile {
			for x := 0; x < tc.f.W; x += tile {
				r := Rect{x, y, min(tile, tc.f.W-x), min(tile, tc.f.H-y)}
				photo, _ := e.classify(tc.f, r)
				full := e.tightPhoto(r, e.colours.palette(tc.f, r, tightMaxPalette))
				if photo && !full {
					t.Errorf("%s: tile %v sampled as a photo, its palette says not", tc.name, r)
				}
				if r.H >= 4*photoSampleStep && e.colours.sampledPhoto(tc.f, r) {
					sampled++
				}
				if photo {
					photos++
				}
				tiles++
			}
		}
		if got := float64(sampled) / float64(tiles); got < tc.sampled {
			t.Errorf("%s: the sample decided %.0f%% of tiles, want %.0f%%", tc.name, 100*got, 100*tc.sampled)
		}
		share := float64(photos) / float64(tiles)
		if share < tc.minPhoto || share > tc.maxPhoto {
			t.Errorf("%s: %.0f%% of tiles go JPEG, want %.0f%%..%.0f%%", tc.name, 100*share, 100*tc.minPhoto, 100*tc.maxPhoto)
		}
		t.Logf("%s: %d of %d tiles JPEG, %d decided by the sample", tc.name, photos, tiles, sampled)
	}
}
