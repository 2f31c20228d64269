package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net"
	"time"

	"github.com/coder/websocket"
	"github.com/klauspost/compress/zlib"
)

// viewer is the bench's RFB client: it asks for updates as noVNC does
// (its pixel format, its encodings, an incremental request after each
// update) and decodes everything it gets, so bytes and latency are
// measured where the pixels arrive.
type viewer struct {
	conn  net.Conn
	br    *bufio.Reader
	count *countingReader
	w, h  int
	fb    []uint32 // 0xRRGGBB

	tightZ [4]inflater
	zrle   inflater
	buf    []byte
	// skim: read every message whole, decode no pixels (a crowd of
	// viewers costs the bench little more than their bytes).
	skim bool
	// onJPEG, if set, sees each Tight JPEG rectangle's data.
	onJPEG func([]byte)
	// cu: take continuous updates when the server offers them (as noVNC
	// does); fences are answered in any case.
	cu bool
}

// countingReader counts the bytes a viewer receives.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// inflater is one persistent zlib stream of the server's.
type inflater struct {
	in  bytes.Buffer
	r   io.ReadCloser
	out []byte
}

func (z *inflater) inflate(chunk []byte, n int) ([]byte, error) {
	z.in.Write(chunk)
	if z.r == nil {
		r, err := zlib.NewReader(&z.in)
		if err != nil {
			return nil, fmt.Errorf("zlib: %w", err)
		}
		z.r = r
	}
	if cap(z.out) < n {
		z.out = make([]byte, n)
	}
	out := z.out[:n]
	if _, err := io.ReadFull(z.r, out); err != nil {
		return nil, fmt.Errorf("inflate %d bytes: %w", n, err)
	}
	return out, nil
}

// Encodings as noVNC sends them (RFC 6143 §7.7, rfbproto).
var viewerEncodings = []int32{1 /* CopyRect */, 7 /* Tight */, 16 /* ZRLE */, 0 /* Raw */, -32 + 6 /* JPEG quality 6 */, -256 + 2, /* compress 2 */
	-223 /* DesktopSize */, -224 /* LastRect */, -308 /* ExtendedDesktopSize */}

// The pseudo-encodings a viewer takes continuous updates with.
const (
	encContinuousUpdates = -313
	encFence             = -312
)

// rawEncodings asks for uncompressed pixels: what a transport carries
// when it is the bottleneck.
var rawEncodings = []int32{0}

// dialViewer connects to an RFB-over-WebSocket endpoint, completes the
// handshake (3.8, security None) and asks for encs.
func dialViewer(ctx context.Context, wsURL string, encs []int32) (*viewer, error) {
	c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", wsURL, err)
	}
	c.SetReadLimit(64 << 20)
	conn := websocket.NetConn(context.Background(), c, websocket.MessageBinary)
	v := &viewer{conn: conn}
	v.count = &countingReader{r: conn}
	v.br = bufio.NewReaderSize(v.count, 256<<10)
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	if err := v.handshake(encs); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return v, nil
}

// maxRead bounds any length a server sends us.
const maxRead = 64 << 20

func (v *viewer) read(n int) ([]byte, error) {
	if n < 0 || n > maxRead {
		return nil, fmt.Errorf("length %d out of bounds", n)
	}
	if cap(v.buf) < n {
		v.buf = make([]byte, n)
	}
	b := v.buf[:n]
	_, err := io.ReadFull(v.br, b)
	return b, err
}

func (v *viewer) handshake(encodings []int32) error {
	be := binary.BigEndian
	ver, err := v.read(12)
	if err != nil || !bytes.HasPrefix(ver, []byte("RFB 003.")) {
		return fmt.Errorf("server version %q: %v", ver, err)
	}
	if _, err := v.conn.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	n, err := v.read(1)
	if err != nil || n[0] == 0 {
		return fmt.Errorf("security types: %v", err)
	}
	types, err := v.read(int(n[0]))
	if err != nil || !bytes.Contains(types, []byte{1}) {
		return fmt.Errorf("no security None among %v (%v)", types, err)
	}
	v.conn.Write([]byte{1})
	res, err := v.read(4)
	if err != nil || be.Uint32(res) != 0 {
		return fmt.Errorf("security result %v: %v", res, err)
	}
	v.conn.Write([]byte{1}) // shared
	init, err := v.read(24)
	if err != nil {
		return err
	}
	v.w, v.h = int(be.Uint16(init)), int(be.Uint16(init[2:]))
	if v.w == 0 || v.h == 0 || v.w > 8192 || v.h > 8192 {
		return fmt.Errorf("framebuffer %dx%d", v.w, v.h)
	}
	if _, err := v.read(int(be.Uint32(init[20:]))); err != nil { // name
		return err
	}
	v.fb = make([]uint32, v.w*v.h)
	// noVNC's pixel format: 32 bpp, depth 24, little-endian, red in the low byte.
	pf := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0}
	encs := []byte{2, 0}
	encs = be.AppendUint16(encs, uint16(len(encodings)))
	for _, e := range encodings {
		encs = be.AppendUint32(encs, uint32(e))
	}
	_, err = v.conn.Write(append(pf, encs...))
	return err
}

// request sends a FramebufferUpdateRequest for the whole screen.
func (v *viewer) request(incremental bool) error {
	b := []byte{3, 0, 0, 0, 0, 0}
	if incremental {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint16(b, uint16(v.w))
	b = binary.BigEndian.AppendUint16(b, uint16(v.h))
	_, err := v.conn.Write(b)
	return err
}

// next reads server messages until a FramebufferUpdate has been applied,
// and returns its number of rectangles.
func (v *viewer) next() (int, error) {
	be := binary.BigEndian
	for {
		t, err := v.read(1)
		if err != nil {
			return 0, err
		}
		switch t[0] {
		case 0: // FramebufferUpdate
		case 2: // Bell
			continue
		case 150: // EndOfContinuousUpdates: the server offers them
			if v.cu {
				b := []byte{150, 1, 0, 0, 0, 0}
				b = be.AppendUint16(b, uint16(v.w))
				if _, err := v.conn.Write(be.AppendUint16(b, uint16(v.h))); err != nil {
					return 0, err
				}
			}
			continue
		case 248: // ServerFence: answered at once, as noVNC does
			h, err := v.read(8)
			if err != nil {
				return 0, err
			}
			p, err := v.read(int(h[7]))
			if err != nil {
				return 0, err
			}
			flags := be.Uint32(h[3:]) &^ (1 << 31)
			if _, err := v.conn.Write(append(be.AppendUint32([]byte{248, 0, 0, 0}, flags), append([]byte{byte(len(p))}, p...)...)); err != nil {
				return 0, err
			}
			continue
		case 3: // ServerCutText
			h, err := v.read(7)
			if err != nil {
				return 0, err
			}
			n := int32(be.Uint32(h[3:]))
			if n < 0 {
				n = -n
			}
			if _, err := v.read(int(n)); err != nil {
				return 0, err
			}
			continue
		default:
			return 0, fmt.Errorf("server message type %d", t[0])
		}
		h, err := v.read(3)
		if err != nil {
			return 0, err
		}
		n := int(be.Uint16(h[1:]))
		for i := 0; n == 0xffff || i < n; i++ {
			rh, err := v.read(12)
			if err != nil {
				return 0, err
			}
			x, y := int(be.Uint16(rh)), int(be.Uint16(rh[2:]))
			r := image.Rectangle{Min: image.Pt(x, y), Max: image.Pt(x+int(be.Uint16(rh[4:])), y+int(be.Uint16(rh[6:])))}
			enc := int32(be.Uint32(rh[8:]))
			if enc == -224 { // LastRect
				return i, nil
			}
			if err := v.rect(r, enc); err != nil {
				return 0, fmt.Errorf("rect %v encoding %d: %w", r, enc, err)
			}
		}
		return n, nil
	}
}

func (v *viewer) rect(r image.Rectangle, enc int32) error {
	if enc != -223 && enc != -308 && enc != -239 && !v.inside(r) {
		return errors.New("outside the framebuffer")
	}
	switch enc {
	case 0:
		b, err := v.read(r.Dx() * r.Dy() * 4)
		if err != nil || v.skim {
			return err
		}
		v.put(r, func(i int) uint32 { return uint32(b[4*i])<<16 | uint32(b[4*i+1])<<8 | uint32(b[4*i+2]) }) // R, G, B, X
		return nil
	case 1:
		b, err := v.read(4)
		if err != nil {
			return err
		}
		sx, sy := int(binary.BigEndian.Uint16(b)), int(binary.BigEndian.Uint16(b[2:]))
		if v.skim {
			return nil
		}
		if !v.inside(r.Sub(r.Min).Add(image.Pt(sx, sy))) {
			return errors.New("CopyRect source outside the framebuffer")
		}
		src := make([]uint32, r.Dx()*r.Dy())
		for y := range r.Dy() {
			copy(src[y*r.Dx():], v.fb[(sy+y)*v.w+sx:(sy+y)*v.w+sx+r.Dx()])
		}
		v.put(r, func(i int) uint32 { return src[i] })
		return nil
	case -239: // Cursor: its pixels and mask
		_, err := v.read(r.Dx()*r.Dy()*4 + (r.Dx()+7)/8*r.Dy())
		return err
	case 7:
		return v.tight(r)
	case 16:
		return v.zrleRect(r)
	case -223, -308:
		if enc == -308 {
			h, err := v.read(4)
			if err != nil {
				return err
			}
			if _, err := v.read(16 * int(h[0])); err != nil {
				return err
			}
		}
		if r.Dx() == 0 || r.Dy() == 0 || r.Dx() > 8192 || r.Dy() > 8192 {
			return fmt.Errorf("desktop size %v", r.Size())
		}
		v.w, v.h = r.Dx(), r.Dy()
		v.fb = make([]uint32, v.w*v.h)
		return nil
	}
	return fmt.Errorf("unexpected encoding %d", enc)
}

// inside reports whether r lies in the framebuffer (image.Rectangle.In
// holds for any empty rectangle, wherever it is).
func (v *viewer) inside(r image.Rectangle) bool {
	return r.Min.X >= 0 && r.Min.Y >= 0 && r.Max.X <= v.w && r.Max.Y <= v.h && r.Min.X <= r.Max.X && r.Min.Y <= r.Max.Y
}

// put writes pixel i of r (row-major) for each i.
func (v *viewer) put(r image.Rectangle, px func(i int) uint32) {
	w := r.Dx()
	if r.Empty() {
		return
	}
	for y := range r.Dy() {
		row := v.fb[(r.Min.Y+y)*v.w+r.Min.X:]
		for x := range w {
			row[x] = px(y*w + x)
		}
	}
}

func (v *viewer) at(x, y int) uint32 { return v.fb[y*v.w+x] }

// compactLen reads Tight's 1-3 byte length: 7 bits a byte, low first,
// the high bit saying another byte follows; the third byte has 8 bits.
func (v *viewer) compactLen() (int, error) {
	n := 0
	for i := range 3 {
		b, err := v.br.ReadByte()
		if err != nil {
			return 0, err
		}
		if i == 2 {
			return n | int(b)<<14, nil
		}
		n |= int(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			break
		}
	}
	return n, nil
}

// tight decodes a Tight rectangle (rfbproto "Tight"): TPIXELs are R, G, B.
func (v *viewer) tight(r image.Rectangle) error {
	ctl, err := v.br.ReadByte()
	if err != nil {
		return err
	}
	for i := range 4 {
		if ctl&(1<<i) != 0 {
			v.tightZ[i] = inflater{}
		}
	}
	w, h := r.Dx(), r.Dy()
	rgb := func(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }
	switch ctl >> 4 {
	case 8: // fill
		b, err := v.read(3)
		if err != nil {
			return err
		}
		c := rgb(b)
		v.put(r, func(int) uint32 { return c })
		return nil
	case 9: // JPEG
		n, err := v.compactLen()
		if err != nil {
			return err
		}
		b, err := v.read(n)
		if err != nil {
			return err
		}
		if v.onJPEG != nil {
			v.onJPEG(b)
		}
		if v.skim {
			return nil
		}
		img, err := jpeg.Decode(bytes.NewReader(b))
		if err != nil {
			return err
		}
		if yc, ok := img.(*image.YCbCr); ok {
			v.put(r, func(i int) uint32 {
				x, y := i%w, i/w
				cr, cg, cb := color.YCbCrToRGB(yc.Y[yc.YOffset(x, y)], yc.Cb[yc.COffset(x, y)], yc.Cr[yc.COffset(x, y)])
				return uint32(cr)<<16 | uint32(cg)<<8 | uint32(cb)
			})
			return nil
		}
		v.put(r, func(i int) uint32 {
			cr, cg, cb, _ := img.At(i%w, i/w).RGBA()
			return cr>>8<<16 | cg>>8<<8 | cb>>8
		})
		return nil
	}
	if ctl&0x80 != 0 {
		return fmt.Errorf("tight control %#x", ctl)
	}
	stream := int(ctl>>4) & 3
	filter := byte(0)
	if ctl&0x40 != 0 {
		if filter, err = v.br.ReadByte(); err != nil {
			return err
		}
	}
	var pal []uint32
	size := w * h * 3
	if filter == 1 {
		n, err := v.br.ReadByte()
		if err != nil {
			return err
		}
		p, err := v.read(3 * (int(n) + 1))
		if err != nil {
			return err
		}
		for i := 0; i <= int(n); i++ {
			pal = append(pal, rgb(p[3*i:]))
		}
		size = w * h
		if len(pal) == 2 {
			size = (w + 7) / 8 * h
		}
	} else if filter > 2 {
		return fmt.Errorf("tight filter %d", filter)
	}
	var data []byte
	if size < 12 {
		if data, err = v.read(size); err != nil {
			return err
		}
		data = bytes.Clone(data)
	} else {
		n, err := v.compactLen()
		if err != nil {
			return err
		}
		z, err := v.read(n)
		if err != nil || v.skim {
			return err
		}
		if data, err = v.tightZ[stream].inflate(bytes.Clone(z), size); err != nil {
			return err
		}
	}
	if v.skim {
		return nil
	}
	switch {
	case filter == 1 && len(pal) == 2:
		stride := (w + 7) / 8
		v.put(r, func(i int) uint32 { x, y := i%w, i/w; return pal[data[y*stride+x/8]>>(7-x%8)&1] })
	case filter == 1:
		v.put(r, func(i int) uint32 { return pal[min(int(data[i]), len(pal)-1)] })
	case filter == 2: // gradient: each byte is the residue of a prediction
		px := make([]byte, len(data))
		for y := range h {
			for x := range w {
				for c := range 3 {
					var left, up, ul int
					if x > 0 {
						left = int(px[(y*w+x-1)*3+c])
					}
					if y > 0 {
						up = int(px[((y-1)*w+x)*3+c])
					}
					if x > 0 && y > 0 {
						ul = int(px[((y-1)*w+x-1)*3+c])
					}
					p := min(max(left+up-ul, 0), 255)
					px[(y*w+x)*3+c] = byte(p) + data[(y*w+x)*3+c]
				}
			}
		}
		v.put(r, func(i int) uint32 { return rgb(px[3*i:]) })
	default:
		v.put(r, func(i int) uint32 { return rgb(data[3*i:]) })
	}
	return nil
}

// exactReader reads bytes one call at a time, never ahead.
type exactReader struct{ r io.Reader }

func (e exactReader) Read(p []byte) (int, error) { return e.r.Read(p) }

func (e exactReader) ReadByte() (byte, error) {
	var b [1]byte
	_, err := io.ReadFull(e.r, b[:])
	return b[0], err
}

// zrleRect decodes ZRLE (RFC 6143 §7.7.6) with 3-byte CPIXELs (R, G, B
// in this pixel format).
func (v *viewer) zrleRect(r image.Rectangle) error {
	b, err := v.read(4)
	if err != nil {
		return err
	}
	z, err := v.read(int(binary.BigEndian.Uint32(b)))
	if err != nil || v.skim {
		return err
	}
	z = bytes.Clone(z)
	// The decompressed length is not sent: feed the stream, then read
	// tile by tile from it.
	v.zrle.in.Write(z)
	if v.zrle.r == nil {
		if v.zrle.r, err = zlib.NewReader(&v.zrle.in); err != nil {
			return err
		}
	}
	// Exact reads only: reading ahead would hit the end of this
	// rectangle's input, which stops the stream for good.
	zr := exactReader{v.zrle.r}
	get := func(n int) ([]byte, error) {
		out := make([]byte, n)
		_, err := io.ReadFull(zr, out)
		return out, err
	}
	cpix := func() (uint32, error) {
		p, err := get(3)
		if err != nil {
			return 0, err
		}
		return uint32(p[0])<<16 | uint32(p[1])<<8 | uint32(p[2]), nil
	}
	runLen := func() (int, error) {
		n := 1
		for {
			b, err := zr.ReadByte()
			if err != nil {
				return 0, err
			}
			n += int(b)
			if b != 255 {
				return n, nil
			}
		}
	}
	for ty := r.Min.Y; ty < r.Max.Y; ty += 64 {
		for tx := r.Min.X; tx < r.Max.X; tx += 64 {
			t := image.Rect(tx, ty, min(tx+64, r.Max.X), min(ty+64, r.Max.Y))
			tw, th := t.Dx(), t.Dy()
			sub, err := zr.ReadByte()
			if err != nil {
				return err
			}
			px := make([]uint32, tw*th)
			var pal []uint32
			psize := int(sub & 0x7f)
			for range psize {
				c, err := cpix()
				if err != nil {
					return err
				}
				pal = append(pal, c)
			}
			switch {
			case sub == 0:
				for i := range px {
					if px[i], err = cpix(); err != nil {
						return err
					}
				}
			case sub == 1:
				for i := range px {
					px[i] = pal[0]
				}
			case sub >= 2 && sub <= 16:
				bits := 4
				if psize <= 2 {
					bits = 1
				} else if psize <= 4 {
					bits = 2
				}
				stride := (tw*bits + 7) / 8
				rows, err := get(stride * th)
				if err != nil {
					return err
				}
				for y := range th {
					for x := range tw {
						bit := x * bits
						idx := int(rows[y*stride+bit/8]>>(8-bits-bit%8)) & (1<<bits - 1)
						px[y*tw+x] = pal[min(idx, psize-1)]
					}
				}
			case sub == 128 || sub >= 130:
				for i := 0; i < len(px); {
					var c uint32
					n := 1
					if sub == 128 {
						if c, err = cpix(); err != nil {
							return err
						}
						if n, err = runLen(); err != nil {
							return err
						}
					} else {
						b, err := zr.ReadByte()
						if err != nil {
							return err
						}
						c = pal[min(int(b&0x7f), psize-1)]
						if b&0x80 != 0 {
							if n, err = runLen(); err != nil {
								return err
							}
						}
					}
					for ; n > 0 && i < len(px); n-- {
						px[i] = c
						i++
					}
				}
			default:
				return fmt.Errorf("zrle subencoding %d", sub)
			}
			v.put(t, func(i int) uint32 { return px[i] })
		}
	}
	return nil
}
