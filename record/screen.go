package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"

	"github.com/klauspost/compress/zlib"
)

// Screen is the picture a viewer draws from a segment of a desktop
// recording: the bytes deskd's RFB server sent, from its ProtocolVersion
// on, to a viewer in noVNC's pixel format (32 bits, red in the low byte:
// the recorder asks for it and a followed viewer must have it). It reads
// what deskd sends such a viewer:
//
//	handshake  RFB 3.8 with security None (§7.1-7.3), ServerInit
//	0   FramebufferUpdate: u8 type, pad, u16 n, n × (u16 x, y, w, h,
//	    s32 encoding, body):
//	      0    Raw: w×h pixels of 4 bytes R, G, B, X
//	      1    CopyRect: u16 src-x, src-y
//	      7    Tight: u8 control, then fill (TPIXEL: R, G, B), JPEG
//	           (compact length, JFIF), or basic (filter copy, palette or
//	           gradient over one of four zlib streams; data under 12 bytes
//	           unpacked)
//	      50   H.264 (u32 length, u32 flags, length bytes): read past, a
//	           tap ends when its viewer turns to video
//	      -223 DesktopSize, -308 ExtendedDesktopSize (u8 n, 3 pad, n ×
//	           16): the picture's new size
//	      -224 LastRect: the update ends
//	      -239 Cursor: w×h pixels and a (w+7)/8×h mask, read past
//	2   Bell, 150 EndOfContinuousUpdates: one byte
//	3   ServerCutText: 3 pad, s32 length (negative: extended), text
//	248 Fence: 3 pad, u32 flags, u8 length (≤ 64), bytes
//
// Every length is checked against bounds before anything is allocated
// or decoded, so damaged or hostile bytes end in an error.
type Screen struct {
	W, H int
	// Pix holds the picture as rows of 4×W bytes B, G, R, X (the X
	// screen's own layout, what h264enc takes).
	Pix []byte
	// Changed is set when the picture changes; the reader clears it.
	Changed bool

	started bool   // the handshake has been read
	pending []byte // bytes of a message not whole yet
	z       [4]tightStream
	scratch []byte
	err     error
}

// Bounds of what a Screen decodes.
const (
	// MaxScreenSide bounds the picture (x264 and WebCodecs take no more).
	MaxScreenSide = 4096
	maxCursorSide = 1024
	maxCutText    = 16 << 20
	maxH264Rect   = 16 << 20
	tightMaxData  = 1<<22 - 1 // a compact length's largest value
)

// ErrScreen is what a Screen says of bytes it cannot decode.
var ErrScreen = errors.New("record: undecodable RFB stream")

func screenErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrScreen, fmt.Sprintf(format, a...))
}

// Write decodes every message p completes. After an error the Screen
// keeps its last picture and every later Write returns the same error.
func (s *Screen) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.pending = append(s.pending, p...)
	for {
		n, err := s.scan(s.pending)
		if err == nil && n > 0 {
			err = s.apply(s.pending[:n])
		}
		if err != nil {
			s.err = err
			s.pending = nil
			return 0, err
		}
		if n == 0 {
			break
		}
		s.pending = s.pending[n:]
	}
	if len(s.pending) == 0 {
		s.pending = s.pending[:0:0] // let a large message's bytes go
	}
	return len(p), nil
}

// Started says whether the handshake has been read: there is a picture.
func (s *Screen) Started() bool { return s.started }

// cursor reads a message's bytes in scan and apply; in scan it runs out
// (short), in apply it never does (scan measured the message).
type cursor struct {
	b     []byte
	i     int
	short bool
}

func (c *cursor) take(n int) []byte {
	if c.short || n < 0 || len(c.b)-c.i < n {
		c.short = true
		return nil
	}
	c.i += n
	return c.b[c.i-n : c.i]
}

func (c *cursor) u8() int {
	if b := c.take(1); b != nil {
		return int(b[0])
	}
	return 0
}

func (c *cursor) u16() int {
	if b := c.take(2); b != nil {
		return int(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (c *cursor) u32() uint32 {
	if b := c.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

// compact reads Tight's 1-3 byte length.
func (c *cursor) compact() int {
	n := 0
	for i := range 3 {
		b := c.u8()
		if i == 2 {
			return n | b<<14
		}
		n |= (b & 0x7f) << (7 * i)
		if b&0x80 == 0 {
			break
		}
	}
	return n
}

// Encodings and messages a Screen reads (see the type's comment).
const (
	encRaw         = 0
	encCopyRect    = 1
	encTight       = 7
	encH264        = 50
	encDesktopSize = -223
	encLastRect    = -224
	encCursor      = -239
	encExtDesktop  = -308

	msgUpdate   = 0
	msgBell     = 2
	msgCutText  = 3
	msgEndOfCU  = 150
	msgFence    = 248
	maxFenceLen = 64

	tightFill     = 8 // control >> 4
	tightJPEG     = 9
	tightExplicit = 0x40
	filterCopy    = 0
	filterPalette = 1
	filterGrad    = 2
)

// scan measures the message at the front of b: 0 while it is not whole.
func (s *Screen) scan(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	c := &cursor{b: b}
	if !s.started {
		if err := s.handshake(c, false); err != nil || c.short {
			return 0, err
		}
		return c.i, nil
	}
	switch t := c.u8(); t {
	case msgUpdate:
		if err := s.update(c, false); err != nil || c.short {
			return 0, err
		}
	case msgBell, msgEndOfCU:
	case msgCutText:
		c.take(3)
		n := int64(int32(c.u32()))
		if n < 0 {
			n = -n
		}
		if n > maxCutText {
			return 0, screenErr("cut text of %d bytes", n)
		}
		c.take(int(n))
	case msgFence:
		c.take(7)
		n := c.u8()
		if n > maxFenceLen {
			return 0, screenErr("fence of %d bytes", n)
		}
		c.take(n)
	default:
		return 0, screenErr("server message type %d", t)
	}
	if c.short {
		return 0, nil
	}
	return c.i, nil
}

// apply decodes a message scan measured.
func (s *Screen) apply(b []byte) error {
	c := &cursor{b: b}
	if !s.started {
		return s.handshake(c, true)
	}
	if c.u8() == msgUpdate {
		return s.update(c, true)
	}
	return nil
}

// handshake reads the server's side of RFB 3.8's handshake with
// security None and the ServerInit; with apply, it takes the size.
func (s *Screen) handshake(c *cursor, apply bool) error {
	if v := c.take(12); v != nil && string(v) != "RFB 003.008\n" {
		return screenErr("server version %q", v)
	}
	n := c.u8()
	if !c.short && n == 0 {
		return screenErr("the server refused the connection")
	}
	if types := c.take(n); types != nil && !bytes.Contains(types, []byte{1}) {
		return screenErr("security types %v without None", types)
	}
	if r := c.u32(); !c.short && r != 0 {
		return screenErr("security result %d", r)
	}
	w, h := c.u16(), c.u16()
	c.take(16) // the server's pixel format: the viewer set noVNC's
	name := c.u32()
	if !c.short && name > 4096 {
		return screenErr("desktop name of %d bytes", name)
	}
	c.take(int(name))
	if c.short {
		return nil
	}
	if err := checkSize(w, h); err != nil {
		return err
	}
	if apply {
		s.resize(w, h)
		s.started = true
	}
	return nil
}

func checkSize(w, h int) error {
	if w < 1 || h < 1 || w > MaxScreenSide || h > MaxScreenSide {
		return screenErr("screen of %dx%d (1 to %d a side)", w, h, MaxScreenSide)
	}
	return nil
}

// resize gives the picture a new size, keeping what fits.
func (s *Screen) resize(w, h int) {
	if w == s.W && h == s.H {
		return
	}
	pix := make([]byte, w*h*4)
	for y := range min(h, s.H) {
		copy(pix[y*w*4:(y*w+min(w, s.W))*4], s.Pix[y*s.W*4:])
	}
	s.W, s.H, s.Pix, s.Changed = w, h, pix, true
}

// update reads a FramebufferUpdate after its type byte: with apply it
// draws it, else it measures it (c.short: not whole yet).
func (s *Screen) update(c *cursor, apply bool) error {
	c.take(1)
	n := c.u16()
	w, h := s.W, s.H // the size as it is at each rectangle
	for range n {
		x, y, rw, rh := c.u16(), c.u16(), c.u16(), c.u16()
		enc := int32(c.u32())
		if c.short {
			return nil
		}
		in := func() error {
			if x+rw > w || y+rh > h {
				return screenErr("rectangle %dx%d at %d,%d outside the %dx%d screen", rw, rh, x, y, w, h)
			}
			return nil
		}
		var err error
		switch enc {
		case encRaw:
			if err = in(); err == nil {
				px := c.take(rw * rh * 4)
				if apply {
					s.raw(x, y, rw, rh, px)
				}
			}
		case encCopyRect:
			sx, sy := c.u16(), c.u16()
			if err = in(); err == nil && (sx+rw > w || sy+rh > h) {
				err = screenErr("CopyRect from %d,%d outside the screen", sx, sy)
			}
			if err == nil && apply {
				s.copyRect(x, y, rw, rh, sx, sy)
			}
		case encTight:
			if err = in(); err == nil {
				err = s.tight(c, image.Rect(x, y, x+rw, y+rh), apply)
			}
		case encH264:
			l := c.u32()
			c.take(4)
			if l > maxH264Rect {
				err = screenErr("H.264 rectangle of %d bytes", l)
			} else {
				c.take(int(l))
			}
		case encDesktopSize, encExtDesktop:
			status := y // ExtendedDesktopSize: y is the status of a resize asked for
			if enc == encExtDesktop {
				screens := c.u8()
				c.take(3 + 16*screens)
			} else {
				status = 0
			}
			if status == 0 && !c.short {
				if err = checkSize(rw, rh); err == nil {
					w, h = rw, rh
					if apply {
						s.resize(w, h)
					}
				}
			}
		case encLastRect:
			return nil
		case encCursor:
			if rw > maxCursorSide || rh > maxCursorSide {
				err = screenErr("cursor of %dx%d", rw, rh)
			} else {
				c.take(rw*rh*4 + (rw+7)/8*rh)
			}
		default:
			err = screenErr("encoding %d", enc)
		}
		if err != nil || c.short {
			return err
		}
	}
	return nil
}

func (s *Screen) at(x, y int) int { return (y*s.W + x) * 4 }

// raw draws pixels in noVNC's format (R, G, B, X).
func (s *Screen) raw(x, y, w, h int, px []byte) {
	for j := range h {
		row := s.Pix[s.at(x, y+j):]
		src := px[j*w*4:]
		for i := range w {
			row[i*4], row[i*4+1], row[i*4+2], row[i*4+3] = src[i*4+2], src[i*4+1], src[i*4], 0
		}
	}
	s.Changed = true
}

func (s *Screen) copyRect(x, y, w, h, sx, sy int) {
	rows := make([]int, h)
	for j := range rows {
		rows[j] = j
	}
	if sy < y { // overlapping downwards: the bottom row first
		for j := range rows {
			rows[j] = h - 1 - j
		}
	}
	for _, j := range rows {
		copy(s.Pix[s.at(x, y+j):s.at(x, y+j)+w*4], s.Pix[s.at(sx, sy+j):])
	}
	s.Changed = true
}

// fill paints r with a TPIXEL (R, G, B).
func (s *Screen) fill(r image.Rectangle, tp []byte) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		row := s.Pix[s.at(r.Min.X, y):s.at(r.Max.X, y)]
		for i := 0; i < len(row); i += 4 {
			row[i], row[i+1], row[i+2], row[i+3] = tp[2], tp[1], tp[0], 0
		}
	}
	s.Changed = true
}

// tight reads (and with apply, draws) a Tight rectangle's body.
func (s *Screen) tight(c *cursor, r image.Rectangle, apply bool) error {
	ctl := c.u8()
	if c.short {
		return nil
	}
	switch ctl >> 4 {
	case tightFill:
		tp := c.take(3)
		if apply {
			s.fill(r, tp)
		}
		return nil
	case tightJPEG:
		n := c.compact()
		data := c.take(n)
		if !apply {
			return nil
		}
		return s.jpeg(r, data)
	}
	if ctl>>4 > tightJPEG || ctl&0x80 != 0 {
		return screenErr("Tight control byte %#x", ctl)
	}
	filter, colours := filterCopy, 0
	var palette []byte
	if ctl&tightExplicit != 0 {
		filter = c.u8()
		switch filter {
		case filterCopy, filterGrad:
		case filterPalette:
			colours = c.u8() + 1
			palette = c.take(3 * colours)
		default:
			if !c.short {
				return screenErr("Tight filter %d", filter)
			}
		}
	}
	w, h := r.Dx(), r.Dy()
	row := 3 * w
	switch {
	case colours == 2:
		row = (w + 7) / 8
	case colours > 0: // one colour too, as noVNC reads it: a byte a pixel
		row = w
	}
	size := row * h
	var data []byte
	compressed := size >= 12
	if compressed {
		n := c.compact()
		if n > tightMaxData {
			return screenErr("Tight data of %d bytes", n)
		}
		data = c.take(n)
	} else {
		data = c.take(size)
	}
	if c.short || !apply {
		return nil
	}
	for k := range 4 { // the low four bits reset those streams first
		if ctl&(1<<k) != 0 {
			s.z[k] = tightStream{}
		}
	}
	if compressed {
		if cap(s.scratch) < size {
			s.scratch = make([]byte, size)
		}
		out := s.scratch[:size]
		if err := s.z[ctl>>4&3].inflate(out, data); err != nil {
			return err
		}
		data = out
	}
	switch {
	case colours > 0:
		for y := range h {
			px := s.Pix[s.at(r.Min.X, r.Min.Y+y):]
			for x := range w {
				var i int
				if colours == 2 {
					i = int(data[y*row+x/8]>>(7-x%8)) & 1
				} else if i = int(data[y*row+x]); i >= colours {
					return screenErr("palette index %d of %d colours", i, colours)
				}
				p := palette[3*i:]
				px[4*x], px[4*x+1], px[4*x+2], px[4*x+3] = p[2], p[1], p[0], 0
			}
		}
	case filter == filterGrad:
		s.gradient(r, data)
	default:
		for y := range h {
			px := s.Pix[s.at(r.Min.X, r.Min.Y+y):]
			src := data[y*row:]
			for x := range w {
				px[4*x], px[4*x+1], px[4*x+2], px[4*x+3] = src[3*x+2], src[3*x+1], src[3*x], 0
			}
		}
	}
	s.Changed = true
	return nil
}

// gradient undoes Tight's gradient filter: each sample was sent as its
// difference from left + above - above-left (clamped to 0-255).
func (s *Screen) gradient(r image.Rectangle, data []byte) {
	w, h := r.Dx(), r.Dy()
	prev := make([]int, 3*w) // the row above, RGB; 0 above the first
	cur := make([]int, 3*w)
	for y := range h {
		for x := range w {
			for k := range 3 {
				pred := 0
				if x > 0 {
					pred = cur[3*(x-1)+k] + prev[3*x+k] - prev[3*(x-1)+k]
				} else {
					pred = prev[k]
				}
				pred = min(max(pred, 0), 255)
				cur[3*x+k] = (pred + int(data[(y*w+x)*3+k])) & 0xff
			}
			px := s.Pix[s.at(r.Min.X+x, r.Min.Y+y):]
			px[0], px[1], px[2], px[3] = byte(cur[3*x+2]), byte(cur[3*x+1]), byte(cur[3*x]), 0
		}
		prev, cur = cur, prev
	}
}

// jpeg draws a Tight JPEG rectangle, which must be the rectangle's size.
func (s *Screen) jpeg(r image.Rectangle, data []byte) error {
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return screenErr("Tight JPEG: %v", err)
	}
	if cfg.Width != r.Dx() || cfg.Height != r.Dy() {
		return screenErr("Tight JPEG of %dx%d in a %dx%d rectangle", cfg.Width, cfg.Height, r.Dx(), r.Dy())
	}
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return screenErr("Tight JPEG: %v", err)
	}
	b := img.Bounds()
	for y := range r.Dy() {
		px := s.Pix[s.at(r.Min.X, r.Min.Y+y):]
		for x := range r.Dx() {
			var cr, cg, cb uint8
			switch m := img.(type) {
			case *image.YCbCr:
				yi, ci := m.YOffset(b.Min.X+x, b.Min.Y+y), m.COffset(b.Min.X+x, b.Min.Y+y)
				cr, cg, cb = color.YCbCrToRGB(m.Y[yi], m.Cb[ci], m.Cr[ci])
			case *image.Gray:
				cr = m.Pix[m.PixOffset(b.Min.X+x, b.Min.Y+y)]
				cg, cb = cr, cr
			default:
				r32, g32, b32, _ := img.At(b.Min.X+x, b.Min.Y+y).RGBA()
				cr, cg, cb = uint8(r32>>8), uint8(g32>>8), uint8(b32>>8)
			}
			px[4*x], px[4*x+1], px[4*x+2], px[4*x+3] = cb, cg, cr, 0
		}
	}
	s.Changed = true
	return nil
}

// tightStream is one of Tight's four zlib streams: each rectangle's
// bytes continue it (sync-flushed), until a control byte resets it.
type tightStream struct {
	in bytes.Buffer
	r  io.ReadCloser
}

// inflate appends chunk to the stream and reads exactly len(out) bytes.
func (z *tightStream) inflate(out, chunk []byte) error {
	z.in.Write(chunk)
	if z.r == nil {
		r, err := zlib.NewReader(&z.in)
		if err != nil {
			return screenErr("Tight zlib stream: %v", err)
		}
		z.r = r
	}
	if _, err := io.ReadFull(z.r, out); err != nil {
		return screenErr("Tight zlib data: %v", err)
	}
	return nil
}
