package bridge

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"
)

// Taps: a recorder (package record) that follows a live viewer gets
// what that viewer is sent, byte for byte, from a keyframe on, instead
// of a connection of its own that would encode everything again (one
// more viewer: measured, +46-60% of deskd's CPU on a 10-fps page; a tap
// costs a copy).
//
// A tap reads as an RFB server's stream: a handshake (RFB 3.8, no
// security, ServerInit at the viewer's size), then one
// FramebufferUpdate that primes the decoder's zlib streams, then the
// viewer's own updates from a keyframe: a full update of the screen the
// viewer is sent for it (as for a non-incremental request; it costs the
// viewer that update, a keyframe interval apart). The viewer's Tight
// streams go on as they were (resetting them would cost the viewer for
// good: noVNC's pako keeps no window for a stream once reset, so every
// later rectangle would have to reset it too): the decoder instead
// starts from what the viewer's inflaters hold, the last 32 KiB that
// went through each stream, sent as a rectangle of raw pixels through
// that stream (a zlib header, then a stored block: a decoder keeps it as
// its window), which the keyframe then paints over.
//
// What the tap leaves out: clipboard and flow-control messages of the
// viewer's (only FramebufferUpdates, with a fence that may end one, go
// through). A viewer that takes H.264 video mode, or a pixel format
// other than noVNC's, cannot be followed: its taps close, and the
// recorder connects again (Server.Tap finds another viewer or none).

// ErrNoSource: no viewer can be followed (none, or none in noVNC's
// pixel format with Tight).
var ErrNoSource = errors.New("rfb: no viewer to follow")

// tapFormat is the pixel format a followed viewer must use: noVNC's.
var tapFormat = PixelFormat{BPP: 32, Depth: 24, TrueColour: true, RedMax: 255, GreenMax: 255, BlueMax: 255, RedShift: 0, GreenShift: 8, BlueShift: 16}

// maxTapQueue bounds what a tap holds for a recorder that does not read:
// past it the tap closes (the recorder starts again from a keyframe).
const maxTapQueue = 32 << 20

// tap is one recorder following one viewer. The recorder reads the
// queue straight from the viewer's writer (TapConn.Read): no pipe and no
// goroutine between them, one wake-up an update (measured: a pipe, a
// goroutine writing to it and one reading the recorder's requests took
// deskd from 110 to 260 context switches a second on a 10-fps page, 13%
// more CPU).
type tap struct {
	mu       sync.Mutex
	queue    []byte
	off      int  // queue[:off] has been read
	keyed    bool // its keyframe is queued: updates follow it
	closed   bool
	deadline time.Time // of reads
	wake     chan struct{}
	unhook   func() bool // ends the tap's tie to Tap's context
}

// TapConn is the recorder's end of a tap: reads take what the viewer
// is sent, writes (the recorder's requests) are dropped.
type TapConn struct{ t *tap }

var _ net.Conn = TapConn{}

// ExactStart says that a tap's first picture is what the viewer shows:
// a recorder needs no overlap between two taps of the same viewer.
func (TapConn) ExactStart() bool { return true }

// Read blocks until the viewer is sent something, the tap closes
// (io.EOF: what was not read yet is dropped) or the read deadline
// passes.
func (c TapConn) Read(p []byte) (int, error) {
	t := c.t
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	t.mu.Lock()
	for {
		switch {
		case t.closed:
			t.mu.Unlock()
			return 0, io.EOF
		case t.off < len(t.queue):
			n := copy(p, t.queue[t.off:])
			if t.off += n; t.off == len(t.queue) {
				t.queue, t.off = t.queue[:0], 0
			}
			t.mu.Unlock()
			return n, nil
		case !t.deadline.IsZero() && !time.Now().Before(t.deadline):
			t.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		var expired <-chan time.Time
		if !t.deadline.IsZero() {
			if timer == nil {
				timer = time.NewTimer(time.Until(t.deadline))
			} else {
				timer.Reset(time.Until(t.deadline))
			}
			expired = timer.C
		}
		t.mu.Unlock()
		select {
		case <-t.wake:
		case <-expired:
		}
		t.mu.Lock()
	}
}

// Write drops p: a tap follows the viewer's requests, not the recorder's.
func (c TapConn) Write(p []byte) (int, error) {
	if c.t.isClosed() {
		return 0, net.ErrClosed
	}
	return len(p), nil
}

// Close ends the tap.
func (c TapConn) Close() error { c.t.close(); return nil }

func (TapConn) LocalAddr() net.Addr  { return tapAddr{} }
func (TapConn) RemoteAddr() net.Addr { return tapAddr{} }

// SetDeadline sets the read deadline (writes never block).
func (c TapConn) SetDeadline(d time.Time) error { return c.SetReadDeadline(d) }

func (c TapConn) SetReadDeadline(d time.Time) error {
	c.t.mu.Lock()
	c.t.deadline = d
	c.t.mu.Unlock()
	c.t.poke() // a read waiting re-reads it
	return nil
}

func (TapConn) SetWriteDeadline(time.Time) error { return nil }

type tapAddr struct{}

func (tapAddr) Network() string { return "tap" }
func (tapAddr) String() string  { return "tap" }

// Tap starts following the viewer connected longest that can be
// followed. It returns ErrNoSource if none can. The tap ends when the
// returned connection is closed, ctx ends, the viewer leaves or cannot
// be followed any longer (then reads end with io.EOF).
func (s *Server) Tap(ctx context.Context) (net.Conn, error) {
	src := s.source()
	if src == nil {
		return nil, ErrNoSource
	}
	t := &tap{wake: make(chan struct{}, 1)}
	src.mu.Lock()
	if src.left {
		src.mu.Unlock()
		return nil, ErrNoSource
	}
	src.taps = append(src.taps, t)
	src.mu.Unlock()
	src.poke() // its keyframe
	unhook := context.AfterFunc(ctx, t.close)
	t.mu.Lock()
	t.unhook = unhook
	t.mu.Unlock()
	return TapConn{t}, nil
}

// Followable says whether Tap would find a viewer to follow.
func (s *Server) Followable() bool { return s.source() != nil }

// source is the viewer connected longest that a tap can follow.
func (s *Server) source() *client {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var src *client
	for c := range s.clients {
		if c.followable() && (src == nil || c.since.Before(src.since)) {
			src = c
		}
	}
	return src
}

// followable: a viewer whose stream a tap can follow. Callers hold s.mu.
func (c *client) followable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.recorder && !c.left && c.key.enc == EncTight && c.key.pf == tapFormat && c.video.st == nil
}

func (t *tap) close() {
	t.mu.Lock()
	t.closed = true
	t.queue = nil
	unhook := t.unhook
	t.mu.Unlock()
	if unhook != nil {
		unhook()
	}
	t.poke()
}

// poke wakes a read that waits.
func (t *tap) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// push queues p; a tap whose recorder is too far behind closes.
func (t *tap) push(p ...[]byte) {
	t.mu.Lock()
	if !t.closed {
		n := len(t.queue) - t.off
		for _, b := range p {
			n += len(b)
		}
		if n > maxTapQueue {
			t.closed, t.queue = true, nil
		} else {
			for _, b := range p {
				t.queue = append(t.queue, b...)
			}
		}
	}
	t.mu.Unlock()
	t.poke()
}

func (t *tap) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// tapsWaiting says whether a tap waits for its keyframe, dropping the
// closed ones. Callers hold c.mu.
func (c *client) tapsWaiting() bool {
	c.taps = slices.DeleteFunc(c.taps, (*tap).isClosed)
	for _, t := range c.taps {
		t.mu.Lock()
		keyed := t.keyed
		t.mu.Unlock()
		if !keyed {
			return true
		}
	}
	return false
}

// markKeyframe asks for the keyframe taps wait for: the whole screen, as
// for a non-incremental request. Callers hold c.mu.
func (c *client) markKeyframe() {
	if c.keyMarked || len(c.taps) == 0 || !c.tapsWaiting() {
		return
	}
	full := Rect{0, 0, c.fbW, c.fbH}
	c.dirty.mark(full)
	if c.whole.Empty() {
		c.whole = full
	} else {
		c.whole = union(c.whole, full)
	}
	c.keyMarked = true
}

// closeTaps ends every tap of the viewer. Callers hold c.mu.
func (c *client) closeTaps() {
	for _, t := range c.taps {
		t.close()
	}
	c.taps = nil
}

// tapPrefix is what a tap starts with before its keyframe: the
// handshake and the update that primes the decoder's streams. The
// writer calls it before encoding the keyframe; false if the screen is
// too small to prime through.
func (c *client) tapPrefix() ([]byte, bool) {
	be := binary.BigEndian
	out := []byte(version38)
	out = append(out, 1, SecNone)
	out = be.AppendUint32(out, 0)
	out = be.AppendUint16(out, uint16(c.fbW))
	out = be.AppendUint16(out, uint16(c.fbH))
	out = append(out, ServerFormat.marshal()...)
	out = be.AppendUint32(out, uint32(len(c.s.cfg.Name)))
	out = append(out, c.s.cfg.Name...)
	head := len(out)
	out = append(out, msgFramebufferUpdate, 0, 0, 0)
	n := 0
	for _, e := range []*encoder{c.enc, c.enc2} {
		if e == nil || e.independent {
			continue // every rectangle of it starts its stream afresh
		}
		for k, z := range e.tightStream {
			if z == nil || len(z.window()) == 0 {
				continue // a stream not used yet starts with its header
			}
			var ok bool
			if out, ok = appendPriming(out, k, z.window(), c.fbW, c.fbH); !ok {
				return nil, false
			}
			n++
		}
	}
	if n == 0 {
		return out[:head], true
	}
	be.PutUint16(out[head+2:], uint16(n))
	return out, true
}

// appendPriming appends a Tight rectangle at the screen's top left whose
// raw pixels (copy filter, 3 bytes a pixel in tapFormat) go through
// stream k and end with window: zlib's header, then one stored block
// and an empty one.
func appendPriming(dst []byte, k int, window []byte, w, h int) ([]byte, bool) {
	rw := min(w, 128)
	rh := (len(window) + 3*rw - 1) / (3 * rw)
	if rh > h {
		return dst, false
	}
	size := 3 * rw * rh
	dst = appendRectHeader(dst, Rect{0, 0, rw, rh}, EncTight)
	dst = append(dst, byte(k)<<4) // basic, stream k, copy filter
	z := []byte{0x78, 0x01}       // zlib: deflate, 32 KiB window, no dictionary
	z = append(z, 0)              // a stored block, not the last
	z = binary.LittleEndian.AppendUint16(z, uint16(size))
	z = binary.LittleEndian.AppendUint16(z, ^uint16(size))
	z = append(z, make([]byte, size-len(window))...)
	z = append(z, window...)
	// An empty stored block, as a sync flush ends: a decoder gives out
	// what it has there instead of reading on for the next block (Go's
	// flate would read past the end of the rectangle and fail).
	z = append(z, 0, 0, 0, 0xff, 0xff)
	dst = compactLen(dst, len(z))
	return append(dst, z...), true
}

// tee gives what the writer just sent (c.out, one update) to the taps:
// to those waiting when it is their keyframe (after prefix), to the
// others always. A video picture in it, another encoding than Tight or
// another pixel format closes them all.
func (c *client) tee(key bool, prefix []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.taps) == 0 {
		return
	}
	if len(c.video.pics) > 0 || c.key.enc != EncTight || c.key.pf != tapFormat {
		// Video, or the viewer changed its encoding or pixel format: the
		// taps' decoders could not follow (their recorders start again).
		c.closeTaps()
		return
	}
	for _, t := range c.taps {
		t.mu.Lock()
		keyed := t.keyed
		if key && !keyed {
			t.keyed = true
		}
		t.mu.Unlock()
		switch {
		case keyed:
			t.push(c.out)
		case key:
			t.push(prefix, c.out)
		}
	}
}

// approxTiles says, for each tile of the screen, whether the viewer
// holds any of it as JPEG. Writer only.
func (c *client) approxTiles() []bool {
	cols, rows := (c.fbW+tile-1)/tile, (c.fbH+tile-1)/tile
	out := make([]bool, cols*rows)
	for ty := range rows {
		for tx := range cols {
			r := Rect{tx * tile, ty * tile, min(tile, c.fbW-tx*tile), min(tile, c.fbH-ty*tile)}
			out[ty*cols+tx] = c.snap.anyApprox(r)
		}
	}
	return out
}

// keyframeOrder puts the rectangles of tiles the viewer held exactly
// first and those it held as JPEG after, and says where the second part
// starts.
func keyframeOrder(rects []Rect, approx []bool, w int) ([]Rect, int) {
	cols := (w + tile - 1) / tile
	out := make([]Rect, 0, len(rects))
	var lossy []Rect
	for _, r := range rects {
		if i := r.Y/tile*cols + r.X/tile; i < len(approx) && approx[i] {
			lossy = append(lossy, r)
		} else {
			out = append(out, r)
		}
	}
	return append(out, lossy...), len(rects) - len(lossy)
}
