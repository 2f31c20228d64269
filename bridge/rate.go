package bridge

import "time"

// Rate control. Each update a viewer is sent is answered: by its next
// FramebufferUpdateRequest, or under continuous updates by its answer
// to the fence request that follows the update (fenceBlockBefore: after
// it has decoded the update). A big update answered slowly means the
// link or the viewer cannot keep up at this JPEG quality: the next
// updates go a step lower on rateLadder, down to rateFloor; quick
// answers in a row bring it back a step at a time to what the viewer
// asked for.
// Nothing queues meanwhile: a viewer is sent the newest pixels when it
// asks (or has a fence slot free), so frames in between are skipped.
// Small updates say nothing about bandwidth (a slow answer to them is
// latency), so they never lower the quality.
const (
	rateSlow     = 250 * time.Millisecond // an answer slower than this is slow
	rateFast     = 100 * time.Millisecond // and quicker than this, quick
	rateMinBytes = 32 << 10               // smaller updates do not lower quality
	rateFastRun  = 3                      // quick answers in a row to go up a level
	rateFloor    = 1                      // the lowest level it lowers to (JPEG quality 29)
	rateMaxSent  = maxInFlight + 2        // updates remembered until answered
)

// rateControl is a viewer's, guarded by c.mu.
type rateControl struct {
	unanswered []sentUpdate // oldest first
	drop       int          // levels below the viewer's own
	fast       int          // quick answers in a row
}

type sentUpdate struct {
	at    time.Time
	bytes int
}

// sent notes an update of n bytes that starts going out at now.
func (r *rateControl) sent(n int, now time.Time) {
	if len(r.unanswered) == rateMaxSent {
		// Answers that never came (a request for nothing new, a
		// viewer that pipelines): forget the oldest.
		r.unanswered = append(r.unanswered[:0], r.unanswered[1:]...)
	}
	r.unanswered = append(r.unanswered, sentUpdate{now, n})
}

// answered notes the viewer's answer to its oldest unanswered update, at
// now, and reports whether the level changed.
func (r *rateControl) answered(now time.Time) bool {
	if len(r.unanswered) == 0 {
		return false // a request before any update, or an extra one
	}
	u := r.unanswered[0]
	r.unanswered = append(r.unanswered[:0], r.unanswered[1:]...)
	took := now.Sub(u.at)
	switch {
	case took > rateSlow && u.bytes >= rateMinBytes:
		r.fast = 0
		r.drop++
		return true
	case took < rateFast:
		r.fast++
		if r.fast >= rateFastRun && r.drop > 0 {
			r.fast = 0
			r.drop--
			return true
		}
	default:
		r.fast = 0
	}
	return false
}

// rateLadder are the levels rate control lowers to, in turn: each step
// a real change of JPEG quality (86, 62, 29; levels 5 and 6 are 77 and
// 79), and few of them, so that viewers slowed alike still share tiles
// (shared only between equal settings).
var rateLadder = [...]int{7, 4, rateFloor}

// quality is the JPEG quality level to send at when the viewer asked
// for level q (-1: no JPEG, left alone): drop steps down the ladder.
func (r *rateControl) quality(q int) int {
	if q < 0 {
		return q
	}
	level, steps := q, 0
	for _, l := range rateLadder {
		if steps == r.drop {
			break
		}
		if l < level {
			level = l
			steps++
		}
	}
	r.drop = steps // no deeper than the floor: recovery starts at once
	return level
}

// answered is rateControl.answered for this viewer, logged. Callers
// hold c.mu.
func (c *client) answered() {
	if c.rate.answered(time.Now()) && c.quality >= 0 {
		c.s.log.Debug("viewer JPEG quality", "level", c.rate.quality(c.quality), "asked", c.quality)
	}
}
