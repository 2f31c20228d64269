package bridge

import (
	"bufio"
	"context"
	"encoding/binary"
	"sync"
)

// tiles is a dirty-tile bitmap: bounded whatever the damage rate, and
// coalescing by construction (a tile dirtied twice is sent once, with its
// newest pixels).
type tiles struct {
	cols, rows, w, h int
	bits             []bool
	n                int
}

func newTiles(w, h int) *tiles {
	cols, rows := (w+tile-1)/tile, (h+tile-1)/tile
	return &tiles{cols: cols, rows: rows, w: w, h: h, bits: make([]bool, cols*rows)}
}

func (t *tiles) mark(r Rect) {
	r = r.Intersect(Rect{0, 0, t.w, t.h})
	if r.Empty() {
		return
	}
	for ty := r.Y / tile; ty <= (r.Y+r.H-1)/tile; ty++ {
		for tx := r.X / tile; tx <= (r.X+r.W-1)/tile; tx++ {
			if i := ty*t.cols + tx; !t.bits[i] {
				t.bits[i] = true
				t.n++
			}
		}
	}
}

// take returns and clears the dirty tiles inside r.
func (t *tiles) take(r Rect) []Rect {
	var out []Rect
	for ty := 0; ty < t.rows; ty++ {
		for tx := 0; tx < t.cols; tx++ {
			i := ty*t.cols + tx
			if !t.bits[i] {
				continue
			}
			rt := Rect{tx * tile, ty * tile, min(tile, t.w-tx*tile), min(tile, t.h-ty*tile)}
			if c := rt.Intersect(r); !c.Empty() {
				out = append(out, c)
				if c == rt {
					t.bits[i] = false
					t.n--
				}
			}
		}
	}
	return out
}

// client is one viewer.
type client struct {
	s        *Server
	viewOnly bool

	mu        sync.Mutex // guards the fields below
	dirty     *tiles
	request   Rect // the pending FramebufferUpdateRequest's area
	requested bool
	encodings []int32
	pf        *PixelFormat // a SetPixelFormat not yet applied
	quality   int          // -1: no JPEG
	level     int
	wake      chan struct{}

	// Used by the writer only.
	sent int32 // encoding of the previous update, to log changes
	bw   *bufio.Writer
	enc  *encoder
	snap *Frame
	out  []byte
}

func (c *client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *client) markDirty(rs []Rect) {
	c.mu.Lock()
	for _, r := range rs {
		c.dirty.mark(r)
	}
	c.mu.Unlock()
	c.poke()
}

// readLoop handles the viewer's messages.
func (c *client) readLoop(ctx context.Context, br *bufio.Reader) error {
	for {
		m, err := ReadClientMessage(br)
		if err != nil {
			return err
		}
		switch m.Type {
		case msgSetPixelFormat:
			c.mu.Lock()
			pf := m.PixelFormat
			c.pf = &pf
			c.mu.Unlock()
		case msgSetEncodings:
			c.mu.Lock()
			c.encodings, c.quality, c.level = m.Encodings, -1, 1
			for _, e := range m.Encodings {
				switch {
				case e >= encJPEGQuality0 && e <= encJPEGQuality0+9:
					c.quality = int(e - encJPEGQuality0)
				case e >= encCompressLevel && e <= encCompressLevel+9:
					c.level = max(1, int(e-encCompressLevel))
				}
			}
			c.mu.Unlock()
		case msgFBUpdateRequest:
			c.mu.Lock()
			if !m.Incremental {
				c.dirty.mark(m.Rect)
			}
			if c.requested {
				c.request = union(c.request, m.Rect)
			} else {
				c.request, c.requested = m.Rect, true
			}
			c.mu.Unlock()
			c.poke()
		case msgKeyEvent, msgQEMU:
			if !c.viewOnly && m.Keysym != 0 {
				c.s.screen.Key(m.Keysym, m.Down)
			}
		case msgPointerEvent:
			if !c.viewOnly {
				c.s.screen.Pointer(m.X, m.Y, m.Buttons)
			}
		}
		// ClientCutText, Fence, EnableContinuousUpdates and SetDesktopSize
		// are parsed (and bounded) but not acted on yet.
	}
}

// writeLoop sends one update per request, when there is something in it.
func (c *client) writeLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wake:
		}
		c.mu.Lock()
		if !c.requested || c.dirty.n == 0 {
			c.mu.Unlock()
			continue
		}
		rects := c.dirty.take(c.request)
		if len(rects) == 0 {
			c.mu.Unlock()
			continue
		}
		c.requested = false
		if c.pf != nil { // the new format applies from this update on
			c.enc.pw = newPixelWriter(*c.pf)
			c.pf = nil
		}
		c.enc.quality, c.enc.level = c.quality, c.level
		encoding := c.choose()
		c.mu.Unlock()

		c.s.mu.RLock() // a private copy: encoding never holds up capture
		for _, r := range rects {
			for y := r.Y; y < r.Y+r.H; y++ {
				i := y*c.snap.Stride + 4*r.X
				copy(c.snap.Pix[i:i+4*r.W], c.s.fb.Pix[i:i+4*r.W])
			}
		}
		c.s.mu.RUnlock()
		if encoding != c.sent {
			c.s.log.Debug("viewer encoding", "encoding", encodingName(encoding), "jpeg_quality", c.enc.quality, "bpp", c.enc.pw.pf.BPP)
			c.sent = encoding
		}
		if err := c.sendUpdate(rects, encoding); err != nil {
			return err
		}
	}
}

func encodingName(e int32) string {
	switch e {
	case EncTight:
		return "tight"
	case EncZRLE:
		return "zrle"
	case EncZlib:
		return "zlib"
	}
	return "raw"
}

// choose picks the first encoding of the client's list that we speak.
func (c *client) choose() int32 {
	for _, e := range c.encodings {
		switch e {
		case EncTight, EncZRLE, EncZlib, EncRaw:
			return e
		}
	}
	return EncRaw
}

// sendUpdate writes a FramebufferUpdate (§7.6.1): u8 0, pad, u16 n, then
// per rectangle u16 x, y, w, h, s32 encoding and its body.
func (c *client) sendUpdate(rects []Rect, encoding int32) error {
	be := binary.BigEndian
	c.out = append(c.out[:0], msgFramebufferUpdate, 0)
	c.out = be.AppendUint16(c.out, uint16(len(rects)))
	for _, r := range rects {
		c.out = be.AppendUint16(c.out, uint16(r.X))
		c.out = be.AppendUint16(c.out, uint16(r.Y))
		c.out = be.AppendUint16(c.out, uint16(r.W))
		c.out = be.AppendUint16(c.out, uint16(r.H))
		c.out = be.AppendUint32(c.out, uint32(encoding))
		switch encoding {
		case EncTight:
			c.out = c.enc.encodeTight(c.out, c.snap, r)
		case EncZRLE:
			c.out = c.enc.encodeZRLE(c.out, c.snap, r)
		case EncZlib:
			c.out = c.enc.encodeZlib(c.out, c.snap, r)
		default:
			c.out = c.enc.encodeRaw(c.out, c.snap, r)
		}
	}
	if _, err := c.bw.Write(c.out); err != nil {
		return err
	}
	return c.bw.Flush()
}
