package bridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"
)

// tiles is a dirty-tile bitmap: bounded whatever the damage rate, and
// coalescing by construction (a tile dirtied twice is sent once, with its
// newest pixels).
type tiles struct {
	cols, rows, w, h int
	bits             []bool
	n                int
	// sent is, for a dirty tile of which a viewer asked only a part, the
	// part it was sent (until the tile is marked again): asking for that
	// part again brings nothing new.
	sent map[int]Rect
	// at is when each tile last changed (unix nanoseconds): marked, or
	// moved by a scroll.
	at []int64
}

func newTiles(w, h int) *tiles {
	cols, rows := (w+tile-1)/tile, (h+tile-1)/tile
	return &tiles{cols: cols, rows: rows, w: w, h: h, bits: make([]bool, cols*rows), at: make([]int64, cols*rows)}
}

// touch records that the tiles overlapping r changed now, without
// marking them (a scroll moved them: the viewer moves its own pixels).
func (t *tiles) touch(r Rect) {
	r = r.Intersect(Rect{0, 0, t.w, t.h})
	if r.Empty() {
		return
	}
	now := time.Now().UnixNano()
	for ty := r.Y / tile; ty <= (r.Y+r.H-1)/tile; ty++ {
		for tx := r.X / tile; tx <= (r.X+r.W-1)/tile; tx++ {
			t.at[ty*t.cols+tx] = now
		}
	}
}

func contains(outer, inner Rect) bool { return inner.Intersect(outer) == inner }

func (t *tiles) mark(r Rect) {
	r = r.Intersect(Rect{0, 0, t.w, t.h})
	if r.Empty() {
		return
	}
	now := time.Now().UnixNano()
	for ty := r.Y / tile; ty <= (r.Y+r.H-1)/tile; ty++ {
		for tx := r.X / tile; tx <= (r.X+r.W-1)/tile; tx++ {
			i := ty*t.cols + tx
			t.at[i] = now
			if !t.bits[i] {
				t.bits[i] = true
				t.n++
			}
			delete(t.sent, i)
		}
	}
}

// each calls fn for every dirty tile overlapping r.
func (t *tiles) each(r Rect, fn func(Rect)) {
	r = r.Intersect(Rect{0, 0, t.w, t.h})
	if r.Empty() {
		return
	}
	for ty := r.Y / tile; ty <= (r.Y+r.H-1)/tile; ty++ {
		for tx := r.X / tile; tx <= (r.X+r.W-1)/tile; tx++ {
			if t.bits[ty*t.cols+tx] {
				fn(Rect{tx * tile, ty * tile, min(tile, t.w-tx*tile), min(tile, t.h-ty*tile)})
			}
		}
	}
}

// clearTile unmarks the tile r is (a whole tile, as take returns them).
func (t *tiles) clearTile(r Rect) {
	if r.X%tile != 0 || r.Y%tile != 0 || r.W != min(tile, t.w-r.X) || r.H != min(tile, t.h-r.Y) {
		return // a part of a tile: the rest of it is as it was
	}
	if i := r.Y/tile*t.cols + r.X/tile; i < len(t.bits) && t.bits[i] {
		t.bits[i] = false
		t.n--
	}
}

// refineInto moves to dirty the tiles marked here that have not changed
// (by dirty's clock) for still; it appends their indices to moved and
// returns it, and how long until the next of the others has been still
// that long.
func (t *tiles) refineInto(dirty *tiles, still time.Duration, moved []int) ([]int, time.Duration) {
	now := time.Now().UnixNano()
	next := time.Duration(0)
	for i, b := range t.bits {
		if !b || i >= len(dirty.bits) {
			continue
		}
		if wait := time.Duration(dirty.at[i] + int64(still) - now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		t.bits[i] = false
		t.n--
		moved = append(moved, i)
		if !dirty.bits[i] {
			dirty.bits[i] = true
			dirty.n++
		}
		delete(dirty.sent, i)
	}
	return moved, next
}

// stillSince reports whether none of the tiles idx changed after at
// (unix nanoseconds).
func (t *tiles) stillSince(idx []int, at int64) bool {
	for _, i := range idx {
		if i < len(t.at) && t.at[i] > at {
			return false
		}
	}
	return true
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
			c := rt.Intersect(r)
			switch {
			case c.Empty():
			case c == rt:
				out = append(out, c)
				t.bits[i] = false
				t.n--
				delete(t.sent, i)
			default: // part of the tile: the rest stays dirty
				if prev, ok := t.sent[i]; ok && contains(prev, c) {
					continue // sent already, unchanged since
				}
				out = append(out, c)
				if t.sent == nil {
					t.sent = map[int]Rect{}
				}
				t.sent[i] = c
			}
		}
	}
	return out
}

// client is one viewer.
type client struct {
	s        *Server
	viewOnly bool
	recorder bool // ConnOptions.Recorder

	mu        sync.Mutex // guards the fields below
	dirty     *tiles
	request   Rect // the pending FramebufferUpdateRequest's area
	requested bool
	encodings []int32
	pf        *PixelFormat // a SetPixelFormat not yet applied
	quality   int          // -1: no JPEG
	level     int
	wake      chan struct{}
	// Clipboard: extClip when the viewer takes the extended clipboard;
	// the want* flags are replies the writer owes it.
	extClip, capsSent                    bool
	wantRequest, wantProvide, wantNotify bool
	clipSeen                             int       // serial of the clipboard the viewer has
	size                                 *sizeNote // a size message the viewer is owed
	copyRect                             bool      // it takes CopyRect
	h264                                 bool      // it takes Open H.264 (video.go)
	copy                                 *scroll   // a move it is owed, sent before any pixels
	flow                                 flow      // continuous updates and fences
	key                                  encKey    // settings of its last update (for sharing)
	cong                                 congestion
	// lossy are the tiles the viewer last got as JPEG; once the screen
	// has been still for refineDelay they are sent again lossless, as
	// TigerVNC does: refined are those tiles, refineAt (unix nanoseconds)
	// when that was decided. The next update carries no JPEG unless one
	// of them changed since: then it is new motion, sent lossy, and its
	// tiles wait again (a viewer slow to ask, the screen moving again).
	lossy    *tiles
	refined  []int
	refineAt int64
	// whole is the area of non-incremental requests not yet served: it
	// is sent whatever the viewer has (RFC 6143 §7.5.3), so the writer
	// forgets it in the viewer's picture first.
	whole Rect
	// markedGen is the server's frame generation (s.gen) when changes
	// were last marked here: pixels copied from a newer frame than the
	// marks describe are marked again (see writeLoop).
	markedGen   uint64
	extSizeSent bool // it has had its first ExtendedDesktopSize
	// Taps following it (tap.go); keyMarked: their keyframe is marked
	// and not sent yet; left: the viewer has gone (no new taps).
	taps      []*tap
	keyMarked bool
	left      bool
	since     time.Time // when it connected

	// Used by the writer only.
	sent       int32 // encoding of the previous update, to log changes
	cursorSent int   // serial of the cursor shape the viewer has
	bw         *bufio.Writer
	enc        *encoder
	enc2       *encoder // Tight's second half of a large update, in parallel (streams 2, 3)
	out2       []byte
	snap       *seen // the viewer's picture (seen.go)
	sendRects  []Rect
	fbW, fbH   int // the framebuffer size the viewer knows
	out        []byte
	video      videoState // the video stream it follows (c.mu)
}

func (c *client) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *client) markDirty(rs []Rect) {
	c.mu.Lock()
	c.markedGen = c.s.gen // callers hold s.mu
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
			c.extClip = slices.Contains(m.Encodings, EncExtendedClipboard)
			c.copyRect = slices.Contains(m.Encodings, EncCopyRect)
			c.h264 = slices.Contains(m.Encodings, EncH264)
			c.setEncodingsFlow(slices.Contains(m.Encodings, EncContinuousUpdates), slices.Contains(m.Encodings, EncFence))
			if slices.Contains(m.Encodings, EncExtendedDesktopSize) && !c.extSizeSent {
				// The first update after this says the size (rfbproto): it
				// is how a viewer learns it may send SetDesktopSize.
				c.extSizeSent = true
				if c.size == nil {
					c.size = &sizeNote{reason: reasonServer, status: resizeOK}
				}
			}
			for _, e := range m.Encodings {
				switch {
				case e >= encJPEGQuality0 && e <= encJPEGQuality0+9:
					c.quality = int(e - encJPEGQuality0)
				case e >= encCompressLevel && e <= encCompressLevel+9:
					c.level = max(1, int(e-encCompressLevel))
				}
			}
			c.mu.Unlock()
			c.poke() // caps for the extended clipboard
		case msgFBUpdateRequest:
			c.mu.Lock()
			if !c.flow.enabled {
				// It answers the update before it (under continuous
				// updates, fences do: a request then answers nothing).
				c.answered()
			}
			if !m.Incremental {
				c.dirty.mark(m.Rect)
				if c.whole.Empty() {
					c.whole = m.Rect
				} else {
					c.whole = union(c.whole, m.Rect)
				}
			}
			c.ask(m.Rect)
			c.mu.Unlock()
			c.poke()
		case msgKeyEvent, msgQEMU:
			if !c.viewOnly && m.Keysym != 0 {
				c.s.screen.Key(m.Keysym, m.Down)
				c.s.noteInput()
			}
		case msgPointerEvent:
			if !c.viewOnly {
				c.s.screen.Pointer(m.X, m.Y, uint16(m.Buttons))
				c.s.noteInput()
			}
		case msgClientCutText:
			if err := c.clientCutText(m); err != nil {
				return err
			}
		case msgEnableContUpdates:
			if err := c.enableContinuous(m); err != nil {
				return err
			}
		case msgFence:
			if err := c.fence(m); err != nil {
				return err
			}
		case msgSetDesktopSize:
			if c.viewOnly {
				c.noteSize(sizeNote{reason: reasonThisClient, status: resizeProhibited})
				continue
			}
			select {
			case c.s.resizeCh <- resizeReq{w: m.W, h: m.H, from: c}:
			default: // resizes are piling up
				c.noteSize(sizeNote{reason: reasonThisClient, status: resizeNoResources})
			}
		}
	}
}

// markAgain marks rects dirty again, and where the pending move takes
// their content. Callers hold c.mu.
func (c *client) markAgain(rects []Rect) {
	for _, r := range rects {
		c.dirty.mark(r)
		if c.copy != nil {
			c.dirty.markMoved(r, *c.copy)
		}
	}
}

// refineDelay is how long a tile sent as JPEG must stay unchanged before
// it is sent again lossless: text settles crisp after a scroll, while a
// scroll in wheel steps (a step every 100 ms or so), a video or an
// animation is never sent twice, and a clock ticking elsewhere holds
// nothing up. Measured with 10 viewers of a photo gallery scrolled every
// 100 ms: timed from the last update sent (slow viewers get one every
// 150 ms), refinement fired between steps and made frames 8x bigger.
const refineDelay = 150 * time.Millisecond

// writeLoop sends one update per request, when there is something in it.
func (c *client) writeLoop(ctx context.Context) error {
	refine := time.NewTimer(time.Hour) // owned here; armed after lossy updates
	refine.Stop()
	defer refine.Stop()
	armed := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.wake:
		case <-refine.C:
			c.mu.Lock()
			var next time.Duration
			n := len(c.refined)
			c.refined, next = c.lossy.refineInto(c.dirty, refineDelay, c.refined)
			if len(c.refined) > n {
				c.refineAt = time.Now().UnixNano()
			}
			armed = next > 0
			if armed { // others changed meanwhile: their turn comes
				refine.Reset(next)
			}
			c.mu.Unlock()
		}
		// Shared state first: the capture loop takes s.mu then c.mu, so
		// nothing here may take s.mu while holding c.mu.
		c.s.mu.RLock()
		clip, cur := c.s.clip, c.s.cursor
		c.s.mu.RUnlock()
		c.mu.Lock()
		c.out = c.clipMessages(c.out[:0], clip)
		c.out = c.flowMessages(c.out)
		if len(c.out) > 0 {
			c.mu.Unlock()
			if _, err := c.bw.Write(c.out); err != nil {
				return err
			}
			if err := c.bw.Flush(); err != nil {
				return err
			}
			c.mu.Lock()
		}
		c.markKeyframe()
		if c.size != nil && (c.requested || c.flow.enabled) {
			if err := c.sendSize(); err != nil { // unlocks c.mu
				return err
			}
			continue
		}
		cursor := c.pendingCursor(cur)
		c.followVideo()
		videoDue := c.videoDue()
		req, push := c.request, false
		if !c.requested { // under continuous updates no request is needed
			req, push = c.pushing()
			if !push && videoDue && c.flow.enabled {
				if c.videoRoom() {
					req, push = c.flow.area, true
				} else {
					c.video.noteHeld(time.Now())
				}
			}
			if !push && c.flow.enabled && (c.dirty.n > 0 || videoDue) {
				c.cong.held()
			}
		}
		if (!c.requested && !push) || (c.dirty.n == 0 && cursor == nil && c.copy == nil && !videoDue) {
			c.mu.Unlock()
			continue
		}
		cp := c.copy
		c.copy = nil
		if cp != nil && cp.dst.Intersect(req) != cp.dst {
			c.dirty.mark(cp.dst) // asked for part of the screen only: send pixels
			cp = nil
		}
		rects := c.dirty.take(req)
		gen := c.markedGen
		c.video.pics = c.video.pics[:0]
		if vs := c.video.st; vs != nil && contains(req, vs.region) {
			// The region goes as video: its tiles not as pixels (a viewer
			// that asks for part of it only gets pixels there).
			rects = cutOut(rects, vs.region)
			if videoDue {
				c.takeVideo()
			}
		}
		if len(rects) == 0 && cursor == nil && cp == nil && len(c.video.pics) == 0 {
			c.mu.Unlock()
			continue
		}
		full := c.whole
		c.whole = Rect{}
		c.requested = false
		// The update a tap waits for: the whole screen, forgotten below.
		keyframe := c.keyMarked && contains(full, Rect{0, 0, c.fbW, c.fbH})
		c.keyMarked = false
		if keyframe && c.video.st != nil { // a video region goes without pixels
			c.closeTaps()
			keyframe = false
		}
		if c.pf != nil { // the new format applies from this update on
			c.enc.pw = newPixelWriter(*c.pf)
			c.pf = nil
		}
		quality := c.quality
		if !c.recorder {
			quality = c.cong.quality(c.quality)
		}
		if len(c.refined) > 0 && c.dirty.stillSince(c.refined, c.refineAt) {
			quality = -1 // this update makes lossy tiles exact
		}
		c.refined = c.refined[:0]
		c.enc.quality, c.enc.level = quality, c.level
		if c.enc2 == nil {
			c.enc2 = &encoder{tightBase: 2}
		}
		c.enc2.pw, c.enc2.quality, c.enc2.level = c.enc.pw, quality, c.level
		encoding := c.choose()
		c.key = encKey{enc: encoding, pf: c.enc.pw.pf, quality: quality, level: c.level}
		key := c.key
		c.mu.Unlock()
		// Viewers with equal Tight settings share independently encoded tiles.
		var sh *sharing
		if encoding == EncTight && !c.recorder && c.s.peers(key) >= 2 {
			sh = &sharing{cache: &c.s.cache, key: key, idx: make([]int, len(rects)), versions: make([]uint64, len(rects))}
		}
		if sh != nil {
			c.enc.setIndependent()
			c.enc2.setIndependent()
		}

		c.s.mu.RLock() // a private copy: encoding never holds up capture
		if c.s.fb.W != c.fbW || c.s.fb.H != c.fbH {
			// Resized since the rectangles were taken: the size message
			// and a full update are queued; this request (or, under
			// continuous updates, the next push) serves them.
			c.s.mu.RUnlock()
			c.mu.Lock()
			c.requested = c.requested || !push
			c.mu.Unlock()
			c.poke()
			continue
		}
		// A capture after the rectangles were taken, whose changes may
		// not be marked here yet: the pixels copied below are newer than
		// the marks. They are right to send, but a move marked meanwhile
		// (or next) was computed without them: mark them again, and
		// where such a move takes their content, so nothing is left
		// wrong on the viewer's screen.
		newer := c.s.gen != gen
		if cp != nil { // the viewer moves its pixels before any others land
			c.snap.move(*cp)
		}
		var approx []bool
		if keyframe { // which tiles it holds as JPEG, before forgetting
			approx = c.approxTiles()
		}
		if full = full.Intersect(Rect{0, 0, c.fbW, c.fbH}); !full.Empty() {
			c.snap.forget(full) // asked for in full: sent whatever it has
		}
		// Of each rectangle, only the box where the screen differs from
		// the viewer's picture goes (seen.go).
		send := c.sendRects[:0]
		var run Rect // boxes side by side, copied as one (see compareBox)
		for _, r := range rects {
			box, ok := c.snap.changedBox(c.s.fb, r, quality >= 0)
			if !ok {
				continue
			}
			if sh != nil && 2*box.W*box.H > r.W*r.H {
				// Most of a tile: the whole tile, encoded once for the
				// viewers with these settings (at most twice the pixels
				// for one encoding instead of one each).
				box = r
			}
			if box.continues(run) {
				run.W += box.W
			} else {
				if !run.Empty() {
					c.snap.copyKnown(c.s.fb, run)
				}
				run = box
			}
			if sh != nil { // the version of exactly these pixels
				idx, whole := tileIndex(box, c.s.fb.W, c.s.fb.H)
				var version uint64
				if whole {
					version = c.s.versions[idx]
				}
				sh.idx[len(send)], sh.versions[len(send)] = idx, version
			}
			send = append(send, box)
		}
		if !run.Empty() {
			c.snap.copyKnown(c.s.fb, run)
		}
		c.sendRects = send
		c.s.mu.RUnlock()
		if newer {
			c.mu.Lock()
			c.markAgain(rects)
			c.mu.Unlock()
			c.poke()
		}
		if len(send) == 0 && cursor == nil && cp == nil && len(c.video.pics) == 0 {
			// The viewer has all of it already (a tile that changed and
			// changed back): nothing to send, its request still stands.
			if !push {
				c.mu.Lock()
				c.ask(req)
				c.mu.Unlock()
			}
			c.forgetLossy(rects)
			continue
		}
		if sh != nil {
			sh.idx, sh.versions = sh.idx[:len(send)], sh.versions[:len(send)]
		}
		if encoding != c.sent {
			c.s.log.Debug("viewer encoding", "encoding", encodingName(encoding), "jpeg_quality", c.enc.quality, "bpp", c.enc.pw.pf.BPP)
			c.sent = encoding
		}
		var prefix []byte
		split := -1
		if keyframe {
			var ok bool
			if encoding != EncTight { // the two halves share no stream: Tight's alone are split
				ok = false
			} else {
				prefix, ok = c.tapPrefix()
			}
			if !ok {
				c.mu.Lock()
				c.closeTaps()
				c.mu.Unlock()
				keyframe = false
			} else {
				// What the viewer holds exactly goes lossless (it sees no
				// change), what it holds as JPEG goes as JPEG (it and the
				// tap see the same new one): one encoder each.
				send, split = keyframeOrder(send, approx, c.fbW)
				c.enc.quality = -1
				sh = nil
			}
		}
		if err := c.sendUpdate(send, encoding, cursor, cp, push, sh, split); err != nil {
			return err
		}
		c.tee(keyframe, prefix)
		// Which tiles the viewer now has as JPEG: those wait for the
		// screen to be still, then go again lossless.
		pending := c.forgetLossy(rects)
		if pending && !armed { // (armed, it fires on time: updates do not postpone it)
			refine.Reset(refineDelay)
			armed = true
		}
	}
}

// ask notes a FramebufferUpdateRequest for r, joining one pending.
// Callers hold c.mu.
func (c *client) ask(r Rect) {
	if c.requested {
		c.request = union(c.request, r)
	} else {
		c.request, c.requested = r, true
	}
}

// forgetLossy notes what the last update sent as JPEG: those pixels
// are approximate in the viewer's picture. The tiles of rects where it
// has any such pixels (sent now, or before and left as they were) wait
// to be sent again lossless; it has the others exactly. It reports
// whether any tile waits.
func (c *client) forgetLossy(rects []Rect) bool {
	for _, e := range []*encoder{c.enc, c.enc2} {
		for _, r := range e.lossy {
			c.snap.approximate(r)
		}
	}
	c.mu.Lock()
	for _, r := range rects {
		if c.snap.anyApprox(r) {
			c.lossy.mark(r)
		} else {
			c.lossy.clearTile(r)
		}
	}
	pending := c.lossy.n > 0
	c.mu.Unlock()
	c.enc.lossy, c.enc2.lossy = c.enc.lossy[:0], c.enc2.lossy[:0]
	return pending
}

// sendSize sends the size message the viewer is owed, in answer to its
// pending request. Callers hold c.mu; it is released.
func (c *client) sendSize() error {
	n := *c.size
	c.size, c.requested = nil, false
	encodings := c.encodings
	c.mu.Unlock()
	if n.changed {
		c.fbW, c.fbH = n.w, n.h
		c.snap = newSeen(n.w, n.h)
	} else {
		n.w, n.h = c.fbW, c.fbH
	}
	c.out = append(c.out[:0], msgFramebufferUpdate, 0, 0, 1)
	var ok bool
	if c.out, ok = c.appendSizeRect(c.out, n, encodings); !ok {
		if n.changed {
			return fmt.Errorf("rfb: the viewer cannot follow a resize to %dx%d (it takes no DesktopSize)", n.w, n.h)
		}
		c.mu.Lock() // nothing to say after all; the request still stands
		c.requested = true
		c.mu.Unlock()
		return nil
	}
	if _, err := c.bw.Write(c.out); err != nil {
		return err
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	c.tee(false, nil)
	return nil
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

// pendingCursor returns the pointer shape cur when the viewer takes the
// Cursor pseudo-encoding and does not have it. Callers hold c.mu.
func (c *client) pendingCursor(cur cursorShape) *cursorShape {
	if !slices.Contains(c.encodings, EncCursor) {
		return nil
	}
	if cur.img == nil || cur.serial == c.cursorSent {
		return nil
	}
	return &cur
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
// per rectangle u16 x, y, w, h, s32 encoding and its body. A pushed one
// (push) may be followed by a fence request (flow.go).
// split, when not -1, is where c.enc2 takes over from c.enc (a
// keyframe: keyframeOrder).
func (c *client) sendUpdate(rects []Rect, encoding int32, cursor *cursorShape, cp *scroll, push bool, sh *sharing, split int) error {
	n := 0 // rectangles, written in the header once known
	if cursor != nil {
		n++
	}
	if cp != nil {
		n++
	}
	c.out = append(c.out[:0], msgFramebufferUpdate, 0, 0, 0)
	if cursor != nil {
		c.out = c.appendCursor(c.out, cursor)
		c.cursorSent = cursor.serial
	}
	if cp != nil { // before any pixels: they are newer than what it moves
		c.out = appendCopyRect(c.out, *cp)
	}
	video := len(c.out)
	if len(c.video.pics) > 0 {
		c.out = c.appendVideo(c.out)
		n++
	}
	video = len(c.out) - video
	if total := area(rects); split >= 0 || encoding == EncTight && total >= parallelArea && len(rects) > 1 && c.s.cfg.Cores.N() > 1 {
		// Two halves of equal area at once, each with its own Tight
		// streams; appended in order, every stream still sees its data
		// in order.
		release := c.s.cfg.Cores.Widen()
		half := split
		if half < 0 {
			half = splitArea(rects, total)
		}
		done := make(chan struct{})
		var n2 int
		go func() { // ends before sendUpdate goes on
			c.out2, n2 = c.enc2.appendRects(c.out2[:0], c.snap.Frame, rects[half:], encoding, sh.part(half, len(rects)))
			close(done)
		}()
		var n1 int
		c.out, n1 = c.enc.appendRects(c.out, c.snap.Frame, rects[:half], encoding, sh.part(0, half))
		<-done
		release()
		c.out = append(c.out, c.out2...)
		n += n1 + n2
	} else {
		var k int
		c.out, k = c.enc.appendRects(c.out, c.snap.Frame, rects, encoding, sh)
		n += k
	}
	binary.BigEndian.PutUint16(c.out[2:], uint16(n))
	c.mu.Lock()
	now := time.Now()
	c.cong.sent(len(c.out), video)
	if !push { // answered by the viewer's next request
		c.cong.ping(now)
	} else if c.flow.fenceDue(len(c.out), now, !c.cong.room()) {
		c.out = append(c.out, c.pushed(now)...)
	}
	c.mu.Unlock()
	if _, err := c.bw.Write(c.out); err != nil {
		return err
	}
	return c.bw.Flush()
}

// parallelArea is the update size (pixels) from which Tight encodes on
// two cores: sixty-four 64×64 tiles (a quarter of a 1280x800 screen),
// half a millisecond of JPEG or more. Under it, the second core costs
// more than it saves: widening the scheduler stops the world twice and
// wakes a thread (with 16 tiles, and JPEG in AVX2, a photo gallery
// scrolled in noVNC took 8% more CPU a frame in two halves than in one).
const parallelArea = 64 * 64 * 64

// splitArea returns the index that splits rs into two runs of about
// equal area, each non-empty.
func splitArea(rs []Rect, total int) int {
	n := 0
	for i, r := range rs {
		n += r.W * r.H
		if 2*n >= total {
			return min(max(i+1, 1), len(rs)-1)
		}
	}
	return len(rs) / 2
}

func area(rs []Rect) int {
	n := 0
	for _, r := range rs {
		n += r.W * r.H
	}
	return n
}

// appendRects appends each rectangle's header and body in encoding, and
// returns how many rectangles it wrote; with sh, whole tiles come from
// (or go to) the shared cache. In Tight without sh, a run of rectangles
// side by side in a row that all go JPEG is sent as one
// (appendTightMerged).
func (e *encoder) appendRects(dst []byte, f *Frame, rects []Rect, encoding int32, sh *sharing) ([]byte, int) {
	if encoding == EncTight && sh == nil && e.quality >= 0 {
		return e.appendTightMerged(dst, f, rects)
	}
	if sh != nil {
		return e.appendShared(dst, f, rects, sh)
	}
	for _, r := range rects {
		dst = appendRectHeader(dst, r, encoding)
		start := len(dst)
		switch encoding {
		case EncTight:
			dst = e.encodeTight(dst, f, r)
			e.noteLossy(dst[start:], r)
		case EncZRLE:
			dst = e.encodeZRLE(dst, f, r)
		case EncZlib:
			dst = e.encodeZlib(dst, f, r)
		default:
			dst = e.encodeRaw(dst, f, r)
		}
	}
	return dst, len(rects)
}

func appendRectHeader(dst []byte, r Rect, encoding int32) []byte {
	be := binary.BigEndian
	dst = be.AppendUint16(dst, uint16(r.X))
	dst = be.AppendUint16(dst, uint16(r.Y))
	dst = be.AppendUint16(dst, uint16(r.W))
	dst = be.AppendUint16(dst, uint16(r.H))
	return be.AppendUint32(dst, uint32(encoding))
}

// mergeJPEGWidth bounds a merged JPEG rectangle: Tight's 2048-pixel
// width, and 1280x64 (a row of tiles of a common screen) at most.
const mergeJPEGWidth = 1280

// appendTightMerged is appendRects for Tight with JPEG: a JPEG carries
// some 600 bytes of tables and headers, more than the data of a 64x64
// tile of smooth gradient (a frame of the bench's 30 fps canvas was 173
// KB with each JPEG tile a rectangle, 49 KB with rows merged), and noVNC
// decodes one image a rectangle. So rectangles that go JPEG, side by
// side in one row of tiles (same Y and height, each starting where the
// last ends), are sent as one.
func (e *encoder) appendTightMerged(dst []byte, f *Frame, rects []Rect) ([]byte, int) {
	n := 0
	var run Rect // JPEG rectangles merged, not yet written
	for _, r := range rects {
		photo, few := e.classify(f, r)
		switch {
		case !photo:
			// The run first (its JPEG leaves r's palette in e.colours).
			dst, n = e.appendJPEGRect(dst, f, run, n)
			run = Rect{}
			dst = appendRectHeader(dst, r, EncTight)
			dst = e.encodeTightAs(dst, f, r, few)
			n++
		case !run.Empty() && r.continues(run) && run.W+r.W <= mergeJPEGWidth:
			run.W += r.W
		default:
			dst, n = e.appendJPEGRect(dst, f, run, n)
			run = r
		}
	}
	return e.appendJPEGRect(dst, f, run, n)
}

// appendShared is appendRects in Tight for viewers that share tiles:
// whole tiles come from the cache or are encoded independently and put
// there; a run of whole tiles side by side that go JPEG is one
// rectangle and one cache entry, at the index of its first tile (with
// every tile its own JPEG, a second viewer made each frame of the
// bench's video 181 KB instead of 103, and noVNC showed 20 fps of 56).
func (e *encoder) appendShared(dst []byte, f *Frame, rects []Rect, sh *sharing) ([]byte, int) {
	n := 0
	for i := 0; i < len(rects); {
		r := rects[i]
		if sh.versions[i] == 0 { // not a whole tile: this viewer's own
			dst = appendRectHeader(dst, r, EncTight)
			start := len(dst)
			dst = e.encodeTight(dst, f, r)
			e.noteLossy(dst[start:], r)
			i, n = i+1, n+1
			continue
		}
		// The tiles right of r in this update, whole, in order.
		k := 1
		for k < len(rects)-i && sh.versions[i+k] != 0 && sh.idx[i+k] == sh.idx[i]+k &&
			rects[i+k].Y == r.Y && rects[i+k].X == r.X+k*tile && (k+1)*tile <= mergeJPEGWidth {
			k++
		}
		if body, m, ok := sh.cache.get(sh.idx[i], sh.versions[i:i+k], sh.key); ok {
			run := joinRow(rects[i : i+m])
			dst = appendRectHeader(dst, run, EncTight)
			start := len(dst)
			dst = append(dst, body...)
			e.noteLossy(dst[start:], run)
			i, n = i+m, n+1
			continue
		}
		photo, few := e.classify(f, r)
		m := 1
		if photo {
			for m < k {
				if p, _ := e.classify(f, rects[i+m]); !p {
					break
				}
				m++
			}
		}
		run := joinRow(rects[i : i+m])
		dst = appendRectHeader(dst, run, EncTight)
		start := len(dst)
		if photo {
			dst = e.tightJPEG(dst, f, run)
		} else {
			dst = e.encodeTightAs(dst, f, r, few)
		}
		sh.cache.put(sh.idx[i], sh.versions[i:i+m], sh.key, bytes.Clone(dst[start:]))
		e.noteLossy(dst[start:], run)
		i, n = i+m, n+1
	}
	return dst, n
}

// joinRow returns the rectangle that rects, side by side in a row, make.
func joinRow(rects []Rect) Rect {
	r := rects[0]
	last := rects[len(rects)-1]
	r.W = last.X + last.W - r.X
	return r
}

// appendJPEGRect appends r as a Tight JPEG rectangle unless it is empty,
// and returns n counting it.
func (e *encoder) appendJPEGRect(dst []byte, f *Frame, r Rect, n int) ([]byte, int) {
	if r.Empty() {
		return dst, n
	}
	dst = appendRectHeader(dst, r, EncTight)
	start := len(dst)
	dst = e.tightJPEG(dst, f, r)
	e.noteLossy(dst[start:], r)
	return dst, n + 1
}

// appendCursor writes the Cursor pseudo-rectangle (RFC 6143 §7.8.1): x, y
// the hotspot, w, h the size; then w*h PIXELs and a 1-bit opacity mask,
// rows padded to a byte, most significant bit first.
func (c *client) appendCursor(dst []byte, cur *cursorShape) []byte {
	be := binary.BigEndian
	b := cur.img.Bounds()
	w, h := b.Dx(), b.Dy()
	dst = be.AppendUint16(dst, uint16(cur.hot.X))
	dst = be.AppendUint16(dst, uint16(cur.hot.Y))
	dst = be.AppendUint16(dst, uint16(w))
	dst = be.AppendUint16(dst, uint16(h))
	enc := int32(EncCursor)
	dst = be.AppendUint32(dst, uint32(enc))
	pix := cur.img.Pix
	for i := 0; i < w*h; i++ {
		dst = c.enc.pw.put(dst, uint32(pix[4*i])<<16|uint32(pix[4*i+1])<<8|uint32(pix[4*i+2]))
	}
	for y := 0; y < h; y++ {
		var m byte
		bits := 0
		for x := 0; x < w; x++ {
			m <<= 1
			if pix[4*(y*w+x)+3] >= 128 {
				m |= 1
			}
			if bits++; bits == 8 {
				dst, m, bits = append(dst, m), 0, 0
			}
		}
		if bits > 0 {
			dst = append(dst, m<<(8-bits))
		}
	}
	return dst
}
