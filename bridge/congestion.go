package bridge

import (
	"math"
	"time"
)

// Congestion control: one mechanism decides how much a viewer may have
// in flight and at what JPEG quality it is sent.
//
// Every update is answered: under continuous updates by the viewer's
// answer to a fence request that follows it (fenceBlockBefore: after it
// has processed what came before; small updates share a fence, see
// flow.go), otherwise by the viewer's next FramebufferUpdateRequest.
// An answer says that every byte before its request has been taken in:
// it measures a round trip through the link and the viewer's decoder,
// and with the answer before it a delivery rate (bytes taken in over
// the time between the two, never less than the time between sending
// them: two answers read back to back say nothing about the link).
//
//   - minRTT is the path's delay: the smallest round trip, less the
//     update's own transmission at the delivery rate, of a fence sent
//     with nothing else in flight. Pipelined for minRTTWindow, the next
//     update goes alone to measure it again (BBR's ProbeRTT).
//   - rate is the delivery rate the path gives when it is full: answers
//     to fences sent behind other unanswered updates that come further
//     apart than the fences went came as fast as the path delivers, and
//     so does an update sent alone (its bytes over its round trip less
//     minRTT); those samples move the estimate, any other may only raise
//     it (the sender had nothing more to send, as on a still screen,
//     which says nothing of the path), as BBR does.
//   - window (bytes in flight) is windowGain × rate × minRTT, the bandwidth-delay
//     product with a margin for answers that come in bursts, plus one
//     large update: a long fast link gets every frame the page draws,
//     pipelined; a narrow one holds one update waiting behind the one
//     crossing it, the newest picture, never a queue of old ones. Until
//     answers show the path's rate (the start), the window grows by what
//     is answered while it holds updates back, as TCP's slow start.
//   - quality: an update as big as recent large ones must cross the
//     path in slowUpdate at most; if it takes longer the next updates
//     go a step lower on rateLadder; when a step up would still cross
//     in time, the level goes back up, a step per recoverAfter.
//
// TigerVNC (Vegas on fence round trips) and BBR are the models. The
// quality rule is relative to the path (time for a frame at its rate),
// not an absolute round trip: a 150 ms link at 100 Mbit/s keeps the
// viewer's level; a 250 ms answer no longer lowers it for good.
type congestion struct {
	pos     int64  // bytes of updates sent so far
	acked   int64  // the position the latest answer covers
	pings   []ping // unanswered, oldest first
	minRTT  time.Duration
	minAt   time.Time // when minRTT was seen
	rate    float64   // bytes a second
	trusted bool      // answers have shown the path's rate (the start is over)
	limited bool      // the window held an update back since the last answer
	probing bool      // the next update goes alone, to measure minRTT
	ackAt   time.Time // the latest answer
	sentAt  time.Time // when its request went
	window  int64

	drop      int       // levels below the viewer's own
	big       float64   // bytes of a large update lately (moving average)
	downAt    time.Time // no step down before this (the last one acting)
	upAt      time.Time // no step up before this
	rateSeen  int       // answers that gave a rate sample
	pathSeen  bool      // one of them was limited by the path
	pipelined bool      // an answer came to an update sent behind others
}

// ping is a request for an answer: a fence, or an update sent on a
// FramebufferUpdateRequest.
type ping struct {
	pos   int64
	at    time.Time
	ahead int64 // bytes unanswered when it went, its own update's included
	own   int64 // bytes since the ping before it
}

const (
	initialWindow = 64 << 10
	minWindow     = 16 << 10
	maxWindow     = 16 << 20
	maxPings      = 64 // answers awaited; more means the viewer does not answer
	minRTTWindow  = 10 * time.Second
	windowGain    = 1.5
	// slowUpdate: the longest a large update should take on the path;
	// 10 a second is where motion stops looking like motion.
	slowUpdate = 100 * time.Millisecond
	// rateMinBytes: smaller updates do not count as large (a keystroke).
	rateMinBytes = 32 << 10
	// sampleMinBytes: an update sent alone measures the path's rate
	// from this size; a smaller one's round trip is its delay.
	sampleMinBytes = 8 << 10
	// stepRatio: how much larger an update gets a step up the ladder
	// (measured on photo tiles: 29 -> 62 -> 86 grows 1.4-1.6x a step).
	stepRatio    = 1.6
	recoverAfter = time.Second
	rateFloor    = 1 // the lowest level it lowers to (JPEG quality 29)
	// tentativeAnswers: answers after which the quality follows a rate
	// no answer showed the path limiting (a viewer that asks for each
	// update, each large, never shows its path's delay).
	tentativeAnswers = 4
)

func newCongestion() congestion { return congestion{window: initialWindow} }

// sent notes n bytes of an update going out, of which video bytes of
// H.264 (they do not count for the JPEG level: a key frame is not the
// size of motion).
func (c *congestion) sent(n, video int) {
	first := c.pos == 0
	c.pos += int64(n)
	if n -= video; n >= rateMinBytes && !first { // (the first is the whole screen: no measure of motion)
		if c.big == 0 {
			c.big = float64(n)
		} else {
			c.big += (float64(n) - c.big) / 4
		}
	}
}

// ping notes a request for an answer covering everything sent so far.
func (c *congestion) ping(now time.Time) {
	if len(c.pings) == maxPings {
		c.pings = append(c.pings[:0], c.pings[1:]...) // never answered: forget the oldest
	}
	own := c.pos - c.acked
	if n := len(c.pings); n > 0 {
		own = c.pos - c.pings[n-1].pos
	}
	c.pings = append(c.pings, ping{pos: c.pos, at: now, ahead: c.pos - c.acked, own: own})
}

// held notes that an update waits for room.
func (c *congestion) held() { c.limited = true }

// inFlight is what has been sent and not yet answered for.
func (c *congestion) inFlight() int64 { return c.pos - c.acked }

// room reports whether another update may go: the window has room, or
// nothing awaits an answer (an update larger than the window still goes,
// alone).
func (c *congestion) room() bool {
	return len(c.pings) == 0 || !c.probing && c.inFlight() < c.window
}

// answer notes the answer to the oldest ping, at now, for a viewer that
// asked for quality level q, and reports whether the level it is sent
// at changed.
func (c *congestion) answer(now time.Time, q int) bool {
	if len(c.pings) == 0 {
		return false // an answer to nothing (a request before any update)
	}
	p := c.pings[0]
	c.pings = append(c.pings[:0], c.pings[1:]...)
	rtt := now.Sub(p.at)
	if p.ahead == p.own { // sent with nothing else in flight
		large := p.own >= sampleMinBytes
		if large {
			// Its bytes over the time it took beyond the path's delay
			// (before that is known, over the whole round trip: a long
			// path then looks narrower than it is, so the sample may
			// only raise the estimate, until a small update shows the
			// delay).
			cross := max(rtt-c.minRTT, time.Millisecond)
			c.sample(float64(p.own)/cross.Seconds(), c.minRTT > 0, c.minRTT == 0)
		}
		// The path's delay: the round trip of a small update, or of a
		// large one less its own transmission at a rate the path has
		// shown (a large update's transmission is not delay, and a
		// window sized on it holds a queue).
		delay, ok := rtt, !large
		if large && c.trusted {
			delay, ok = rtt-time.Duration(float64(p.own)/c.rate*float64(time.Second)), true
		}
		if ok {
			delay = max(delay, 100*time.Microsecond)
			if c.minRTT == 0 || delay <= c.minRTT || c.probing {
				c.minRTT, c.minAt = delay, now
			}
			c.probing = false
		}
	} else if !c.ackAt.IsZero() && p.pos > c.acked {
		c.pipelined = true
		// Pipelined: bytes answered over the time since the answer
		// before. Answers further apart than the sends came as fast as
		// the path delivers: that is its rate; closer, they say only
		// how fast we sent.
		ackGap, sendGap := now.Sub(c.ackAt), p.at.Sub(c.sentAt)
		limited := ackGap > sendGap
		c.sample(float64(p.pos-c.acked)/max(ackGap, sendGap, time.Millisecond).Seconds(), limited, false)
		if limited && !c.trusted {
			c.trusted = true
			c.probing = c.minRTT == 0 // the delay, now that the rate is known
		}
	}
	if c.trusted && now.Sub(c.minAt) > minRTTWindow && p.ahead != p.own {
		// Pipelined all along: the delay may have changed unseen. One
		// update alone is sent next to measure it (BBR's ProbeRTT).
		c.probing = true
	}
	newly := p.pos - c.acked
	c.acked = max(c.acked, p.pos)
	c.ackAt, c.sentAt = now, p.at
	switch {
	case !c.trusted || c.minRTT == 0:
		// The start: the window grows by what is answered while it
		// holds updates back (doubling a round trip), until answers
		// show the path's rate.
		if c.limited {
			c.window = min(c.window+max(newly, 0), maxWindow)
		}
	default:
		// The bandwidth-delay product with a margin, and room for one
		// large update more: a narrow path holds one update waiting
		// behind the one crossing it, never a queue of old ones.
		w := windowGain*c.rate*c.minRTT.Seconds() + c.big
		c.window = int64(min(max(w, minWindow), maxWindow))
	}
	c.limited = false
	return c.adjust(now, q)
}

// sample takes a delivery rate sample: one the path limited moves the
// estimate halfway to it (the first replaces what came before it); a
// tentative one (an update alone before the delay is known) does so
// only until then; any other only raises it.
func (c *congestion) sample(rate float64, pathLimited, tentative bool) {
	switch {
	case c.rate == 0 || pathLimited && !c.pathSeen:
		c.rate, c.pathSeen = rate, c.pathSeen || pathLimited
	case pathLimited || tentative && !c.pathSeen:
		c.rate += (rate - c.rate) / 2
	case rate > c.rate:
		c.rate = rate
	}
	c.rateSeen++
}

// adjust moves the quality level for a viewer that asked for q: see
// congestion. It reports whether the level changed.
func (c *congestion) adjust(now time.Time, q int) bool {
	if q < 0 || c.rateSeen < 2 || c.big == 0 || c.rate <= 0 {
		return false
	}
	takes := time.Duration(c.big / c.rate * float64(time.Second))
	switch {
	case takes > slowUpdate && c.measured() && c.drop < steps(q) && !now.Before(c.downAt):
		c.drop++
		// The next decision waits for updates at the new level to be
		// answered; the step up waits longer.
		c.downAt = now.Add(2*c.minRTT + slowUpdate)
		c.upAt = now.Add(recoverAfter)
		c.big /= stepRatio
		return true
	case c.drop > 0 && float64(takes)*stepRatio < float64(slowUpdate)*0.8 && !now.Before(c.upAt):
		c.drop--
		c.upAt = now.Add(recoverAfter)
		c.big *= stepRatio
		return true
	}
	return false
}

// measured reports whether the rate may lower the level: the path has
// shown its rate and its delay, or, for a viewer that asks for each
// update (none pipelined), a few answers came. At the start, a large
// update's round trip on a long path looks like a narrow path.
func (c *congestion) measured() bool {
	return c.pathSeen && c.minRTT > 0 || !c.pipelined && c.rateSeen >= tentativeAnswers
}

// bandwidth is the delivery rate in bits a second, for logs (NaN before
// any sample).
func (c *congestion) bandwidth() float64 {
	if c.rate == 0 {
		return math.NaN()
	}
	return 8 * c.rate
}

// rateLadder are the levels congestion control lowers to, in turn: each
// step a real change of JPEG quality (86, 62, 29; levels 5 and 6 are 77
// and 79), and few of them, so that viewers slowed alike still share
// tiles (shared only between equal settings).
var rateLadder = [...]int{7, 4, rateFloor}

// steps is how many steps down the ladder there are from level q.
func steps(q int) int {
	n := 0
	for _, l := range rateLadder {
		if l < q {
			n++
			q = l
		}
	}
	return n
}

// quality is the JPEG quality level to send at when the viewer asked
// for level q (-1: no JPEG, left alone): drop steps down the ladder.
func (c *congestion) quality(q int) int {
	if q < 0 {
		return q
	}
	level, n := q, 0
	for _, l := range rateLadder {
		if n == c.drop {
			break
		}
		if l < level {
			level = l
			n++
		}
	}
	return level
}

// answered is congestion.answer for this viewer, logged. Callers hold
// c.mu.
func (c *client) answered() {
	if c.cong.answer(time.Now(), c.quality) {
		c.s.log.Debug("viewer JPEG quality", "level", c.cong.quality(c.quality), "asked", c.quality,
			"mbit_s", c.cong.bandwidth()/1e6, "min_rtt", c.cong.minRTT, "window_kib", c.cong.window>>10)
	}
}
