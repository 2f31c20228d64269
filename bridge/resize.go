package bridge

import (
	"encoding/binary"
	"image"
	"slices"
	"time"
)

// ResizableScreen is a Screen whose size can change: viewers may set it
// (SetDesktopSize) and it may change by itself (SizeChanged).
type ResizableScreen interface {
	// Resize sets the size, clamped to what the screen allows, and
	// returns the size set.
	Resize(w, h int) (int, int, error)
	SizeChanged() <-chan image.Point
}

// ExtendedDesktopSize (rfbproto): a pseudo-rectangle whose x is the
// reason, y the status, w and h the new size; its body is u8
// number-of-screens, 3 pad, then per screen SCREEN (u32 id, u16 x, y, w,
// h, u32 flags). DesktopSize (RFC 6143 §7.8.2) is w and h alone, no body.
const (
	reasonServer      = 0 // the server changed the size
	reasonThisClient  = 1 // in answer to this viewer's SetDesktopSize
	reasonOtherClient = 2 // in answer to another viewer's

	resizeOK          = 0
	resizeProhibited  = 1 // e.g. a view-only viewer, or a screen of fixed size
	resizeNoResources = 2
	resizeInvalid     = 3
)

// sizeNote is a DesktopSize/ExtendedDesktopSize a viewer is owed.
type sizeNote struct {
	w, h           int // the new size (when changed)
	reason, status int
	changed        bool // the framebuffer changed size (else a reply or the first announcement)
}

// resizeReq is a viewer's SetDesktopSize, handled by the capture loop.
type resizeReq struct {
	w, h int
	from *client
}

// noteSize queues a size message for the viewer, keeping an unsent size
// change.
func (c *client) noteSize(n sizeNote) {
	c.mu.Lock()
	if c.size != nil && c.size.changed && !n.changed {
		n.w, n.h, n.changed = c.size.w, c.size.h, true
	}
	c.size = &n
	c.mu.Unlock()
	c.poke()
}

// resized tells the viewer the framebuffer is now w×h: everything is
// dirty, and its pending request covers the new size. Callers hold s.mu.
func (c *client) resized(w, h, reason int) {
	c.mu.Lock()
	c.dirty = newTiles(w, h)
	c.dirty.mark(Rect{0, 0, w, h})
	c.lossy = newTiles(w, h)
	c.markedGen = c.s.gen
	c.request = Rect{0, 0, w, h}
	c.size = &sizeNote{w: w, h: h, reason: reason, changed: true}
	c.copy = nil
	if c.flow.enabled {
		c.flow.area = Rect{0, 0, w, h}
	}
	c.mu.Unlock()
	c.poke()
}

// setDesktopSize handles a viewer's SetDesktopSize in the capture loop.
func (s *Server) setDesktopSize(req resizeReq, scratch **Frame) {
	rs, ok := s.screen.(ResizableScreen)
	if !ok {
		req.from.noteSize(sizeNote{reason: reasonThisClient, status: resizeProhibited})
		return
	}
	w, h, err := rs.Resize(req.w, req.h)
	if err != nil {
		s.log.Warn("resize refused", "w", req.w, "h", req.h, "err", err)
		req.from.noteSize(sizeNote{reason: reasonThisClient, status: resizeInvalid})
		return
	}
	if !s.applySize(w, h, req.from, scratch) {
		req.from.noteSize(sizeNote{reason: reasonThisClient, status: resizeOK})
	}
}

// applySize makes the framebuffer w×h, captured afresh, and tells every
// viewer; from is the viewer that asked for it, if any. It reports
// whether the size changed. Only the capture loop calls it.
func (s *Server) applySize(w, h int, from *client, scratch **Frame) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w == s.fb.W && h == s.fb.H {
		return false
	}
	fb := NewFrame(w, h)
	if err := s.screen.Capture(image.Rect(0, 0, w, h), fb.Pix, fb.Stride); err != nil {
		s.log.Warn("capture after resize failed", "err", err)
	}
	s.fb = fb
	s.video.mu.Lock()
	s.setRegion(Rect{}, time.Now().UnixNano()) // its streams were for the old screen
	s.video.mu.Unlock()
	s.bumpVersions()
	s.sums.reset(h)
	*scratch = NewFrame(w, h)
	for c := range s.clients {
		reason := reasonServer
		if from != nil {
			reason = reasonOtherClient
			if c == from {
				reason = reasonThisClient
			}
		}
		c.resized(w, h, reason)
	}
	s.log.Info("desktop resized", "w", w, "h", h)
	if s.cfg.OnResize != nil {
		s.cfg.OnResize(w, h)
	}
	return true
}

// appendSizeRect appends the size pseudo-rectangle the viewer takes for
// n, or reports false when it takes none (and so cannot follow a resize).
func (c *client) appendSizeRect(dst []byte, n sizeNote, encodings []int32) ([]byte, bool) {
	be := binary.BigEndian
	ext, plain := int32(EncExtendedDesktopSize), int32(EncDesktopSize)
	switch {
	case slices.Contains(encodings, EncExtendedDesktopSize):
		for _, v := range []int{n.reason, n.status, n.w, n.h} {
			dst = be.AppendUint16(dst, uint16(v))
		}
		dst = be.AppendUint32(dst, uint32(ext))
		dst = append(dst, 1, 0, 0, 0)
		dst = be.AppendUint32(dst, 0) // screen id
		for _, v := range []int{0, 0, n.w, n.h} {
			dst = be.AppendUint16(dst, uint16(v))
		}
		return be.AppendUint32(dst, 0), true // flags
	case slices.Contains(encodings, EncDesktopSize) && n.changed:
		for _, v := range []int{0, 0, n.w, n.h} {
			dst = be.AppendUint16(dst, uint16(v))
		}
		return be.AppendUint32(dst, uint32(plain)), true
	}
	return dst, false
}
