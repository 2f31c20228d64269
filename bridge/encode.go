package bridge

import (
	"bytes"
	"encoding/binary"
	"slices"

	"github.com/klauspost/compress/zlib"

	"github.com/cubepod/deskd/jpegenc"
)

// Frame is a BGRX framebuffer: 4 bytes a pixel, blue first, as X gives it.
type Frame struct {
	W, H, Stride int
	Pix          []byte
}

// NewFrame allocates a w×h frame.
func NewFrame(w, h int) *Frame { return &Frame{W: w, H: h, Stride: 4 * w, Pix: make([]byte, 4*w*h)} }

// at returns the 4 bytes of pixel (x, y).
func (f *Frame) at(x, y int) []byte { i := y*f.Stride + 4*x; return f.Pix[i : i+4] }

// bgr is a pixel as 0x00RRGGBB.
func (f *Frame) bgr(x, y int) uint32 {
	p := f.at(x, y)
	return uint32(p[2])<<16 | uint32(p[1])<<8 | uint32(p[0])
}

// pixelWriter converts 0x00RRGGBB pixels to a client's pixel format.
type pixelWriter struct {
	pf    PixelFormat
	bytes int
	eight bool // 8-bit channels: no scaling
	// tpixel3: Tight's TPIXEL and ZRLE's CPIXEL are 3 bytes for 32 bpp,
	// depth 24, 8-bit channels.
	tpixel3 bool
}

func newPixelWriter(pf PixelFormat) pixelWriter {
	w := pixelWriter{pf: pf, bytes: int(pf.BPP) / 8}
	w.eight = pf.RedMax == 255 && pf.GreenMax == 255 && pf.BlueMax == 255
	w.tpixel3 = pf.BPP == 32 && pf.Depth <= 24 && pf.TrueColour && w.eight
	return w
}

// value is the pixel in the client's format, as an integer.
func (w pixelWriter) value(rgb uint32) uint32 {
	r, g, b := rgb>>16&0xff, rgb>>8&0xff, rgb&0xff
	pf := w.pf
	if w.eight {
		return r<<pf.RedShift | g<<pf.GreenShift | b<<pf.BlueShift
	}
	return (r*uint32(pf.RedMax)+127)/255<<pf.RedShift | (g*uint32(pf.GreenMax)+127)/255<<pf.GreenShift | (b*uint32(pf.BlueMax)+127)/255<<pf.BlueShift
}

// put appends the PIXEL (bpp/8 bytes in the client's byte order).
func (w pixelWriter) put(dst []byte, rgb uint32) []byte {
	v := w.value(rgb)
	switch w.bytes {
	case 1:
		return append(dst, byte(v))
	case 2:
		if w.pf.BigEndian {
			return binary.BigEndian.AppendUint16(dst, uint16(v))
		}
		return binary.LittleEndian.AppendUint16(dst, uint16(v))
	}
	if w.pf.BigEndian {
		return binary.BigEndian.AppendUint32(dst, v)
	}
	return binary.LittleEndian.AppendUint32(dst, v)
}

// putCompact appends a Tight TPIXEL: R, G, B whatever the shifts when
// tpixel3 (rfbproto "Tight"), else a PIXEL.
func (w pixelWriter) putCompact(dst []byte, rgb uint32) []byte {
	if w.tpixel3 {
		return append(dst, byte(rgb>>16), byte(rgb>>8), byte(rgb))
	}
	return w.put(dst, rgb)
}

// cpixelDrop says which byte of a 4-byte PIXEL a ZRLE CPIXEL leaves out
// (RFC 6143 §7.7.6: the 3 bytes holding the colour bits, in the pixel's
// own byte order), or -1 when a CPIXEL is a whole PIXEL.
func (w pixelWriter) cpixelDrop() int {
	pf := w.pf
	if !w.tpixel3 {
		return -1
	}
	hi := max(int(pf.RedShift), int(pf.GreenShift), int(pf.BlueShift)) + 8
	lo := min(pf.RedShift, pf.GreenShift, pf.BlueShift)
	switch {
	case hi <= 24 && !pf.BigEndian: // colour in the low 3 bytes, which come first
		return 3
	case hi <= 24:
		return 0
	case lo >= 8 && !pf.BigEndian:
		return 0
	case lo >= 8:
		return 3
	}
	return -1
}

// putCPixel appends a ZRLE CPIXEL.
func (w pixelWriter) putCPixel(dst []byte, rgb uint32, drop int) []byte {
	n := len(dst)
	dst = w.put(dst, rgb)
	if drop < 0 {
		return dst
	}
	copy(dst[n+drop:], dst[n+drop+1:])
	return dst[:len(dst)-1]
}

// encoder holds one client's encoding state: its pixel format and its
// persistent zlib streams (the client's inflaters keep their dictionaries
// across rectangles, so each stream must live as long as the connection).
type encoder struct {
	pw          pixelWriter
	quality     int              // JPEG quality level 0..9, -1: no JPEG
	jpeg        *jpegenc.Encoder // for quality, made when it changes
	jpegBuf     []byte
	lossy       []Rect // rectangles sent as JPEG since the writer last looked
	level       int    // zlib level
	zlibStream  *zstream
	zrleStream  *zstream
	tightStream [4]*zstream
	// tightBase is the first of the two Tight streams this encoder uses
	// (copy, palette): 0, or 2 for a second encoder working in parallel.
	tightBase int
	// independent: every Tight rectangle resets the stream it uses, so
	// its bytes depend on nothing before it and can be shared between
	// viewers (see share.go). Once on, it stays on: noVNC's zlib (the
	// pako 1.0 in noVNC 1.7) keeps no window for a stream it has used
	// once that stream is reset, so a later rectangle that refers back
	// past its own start fails to inflate ("invalid distance too far
	// back") and noVNC drops the connection; zlib itself keeps it.
	independent bool
	scratch     []byte
	colours     colourSet
}

func newEncoder(pf PixelFormat) *encoder {
	return &encoder{pw: newPixelWriter(pf), quality: -1, level: 1}
}

// zstream is a persistent zlib stream flushed (sync) after each use.
// hist keeps the last of what went through it (the window a decoder
// holds, zlibWindow bytes): a recorder that follows the viewer from
// the middle of its stream starts its decoder with it (tap.go).
type zstream struct {
	buf  bytes.Buffer
	w    *zlib.Writer
	hist []byte
}

// zlibWindow is deflate's window: no match reaches further back.
const zlibWindow = 32 << 10

func newZstream(level int) *zstream {
	z := &zstream{}
	z.w, _ = zlib.NewWriterLevel(&z.buf, level)
	return z
}

// compress returns p deflated through the stream, up to a sync flush.
func (z *zstream) compress(p []byte) []byte {
	z.buf.Reset()
	z.w.Write(p)
	z.w.Flush()
	z.remember(p)
	return z.buf.Bytes()
}

// remember keeps the window's worth of the stream's input; it copies
// the window down only when twice that has gathered.
func (z *zstream) remember(p []byte) {
	if len(p) >= zlibWindow {
		z.hist = append(z.hist[:0], p[len(p)-zlibWindow:]...)
		return
	}
	if len(z.hist)+len(p) > 2*zlibWindow {
		n := copy(z.hist, z.hist[len(z.hist)-(zlibWindow-len(p)):])
		z.hist = z.hist[:n]
	}
	z.hist = append(z.hist, p...)
}

// window is what a decoder of the stream holds now.
func (z *zstream) window() []byte {
	if len(z.hist) > zlibWindow {
		return z.hist[len(z.hist)-zlibWindow:]
	}
	return z.hist
}

func (e *encoder) stream(p **zstream) *zstream {
	if *p == nil {
		*p = newZstream(e.level)
	}
	return *p
}

// rawPixels appends rect r of f in the client's pixel format.
func (e *encoder) rawPixels(dst []byte, f *Frame, r Rect) []byte {
	for y := r.Y; y < r.Y+r.H; y++ {
		for x := r.X; x < r.X+r.W; x++ {
			dst = e.pw.put(dst, f.bgr(x, y))
		}
	}
	return dst
}

// encodeRaw appends a Raw rectangle body (§7.7.1).
func (e *encoder) encodeRaw(dst []byte, f *Frame, r Rect) []byte { return e.rawPixels(dst, f, r) }

// encodeZlib appends a Zlib rectangle body: u32 length, then the raw
// pixels through the connection's zlib stream (rfbproto "Zlib").
func (e *encoder) encodeZlib(dst []byte, f *Frame, r Rect) []byte {
	e.scratch = e.rawPixels(e.scratch[:0], f, r)
	z := e.stream(&e.zlibStream).compress(e.scratch)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(z)))
	return append(dst, z...)
}

// colourSet collects up to limit (at most maxColourSet) distinct colours
// in an open-addressed table: no map, no allocation. The table has
// room for more than twice as many: a photo tile fills the set before
// its palette fails, and at 75% full (256 slots) a new colour probed
// eight slots on average (13% of encoding a photo as Tight JPEG).
type colourSet struct {
	slot    [colourSlots]uint32 // colour | 1<<24 when used
	pos     [colourSlots]uint8  // its index in colours
	colours []uint32
	idx     []byte // the last palette's index of each pixel
}

const (
	maxColourSet = 192 // keeps the table at most 37.5% full
	colourSlots  = 512
)

func colourHash(c uint32) int { return int((c * 0x9E3779B1) >> 23) }

// add records c and returns its index; ok is false when the set
// already holds limit other colours.
func (s *colourSet) add(c uint32, limit int) (idx byte, ok bool) {
	k := c | 1<<24
	for i := colourHash(c); ; i = (i + 1) & (colourSlots - 1) {
		switch s.slot[i] {
		case k:
			return s.pos[i], true
		case 0:
			if len(s.colours) == limit {
				return 0, false
			}
			s.slot[i], s.pos[i] = k, uint8(len(s.colours))
			s.colours = append(s.colours, c)
			return s.pos[i], true
		}
	}
}

// palette collects the distinct colours of rect r into s, up to limit;
// ok is false when there are more. The colour index of every pixel is
// appended to s.idx, row after row, so nothing looks a colour up twice.
func (s *colourSet) palette(f *Frame, r Rect, limit int) (ok bool) {
	clear(s.slot[:])
	s.colours = s.colours[:0]
	s.idx = slices.Grow(s.idx[:0], r.W*r.H)[:r.W*r.H]
	n := 0
	for y := r.Y; y < r.Y+r.H; y++ {
		row := f.Pix[y*f.Stride+4*r.X : y*f.Stride+4*(r.X+r.W)]
		out := s.idx[n : n+r.W]
		n += r.W
		prev, pi := uint32(1<<31), byte(0)
		for x := range out {
			p := row[4*x : 4*x+4]
			c := uint32(p[2])<<16 | uint32(p[1])<<8 | uint32(p[0])
			if c != prev { // runs are common: skip the lookup
				i, ok := s.add(c, limit)
				if !ok {
					return false
				}
				prev, pi = c, i
			}
			out[x] = pi
		}
	}
	return true
}

// packBits appends the indices of s.idx, w a row, at bits (1, 2 or 4)
// each: rows padded to a byte, the leftmost pixel in the high bits.
func (s *colourSet) packBits(dst []byte, w, bits int) []byte {
	for row := s.idx; len(row) >= w; row = row[w:] {
		var b byte
		n := 0
		for _, i := range row[:w] {
			b = b<<bits | i
			if n += bits; n == 8 {
				dst, b, n = append(dst, b), 0, 0
			}
		}
		if n > 0 {
			dst = append(dst, b<<(8-n))
		}
	}
	return dst
}

// Tight (rfbproto "Tight Encoding"): a compression-control byte, then
//
//	0x80 Fill:  TPIXEL
//	0x90 JPEG:  compact length, JPEG data
//	0x40 | stream<<4, filter id (1 palette: u8 n-1, n TPIXELs), data
//	     stream<<4 (copy filter), data
//
// where data under 12 bytes is sent as it is, and longer data is a compact
// length followed by the bytes deflated through zlib stream 0..3.
const (
	tightFill      = 0x80
	tightJPEG      = 0x90
	tightExplicit  = 0x40
	tightPalette   = 1
	tightMinToZlib = 12
	// tightMaxPalette: a tile with more distinct colours than this looks
	// like a photo and goes JPEG when the viewer allows it (else copy);
	// up to it (anti-aliased text, UI) a palette is smaller and lossless.
	// Measured on testdata/textpage.png: text tiles have 64-190 colours
	// (sub-pixel anti-aliasing), and sending them JPEG made a frame 2.5x
	// bigger.
	tightMaxPalette = maxColourSet - 2
	// A palette of more than tightSmallPalette colours is sent only when
	// the rectangle has tightPaletteBytes pixels a colour: its TPIXELs go
	// uncompressed.
	tightSmallPalette = 16
	tightPaletteBytes = 16
)

// jpegQualities maps a client's quality level 0..9 to JPEG quality.
var jpegQualities = [10]int{15, 29, 41, 42, 62, 77, 79, 86, 92, 100}

// encodeTight appends one Tight rectangle body for r. Callers keep r at
// most 2048 pixels wide (the protocol's limit) and small enough to
// choose per tile: solid fills, and up to tightMaxPalette colours go
// lossless through a palette (anti-aliased text: a byte a pixel instead
// of three), photo-like content goes JPEG when the client allows it.
func (e *encoder) encodeTight(dst []byte, f *Frame, r Rect) []byte {
	photo, few := e.classify(f, r)
	if photo {
		return e.tightJPEG(dst, f, r)
	}
	return e.encodeTightAs(dst, f, r, few)
}

// classify tells whether r goes JPEG (photo), and if not leaves its
// palette in e.colours (few: it fits). A sample of r's rows comes first
// when JPEG is allowed: a tile of gradient or photo shows itself there
// (many colours, none common), and the full palette pass, which was 43%
// of deskd's CPU on a 30 fps canvas, is skipped.
func (e *encoder) classify(f *Frame, r Rect) (photo, few bool) {
	if e.jpegAllowed(r) && r.H >= 4*photoSampleStep && e.colours.sampledPhoto(f, r) {
		return true, false
	}
	few = e.colours.palette(f, r, tightMaxPalette)
	return e.tightPhoto(r, few), few
}

// photoSampleStep: every photoSampleStep-th row of a rectangle is sampled.
const photoSampleStep = 8

// sampledPhoto reports whether every photoSampleStep-th row of r has more
// than sampleColours colours with none covering 3/4 of tightPhotoShare
// of them: a photo or gradient. Anything else (text, which has a common
// background, or a few colours) needs the full palette to decide.
func (s *colourSet) sampledPhoto(f *Frame, r Rect) bool {
	clear(s.slot[:])
	s.colours = s.colours[:0]
	var count [maxColourSet]int32
	n := 0
	for y := r.Y; y < r.Y+r.H; y += photoSampleStep {
		row := f.Pix[y*f.Stride+4*r.X : y*f.Stride+4*(r.X+r.W)]
		prev, pi := uint32(1<<31), byte(0)
		for x := 0; x < len(row); x += 4 {
			p := row[x : x+4]
			if c := uint32(p[2])<<16 | uint32(p[1])<<8 | uint32(p[0]); c != prev {
				i, ok := s.add(c, maxColourSet)
				if !ok {
					return true
				}
				prev, pi = c, i
			}
			count[pi]++
		}
		n += r.W
		if 8*len(s.colours) > 7*n && n > sampleColours {
			// Grain: nearly every pixel so far a colour of its own, so
			// none can cover a share; the rest of the sample cannot make
			// it text (a third of the sample's cost on a video).
			return true
		}
	}
	return len(s.colours) > sampleColours && 4*100*int(slices.Max(count[:len(s.colours)])) < 3*tightPhotoShare*n
}

// sampleColours: see sampledPhoto. On Chromium's gradients captured from
// Xvfb, a 64x64 tile of 56 colours (the commonest 8% of it) shows 35 in
// its sample, the commonest 11%; text tiles' backgrounds show 40% or
// more.
const sampleColours = 24

func (e *encoder) jpegAllowed(r Rect) bool {
	return e.quality >= 0 && e.pw.tpixel3 && r.W >= 8 && r.H >= 8
}

// tightPhoto reports whether r goes JPEG: it has more colours than a
// palette takes, or many colours none of which covers tightPhotoShare
// of it (a smooth gradient: a palette of its 100-190 colours is a byte
// a pixel that zlib hardly shrinks, three times its JPEG; anti-aliased
// text has as many colours but its background covers 40% or more).
// few is what e.colours.palette said of r; e.colours then holds r's
// palette.
func (e *encoder) tightPhoto(r Rect, few bool) bool {
	if !e.jpegAllowed(r) {
		return false
	}
	if !few {
		return true
	}
	cs := &e.colours
	if len(cs.colours) <= tightSmallPalette {
		return false
	}
	var count [maxColourSet]int32
	for _, i := range cs.idx {
		count[i]++
	}
	return 100*int(slices.Max(count[:len(cs.colours)])) < tightPhotoShare*r.W*r.H
}

// tightPhotoShare: see tightPhoto. Measured on a frame of text
// (testdata/textpage.png) every tile of over 16 colours has a colour
// covering 40% or more; on gradients under soft discs (the bench's 30 fps
// canvas) 80 of 100 such tiles have none covering 10%.
const tightPhotoShare = 20

// encodeTightAs is encodeTight for a rectangle that does not go JPEG,
// once its palette is in e.colours (few: it fits).
func (e *encoder) encodeTightAs(dst []byte, f *Frame, r Rect, few bool) []byte {
	cs := &e.colours
	n := len(cs.colours)
	switch {
	case few && n == 1:
		return e.pw.putCompact(append(dst, tightFill), cs.colours[0])
	case few && (n <= tightSmallPalette || tightPaletteBytes*n <= r.W*r.H):
		dst = append(dst, e.tightControl(tightExplicit|byte(e.tightBase+1)<<4, e.tightBase+1), tightPalette, byte(n-1))
		for _, c := range cs.colours {
			dst = e.pw.putCompact(dst, c)
		}
		data := cs.idx
		if n == 2 {
			e.scratch = cs.packBits(e.scratch[:0], r.W, 1)
			data = e.scratch
		}
		return e.tightData(dst, e.tightBase+1, data)
	}
	e.scratch = slices.Grow(e.scratch[:0], r.W*r.H*e.pw.bytes)
	for y := r.Y; y < r.Y+r.H; y++ {
		row := f.Pix[y*f.Stride+4*r.X : y*f.Stride+4*(r.X+r.W)]
		if e.pw.tpixel3 { // B, G, R, X to R, G, B
			n := len(e.scratch)
			out := e.scratch[n : n+3*r.W]
			for i := range r.W {
				p, o := row[4*i:4*i+4], out[3*i:3*i+3]
				o[0], o[1], o[2] = p[2], p[1], p[0]
			}
			e.scratch = e.scratch[:n+3*r.W]
			continue
		}
		for i := 0; i < len(row); i += 4 {
			e.scratch = e.pw.putCompact(e.scratch, uint32(row[i+2])<<16|uint32(row[i+1])<<8|uint32(row[i]))
		}
	}
	return e.tightData(append(dst, e.tightControl(byte(e.tightBase)<<4, e.tightBase)), e.tightBase, e.scratch)
}

// tightControl adds to a basic rectangle's control byte the reset of
// stream when this rectangle must start it afresh, and resets ours.
func (e *encoder) tightControl(ctl byte, stream int) byte {
	if !e.independent {
		return ctl
	}
	if z := e.tightStream[stream]; z != nil {
		z.w.Reset(&z.buf)
		z.hist = z.hist[:0]
	}
	return ctl | 1<<stream
}

// setIndependent switches independent encoding on, for good (see
// independent): the viewer's inflaters were or will be reset by shared
// rectangles.
func (e *encoder) setIndependent() { e.independent = true }

func (e *encoder) tightData(dst []byte, stream int, data []byte) []byte {
	if len(data) < tightMinToZlib {
		return append(dst, data...)
	}
	z := e.stream(&e.tightStream[stream]).compress(data)
	return append(compactLen(dst, len(z)), z...)
}

// compactLen appends Tight's 1-3 byte length (7 bits a byte, low first).
func compactLen(dst []byte, n int) []byte {
	for i := 0; i < 2 && n >= 0x80; i++ {
		dst = append(dst, byte(n)|0x80)
		n >>= 7
	}
	return append(dst, byte(n))
}

// noteLossy records r when its Tight body is JPEG.
func (e *encoder) noteLossy(body []byte, r Rect) {
	if len(body) > 0 && body[0]&0xf0 == tightJPEG {
		e.lossy = append(e.lossy, r)
	}
}

func (e *encoder) tightJPEG(dst []byte, f *Frame, r Rect) []byte {
	q := jpegQualities[e.quality]
	if e.jpeg == nil || e.jpeg.Quality() != q {
		e.jpeg = jpegenc.New(q)
	}
	var err error
	e.jpegBuf, err = e.jpeg.Encode(e.jpegBuf[:0], f.Pix[r.Y*f.Stride+4*r.X:], f.Stride, r.W, r.H)
	if err != nil { // r lies in f: cannot happen
		panic(err)
	}
	dst = append(dst, tightJPEG)
	return append(compactLen(dst, len(e.jpegBuf)), e.jpegBuf...)
}

// ZRLE (RFC 6143 §7.7.6): u32 length, then zlib data of 64×64 tiles, each
// a subencoding byte and its pixels as CPIXELs:
//
//	0      raw CPIXELs
//	1      solid: one CPIXEL
//	2..16  packed palette: n CPIXELs, indices of 1, 2 or 4 bits (rows padded)
const zrleTile = 64

func (e *encoder) encodeZRLE(dst []byte, f *Frame, r Rect) []byte {
	e.scratch = e.scratch[:0]
	for ty := r.Y; ty < r.Y+r.H; ty += zrleTile {
		for tx := r.X; tx < r.X+r.W; tx += zrleTile {
			t := Rect{tx, ty, min(zrleTile, r.X+r.W-tx), min(zrleTile, r.Y+r.H-ty)}
			e.scratch = e.zrleTileData(e.scratch, f, t)
		}
	}
	z := e.stream(&e.zrleStream).compress(e.scratch)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(z)))
	return append(dst, z...)
}

func (e *encoder) zrleTileData(dst []byte, f *Frame, t Rect) []byte {
	drop := e.pw.cpixelDrop()
	cs := &e.colours
	few := cs.palette(f, t, 16)
	colours := cs.colours
	if few && len(colours) == 1 {
		return e.pw.putCPixel(append(dst, 1), colours[0], drop)
	}
	if few {
		dst = append(dst, byte(len(colours)))
		for _, c := range colours {
			dst = e.pw.putCPixel(dst, c, drop)
		}
		bits := 4
		switch {
		case len(colours) <= 2:
			bits = 1
		case len(colours) <= 4:
			bits = 2
		}
		return cs.packBits(dst, t.W, bits)
	}
	dst = append(dst, 0)
	for y := t.Y; y < t.Y+t.H; y++ {
		for x := t.X; x < t.X+t.W; x++ {
			dst = e.pw.putCPixel(dst, f.bgr(x, y), drop)
		}
	}
	return dst
}
