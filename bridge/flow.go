package bridge

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Continuous updates and fences (rfbproto "ContinuousUpdates" -313,
// "Fence" -312). A viewer taking both is told the server can push
// updates (EndOfContinuousUpdates, u8 150); once it enables them
// (EnableContinuousUpdates, u8 150, u8 enable, u16 x, y, w, h) it sends
// no more requests, and the server sends an update whenever its area
// changes and congestion control has room (congestion.go): after a
// pushed update it sends a fence request, whose answer says the viewer
// has taken in everything before it. Small updates go unfenced until
// fenceMinBytes have gone out since the last fence, fenceMaxGap has
// passed or the window is full: the answer to a fence covers every
// update before it, and each answer wakes deskd (noVNC answers at once;
// a fence after every keystroke's 150-byte update cost 7% of deskd's
// CPU while typing, one every 100 ms still 4%). The viewer's own fence
// requests are answered in order with the flags we honour.
const (
	fenceBlockBefore = 1 << 0
	fenceBlockAfter  = 1 << 1
	fenceSyncNext    = 1 << 2
	fenceRequest     = 1 << 31
	fenceFlags       = fenceBlockBefore | fenceBlockAfter | fenceSyncNext

	maxFenceQueue = 16 // fence requests from a viewer not yet answered

	// What may go out unfenced: the bytes (congestion control learns
	// little from smaller updates), and the time (a fence answer is
	// also the round trip it measures).
	fenceMinBytes = 16 << 10
	fenceMaxGap   = 250 * time.Millisecond
)

// flow is a viewer's continuous-update state, guarded by c.mu.
type flow struct {
	offered  bool // it takes both pseudo-encodings
	eocuDue  bool // EndOfContinuousUpdates owed (offer, or end)
	enabled  bool
	area     Rect
	seq      uint32
	replies  [][]byte  // fence answers owed, as whole messages
	unfenced int       // bytes pushed since the last fence request
	fenced   time.Time // when the last fence request went
}

// appendFence appends a Fence message.
func appendFence(dst []byte, flags uint32, payload []byte) []byte {
	dst = append(dst, msgServerFence, 0, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, flags)
	dst = append(dst, byte(len(payload)))
	return append(dst, payload...)
}

// setEncodingsFlow notes whether the viewer can take pushed updates.
// Callers hold c.mu.
func (c *client) setEncodingsFlow(cu, fence bool) {
	if cu && fence && !c.flow.offered {
		c.flow.offered, c.flow.eocuDue = true, true
	}
}

// enableContinuous handles EnableContinuousUpdates.
func (c *client) enableContinuous(m ClientMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.flow.offered {
		return fmt.Errorf("%w: EnableContinuousUpdates without the pseudo-encodings", ErrProtocol)
	}
	// Answers come another way from now on (fences, or requests): what
	// awaits one of the old way is taken as answered.
	c.cong.pings, c.cong.acked = c.cong.pings[:0], c.cong.pos
	if m.Incremental { // the enable flag
		c.flow.enabled, c.flow.area = true, m.Rect
		c.s.log.Debug("viewer takes continuous updates", "area", m.Rect)
	} else {
		c.flow.enabled = false
		c.flow.eocuDue = true // the spec asks for one when they end
	}
	c.poke()
	return nil
}

// fence handles a viewer's Fence: a request is answered in order; an
// answer acknowledges what went before our request, and wakes the
// writer only if it was waiting for room.
func (c *client) fence(m ClientMessage) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m.Flags&fenceRequest != 0 {
		if len(c.flow.replies) >= maxFenceQueue {
			return fmt.Errorf("%w: more than %d fence requests unanswered", ErrProtocol, maxFenceQueue)
		}
		c.flow.replies = append(c.flow.replies, appendFence(nil, m.Flags&fenceFlags, m.Payload))
		c.poke()
		return nil
	}
	if len(c.cong.pings) == 0 {
		return nil // an answer to no request of ours
	}
	held := !c.cong.room()
	c.answered()
	if held && c.cong.room() {
		// Only then: noVNC answers every fence, and waking the writer
		// for nothing was a thread switch an update.
		c.poke()
	}
	return nil
}

// flowMessages appends what the writer owes outside updates: fence
// answers and EndOfContinuousUpdates. Callers hold c.mu.
func (c *client) flowMessages(dst []byte) []byte {
	for _, r := range c.flow.replies {
		dst = append(dst, r...)
	}
	c.flow.replies = c.flow.replies[:0]
	if c.flow.eocuDue {
		dst = append(dst, msgEndOfContUpdates)
		c.flow.eocuDue = false
	}
	return dst
}

// pushing reports whether an update may be sent without a request, and
// for which area. Callers hold c.mu.
func (c *client) pushing() (Rect, bool) {
	if !c.flow.enabled || !c.cong.room() {
		return Rect{}, false
	}
	return c.flow.area, true
}

// pushed returns the fence request that follows a pushed update and
// notes it as a ping. Callers hold c.mu.
func (c *client) pushed(now time.Time) []byte {
	c.flow.seq++
	c.cong.ping(now)
	return appendFence(nil, fenceRequest|fenceBlockBefore, binary.BigEndian.AppendUint32(nil, c.flow.seq))
}

// fenceDue notes a pushed update of n bytes going out at now and
// reports whether a fence request follows it: enough bytes or time
// since the last one, or a window the update fills (the answer is then
// what frees it).
func (f *flow) fenceDue(n int, now time.Time, full bool) bool {
	f.unfenced += n
	if f.unfenced < fenceMinBytes && now.Sub(f.fenced) < fenceMaxGap && !full {
		return false
	}
	f.unfenced, f.fenced = 0, now
	return true
}
