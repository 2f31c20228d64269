package bridge

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
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

// tap is one recorder following one viewer.
type tap struct {
	ours net.Conn // the pipe's end this package writes

	mu     sync.Mutex
	queue  []byte
	spare  []byte // the buffer run wrote last, for the queue to reuse
	keyed  bool   // its keyframe is queued: updates follow it
	closed bool
	wake   chan struct{}
}

// TapConn is the recorder's end of a tap.
type TapConn struct{ net.Conn }

// ExactStart says that a tap's first picture is what the viewer shows:
// a recorder needs no overlap between two taps of the same viewer.
func (TapConn) ExactStart() bool { return true }

// Tap starts following the viewer connected longest that can be
// followed. It returns ErrNoSource if none can. The tap ends when the
// returned connection is closed, ctx ends, the viewer leaves or cannot
// be followed any longer (then reads end with io.EOF).
func (s *Server) Tap(ctx context.Context) (net.Conn, error) {
	src := s.source()
	if src == nil {
		return nil, ErrNoSource
	}
	ours, theirs := net.Pipe()
	t := &tap{ours: ours, wake: make(chan struct{}, 1)}
	src.mu.Lock()
	if src.left {
		src.mu.Unlock()
		ours.Close()
		theirs.Close()
		return nil, ErrNoSource
	}
	src.taps = append(src.taps, t)
	src.mu.Unlock()
	src.poke() // its keyframe
	stop := context.AfterFunc(ctx, t.close)
	go func() { // the recorder's messages: read and dropped; ends when the pipe closes
		buf := make([]byte, 4096)
		for {
			if _, err := ours.Read(buf); err != nil {
				t.close()
				return
			}
		}
	}()
	go func() { // ends when the tap closes
		defer stop()
		t.run()
	}()
	return TapConn{theirs}, nil
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

// run writes the queue to the recorder until the tap closes.
func (t *tap) run() {
	defer t.ours.Close()
	for {
		t.mu.Lock()
		for len(t.queue) == 0 && !t.closed {
			t.mu.Unlock()
			<-t.wake
			t.mu.Lock()
		}
		if t.closed {
			t.mu.Unlock()
			return
		}
		out := t.queue
		t.queue, t.spare = t.spare[:0], nil
		t.mu.Unlock()
		t.ours.SetWriteDeadline(time.Now().Add(time.Minute))
		if _, err := t.ours.Write(out); err != nil {
			t.close()
			return
		}
		t.mu.Lock()
		t.spare = out
		t.mu.Unlock()
	}
}

func (t *tap) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// push queues p; a tap whose recorder is too far behind closes.
func (t *tap) push(p ...[]byte) {
	t.mu.Lock()
	if !t.closed {
		n := len(t.queue)
		for _, b := range p {
			n += len(b)
		}
		if n > maxTapQueue {
			t.closed = true
		} else {
			for _, b := range p {
				t.queue = append(t.queue, b...)
			}
		}
	}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
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
