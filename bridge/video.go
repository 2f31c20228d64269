package bridge

import (
	"bytes"
	"encoding/binary"
	"math"
	"sync"
	"time"
)

// Video mode: where a large part of the screen keeps changing (a video,
// an animation, a game), viewers that take RFB encoding 50 (Open H.264)
// get that part as H.264 pictures from an encoder child, and the rest of
// the screen as before. Still content (text, a scrolled page, typing)
// never qualifies: a tile must change at some 17 times a second or more,
// sustained, and the moving tiles must fill a fifth of the screen.
//
// One stream encodes the region for all viewers at the same quality
// tier: each viewer gets every picture since its last update (pictures
// reference the one before), concatenated into one rectangle; noVNC
// decodes them all and shows the last. A viewer that joins, or that fell
// further behind than the stream keeps, starts again from a key frame the
// stream makes for it.

// VideoEncoder encodes frames of one size as H.264 (h264enc's Encoder
// implements it).
type VideoEncoder interface {
	// Load takes the BGRX frame whose pixel (x, y) is at
	// pix[y*stride+4*x] for the next EncodeLoaded (it may change once
	// Load returns: the stream converts straight from the framebuffer,
	// under its lock, and encodes after).
	Load(pix []byte, stride int) error
	// EncodeLoaded appends the picture of that frame to dst as Annex-B
	// (SPS and PPS before a key frame), a key frame when key; it reports
	// whether it made one.
	EncodeLoaded(dst []byte, key bool) ([]byte, bool, error)
	Close() error
}

// Video mode's rule and bounds.
const (
	heatTau       = 500 * time.Millisecond // a tile's change count decays by e in this long
	hotScore      = 9                      // a tile changing ~17+ times a second, sustained, scores above
	videoMinShare = 5                      // the region is at least 1/videoMinShare of the screen
	videoMinFill  = 50                     // percent of the region's tiles that move
	videoMinSide  = 16                     // and its sides are this long at least (one macroblock)
	videoSettle   = 300 * time.Millisecond // a region holds this long before video starts there
	videoIdle     = 500 * time.Millisecond // no change in the region this long ends it
	videoRing     = 32                     // pictures a stream keeps for viewers behind
	streamLinger  = 3 * time.Second        // a stream nobody follows stops after this
	videoRetry    = 10 * time.Second       // after an encoder failed, no new one before this
	videoDown     = time.Second            // a viewer's stream goes a tier down at most this often
	videoUp       = 5 * time.Second        // and up only after this long at its tier
	videoUpMax    = 80 * time.Second       // the longest wait for a trial a tier up
	// The window holding pictures back for heldLong (no break of
	// heldBreak) says the path does not carry the stream; shorter, the
	// viewer stopped for a moment (its page busy).
	heldLong      = time.Second
	heldBreak     = 250 * time.Millisecond
	h264ResetThis = 1 // encoding 50's flags: reset this rectangle's decoder
)

// motion is the capture loop's account of which tiles keep changing.
type motion struct {
	score  []float32 // per tile, at at[i]
	at     []int64   // unix nanoseconds
	cols   int
	w, h   int
	cand   Rect    // a region found, not yet settled
	candAt int64   // since when
	hot    []bool  // scratch: per tile, hot and not yet in a group
	group  []int32 // scratch: tiles of a group to look around
	// members and best are scratch: the tiles of the group being
	// flooded and of the largest so far.
	members, best []int32
	// settled is the tile box the current region was settled from
	// (empty: no region); a region is the part of it seen changing.
	settled Rect
	// watched is a candidate whose pixels are followed while it settles
	// (prev: its edge bands' pixels at the last capture, rows packed; see
	// watch), exact the part of it seen changing since: the region it
	// becomes is that, not the
	// tiles (a 960x540 video on the screen's tile grid was 1024x640, a
	// quarter more for the encoder, all of it still).
	watched, exact Rect
	prev           []byte
}

// heat notes the tiles of changed (a capture's changed tiles) at now and
// returns the region that qualifies now (empty when none).
func (m *motion) heat(changed []Rect, w, h int, now int64) Rect {
	cols, rows := (w+tile-1)/tile, (h+tile-1)/tile
	if m.w != w || m.h != h {
		*m = motion{score: make([]float32, cols*rows), at: make([]int64, cols*rows), cols: cols, w: w, h: h}
	}
	for _, r := range changed {
		for ty := r.Y / tile; ty <= (r.Y+r.H-1)/tile; ty++ {
			for tx := r.X / tile; tx <= (r.X+r.W-1)/tile; tx++ {
				i := ty*cols + tx
				m.score[i] = m.decayed(i, now) + 1
				m.at[i] = now
			}
		}
	}
	// The largest group of hot tiles (touching, diagonals included):
	// a page's other moving bits (a clock, a spinner, a caret) are not
	// part of its video, and a box around all of them would encode the
	// still page between (a frame tag below the bench's video grew the
	// region by half).
	if len(m.hot) != len(m.score) {
		m.hot, m.group = make([]bool, len(m.score)), make([]int32, 0, len(m.score))
	}
	for i := range m.score {
		m.hot[i] = m.score[i] >= hotScore && m.decayed(i, now) >= hotScore
	}
	var best Rect // in tiles
	bestN := 0
	for i := range m.hot {
		if !m.hot[i] {
			continue
		}
		// Flood the group from i, clearing its tiles as they are taken.
		x0, y0, x1, y1, n := cols, rows, -1, -1, 0
		m.group = append(m.group[:0], int32(i))
		m.members = m.members[:0]
		m.hot[i] = false
		for len(m.group) > 0 {
			j := int(m.group[len(m.group)-1])
			m.group = m.group[:len(m.group)-1]
			m.members = append(m.members, int32(j))
			tx, ty := j%cols, j/cols
			x0, y0, x1, y1, n = min(x0, tx), min(y0, ty), max(x1, tx), max(y1, ty), n+1
			for dy := -1; dy <= 1; dy++ {
				for dx := -1; dx <= 1; dx++ {
					if nx, ny := tx+dx, ty+dy; nx >= 0 && ny >= 0 && nx < cols && ny < rows && m.hot[ny*cols+nx] {
						m.hot[ny*cols+nx] = false
						m.group = append(m.group, int32(ny*cols+nx))
					}
				}
			}
		}
		if n > bestN {
			best, bestN = Rect{x0, y0, x1 - x0 + 1, y1 - y0 + 1}, n
			m.best, m.members = m.members, m.best
		}
	}
	if bestN == 0 {
		return Rect{}
	}
	best, bestN = trimEdges(best, m.best, cols)
	r := Rect{best.X * tile, best.Y * tile, min((best.X+best.W)*tile, w) - best.X*tile, min((best.Y+best.H)*tile, h) - best.Y*tile}
	r.W, r.H = r.W&^1, r.H&^1 // 4:2:0: even sides (a last odd column or row goes as before)
	if 100*bestN < videoMinFill*best.W*best.H || videoMinShare*r.W*r.H < w*h || r.W < videoMinSide || r.H < videoMinSide {
		return Rect{}
	}
	return r
}

// trimEdges drops the box's edge rows and columns (in tiles) where fewer
// than half the tiles belong to the group (tiles, indices in rows of
// cols), and returns the box and its tiles left: a bit of the page that
// moves beside a video and touches it (the bench's frame tag at a
// corner) is not part of it, and took two rows of still page in.
func trimEdges(box Rect, tiles []int32, cols int) (Rect, int) {
	in := func(x0, y0, x1, y1 int) int { // the group's tiles in [x0,x1]x[y0,y1]
		n := 0
		for _, j := range tiles {
			if tx, ty := int(j)%cols, int(j)/cols; tx >= x0 && tx <= x1 && ty >= y0 && ty <= y1 {
				n++
			}
		}
		return n
	}
	for trimmed := true; trimmed && !box.Empty(); {
		trimmed = false
		x0, y0, x1, y1 := box.X, box.Y, box.X+box.W-1, box.Y+box.H-1
		switch {
		case 2*in(x0, y0, x1, y0) < box.W:
			box.Y, box.H = box.Y+1, box.H-1
		case 2*in(x0, y1, x1, y1) < box.W:
			box.H--
		case 2*in(x0, y0, x0, y1) < box.H:
			box.X, box.W = box.X+1, box.W-1
		case 2*in(x1, y0, x1, y1) < box.H:
			box.W--
		default:
			continue
		}
		trimmed = true
	}
	if box.Empty() {
		return box, 0
	}
	return box, in(box.X, box.Y, box.X+box.W-1, box.Y+box.H-1)
}

// watch follows the pixels of found, the region heat found, while it is
// a candidate: exact grows to take in every pixel of it that differs
// from the capture before (fb: the framebuffer after this capture). Only
// bands a tile deep along found's four edges are followed (watchBands):
// after trimEdges every edge row and column of tiles holds moving tiles,
// so the outermost changing pixels lie in them, and a 4096x4096 screen
// costs 4 MiB of copies, not 64.
func (m *motion) watch(found Rect, fb *Frame) {
	if found.Empty() || found == m.settled {
		m.watched, m.exact, m.prev = Rect{}, Rect{}, nil
		return
	}
	bands := watchBands(found)
	if found != m.watched {
		m.watched, m.exact = found, Rect{}
		n := 0
		for _, b := range bands {
			n += 4 * b.W * b.H
		}
		if cap(m.prev) < n {
			m.prev = make([]byte, n)
		}
		m.prev = m.prev[:n]
		at := 0
		for _, b := range bands {
			for y := b.Y; y < b.Y+b.H; y++ {
				o := y*fb.Stride + 4*b.X
				at += copy(m.prev[at:], fb.Pix[o:o+4*b.W])
			}
		}
		return
	}
	// Bounds so far (x1, y1 exclusive); a row only needs looking at
	// outside them.
	x0, x1, y0, y1 := found.X+found.W, found.X, found.Y+found.H, found.Y
	if e := m.exact; !e.Empty() {
		x0, x1, y0, y1 = e.X, e.X+e.W, e.Y, e.Y+e.H
	}
	at := 0
	for _, b := range bands {
		row := 4 * b.W
		for y := b.Y; y < b.Y+b.H; y++ {
			o := y*fb.Stride + 4*b.X
			was, now := m.prev[at:at+row], fb.Pix[o:o+row]
			at += row
			if bytes.Equal(was, now) {
				continue
			}
			y0, y1 = min(y0, y), max(y1, y+1)
			for x := b.X; x < min(x0, b.X+b.W); x++ {
				if i := 4 * (x - b.X); !bytes.Equal(was[i:i+4], now[i:i+4]) {
					x0 = x
					break
				}
			}
			for x := b.X + b.W - 1; x >= max(x1, b.X); x-- {
				if i := 4 * (x - b.X); !bytes.Equal(was[i:i+4], now[i:i+4]) {
					x1 = x + 1
					break
				}
			}
			copy(was, now)
		}
	}
	if x1 > x0 && y1 > y0 {
		m.exact = Rect{x0, y0, x1 - x0, y1 - y0}
	}
}

// watchBands are the bands of r watch follows: a tile deep along each
// edge (overlapping where r is narrow).
func watchBands(r Rect) [4]Rect {
	dw, dh := min(tile, r.W), min(tile, r.H)
	side := max(r.H-2*dh, 0) // the left and right bands' height
	return [4]Rect{
		{r.X, r.Y, r.W, dh},            // top
		{r.X, r.Y + r.H - dh, r.W, dh}, // bottom
		{r.X, r.Y + dh, dw, side},      // left, between them
		{r.X + r.W - dw, r.Y + dh, dw, side},
	}
}

// refined is the region a settled candidate gives: the part of it seen
// changing, with even sides (4:2:0; grown within found, or cut), or
// found itself when that is too small or unknown.
func (m *motion) refined(found Rect) Rect {
	e := m.exact.Intersect(found)
	if m.watched != found || e.Empty() {
		return found
	}
	e.X, e.W = evenSpan(e.X, e.W, found.X, found.X+found.W)
	e.Y, e.H = evenSpan(e.Y, e.H, found.Y, found.Y+found.H)
	if e.W < videoMinSide || e.H < videoMinSide {
		return found
	}
	return e
}

// evenSpan makes the span of n from at even: one more at its end when
// that stays before hi, else one more at its start when that stays at
// lo or after, else one less.
func evenSpan(at, n, lo, hi int) (int, int) {
	switch {
	case n%2 == 0:
		return at, n
	case at+n < hi:
		return at, n + 1
	case at > lo:
		return at - 1, n + 1
	}
	return at, n - 1
}

func (m *motion) decayed(i int, now int64) float32 {
	if m.score[i] == 0 {
		return 0
	}
	return m.score[i] * float32(math.Exp(-float64(now-m.at[i])/float64(heatTau)))
}

// settle takes the region heat found at now and returns the one video
// mode should use: a new region only after it held for videoSettle.
func (m *motion) settle(found, current Rect, now int64) (Rect, bool) {
	if current.Empty() {
		m.settled = Rect{} // ended (still for videoIdle)
	}
	if found.Empty() || found == m.settled {
		m.cand = Rect{}
		return current, false
	}
	if found != m.cand {
		m.cand, m.candAt = found, now
		return current, false
	}
	if now-m.candAt < int64(videoSettle) {
		return current, false
	}
	m.cand, m.settled = Rect{}, found
	r := m.refined(found)
	m.watched, m.exact, m.prev = Rect{}, Rect{}, nil
	return r, true
}

// video is the server's video mode: the region and its streams.
type video struct {
	mu          sync.Mutex // guards the fields below; taken after c.mu, never before
	region      Rect
	lastMove    int64 // last change in the region
	streams     map[int]*vstream
	brokenUntil int64 // an encoder failed: none is started before this
}

// videoTier is the stream quality a viewer's JPEG quality level gets:
// four tiers, so viewers share streams and a quality that moves by a
// level does not start a new stream each time.
func videoTier(quality int) int {
	switch {
	case quality <= 2:
		return 1
	case quality <= 4:
		return 4
	case quality <= 7:
		return 6
	}
	return 8
}

// noteMotion is the capture loop's: it feeds the changed tiles of a
// capture to the rule, moves the region when it settled elsewhere, and
// has the streams encode when the region changed.
func (s *Server) noteMotion(changed []Rect, now time.Time) {
	ns := now.UnixNano()
	found := s.motion.heat(changed, s.fb.W, s.fb.H, ns)
	s.motion.watch(found, s.fb) // only this goroutine writes s.fb
	v := &s.video
	v.mu.Lock()
	defer v.mu.Unlock()
	if next, ok := s.motion.settle(found, v.region, ns); ok {
		s.setRegion(next, ns)
	}
	if v.region.Empty() {
		return
	}
	moved := false
	for _, r := range changed {
		if !r.Intersect(v.region).Empty() {
			moved = true
			break
		}
	}
	if !moved {
		return
	}
	v.lastMove = ns
	for _, st := range v.streams {
		st.mu.Lock()
		followed := len(st.viewers) > 0
		st.mu.Unlock()
		if followed { // a stream nobody follows waits, idle, to stop
			st.kickEncoder()
		}
	}
}

// videoIdleCheck ends video mode once the region has been still for
// videoIdle; it returns when to check again (0: no region).
func (s *Server) videoIdleCheck(now time.Time) time.Duration {
	v := &s.video
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.region.Empty() {
		return 0
	}
	if left := time.Duration(v.lastMove + int64(videoIdle) - now.UnixNano()); left > 0 {
		return left
	}
	s.setRegion(Rect{}, now.UnixNano())
	return 0
}

// setRegion moves video mode to r (empty: ends it) and stops the streams
// of the old region. Callers hold s.video.mu.
func (s *Server) setRegion(r Rect, now int64) {
	v := &s.video
	if r == v.region {
		return
	}
	if !r.Empty() {
		s.log.Debug("video region", "x", r.X, "y", r.Y, "w", r.W, "h", r.H)
	} else {
		s.log.Debug("video region ends")
	}
	for tier, st := range v.streams {
		delete(v.streams, tier)
		st.close()
	}
	v.region, v.lastMove = r, now
}

// streamFor returns the stream of the current region at tier, starting
// it, or nil when there is no region or encoders are failing.
func (s *Server) streamFor(tier int) *vstream {
	v := &s.video
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.region.Empty() || time.Now().UnixNano() < v.brokenUntil {
		return nil
	}
	if st := v.streams[tier]; st != nil {
		return st
	}
	if v.streams == nil {
		v.streams = map[int]*vstream{}
	}
	st := &vstream{s: s, region: v.region, tier: tier, kick: make(chan struct{}, 1), stop: make(chan struct{}),
		viewers: map[*client]struct{}{}}
	v.streams[tier] = st
	s.wg.Add(1)
	go st.run()
	return st
}

// vstream is one encoder's pictures of the region at one tier.
type vstream struct {
	s      *Server
	region Rect
	tier   int
	kick   chan struct{} // the region changed: encode it
	stop   chan struct{} // closed when the region moved on

	mu      sync.Mutex // guards the fields below
	pics    []videoPic // the last videoRing pictures, oldest first
	seq     uint64     // the last picture's number (pictures count from 1)
	wantKey bool
	closed  bool
	viewers map[*client]struct{}
	alone   time.Time // when the last viewer left
}

type videoPic struct {
	seq  uint64
	key  bool
	data []byte
	at   time.Time
}

// rate is the stream's bytes a second over the pictures it keeps (0
// until it has two). Callers hold st.mu.
func (st *vstream) rate() float64 {
	if len(st.pics) < 2 {
		return 0
	}
	n := 0
	for _, p := range st.pics[1:] {
		n += len(p.data)
	}
	d := st.pics[len(st.pics)-1].at.Sub(st.pics[0].at)
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func (st *vstream) kickEncoder() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// close stops the stream; its viewers are poked to leave it.
func (st *vstream) close() {
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	st.closed = true
	close(st.stop)
	viewers := make([]*client, 0, len(st.viewers))
	for c := range st.viewers {
		viewers = append(viewers, c)
	}
	st.mu.Unlock()
	for _, c := range viewers {
		c.poke()
	}
}

// run owns the stream's encoder: it encodes the region whenever kicked.
func (st *vstream) run() {
	s := st.s
	defer s.wg.Done()
	w, h := st.region.W, st.region.H
	enc, err := s.cfg.Video(w, h, st.tier)
	if err != nil {
		st.fail(err)
		return
	}
	defer enc.Close()
	check := time.NewTicker(time.Second) // owned here
	defer check.Stop()
	var out []byte
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-st.stop:
			return
		case now := <-check.C:
			st.mu.Lock()
			idle := len(st.viewers) == 0 && now.Sub(st.alone) > streamLinger
			st.mu.Unlock()
			if idle {
				st.drop()
				return
			}
			continue
		case <-st.kick:
		}
		s.mu.RLock()
		r := st.region
		if r.X+r.W > s.fb.W || r.Y+r.H > s.fb.H { // resized: the region goes with it
			s.mu.RUnlock()
			continue
		}
		err := enc.Load(s.fb.Pix[r.Y*s.fb.Stride+4*r.X:], s.fb.Stride)
		s.mu.RUnlock()
		if err != nil {
			st.fail(err)
			return
		}
		st.mu.Lock()
		key := st.wantKey
		st.wantKey = false
		st.mu.Unlock()
		var isKey bool
		if out, isKey, err = enc.EncodeLoaded(out[:0], key); err != nil {
			st.fail(err)
			return
		}
		st.mu.Lock()
		st.seq++
		if len(st.pics) == videoRing {
			st.pics = append(st.pics[:0], st.pics[1:]...)
		}
		st.pics = append(st.pics, videoPic{seq: st.seq, key: isKey, data: append([]byte(nil), out...), at: time.Now()})
		for c := range st.viewers {
			c.poke()
		}
		st.mu.Unlock()
	}
}

// fail ends the stream after its encoder failed: its viewers go back to
// what they had before, and no encoder is started for videoRetry.
func (st *vstream) fail(err error) {
	s := st.s
	s.log.Warn("video encoder failed; viewers stay on their other encodings", "err", err)
	s.video.mu.Lock()
	s.video.brokenUntil = time.Now().Add(videoRetry).UnixNano()
	s.video.mu.Unlock()
	st.drop()
}

// drop takes the stream out of the server's and closes it.
func (st *vstream) drop() {
	v := &st.s.video
	v.mu.Lock()
	if v.streams[st.tier] == st {
		delete(v.streams, st.tier)
	}
	v.mu.Unlock()
	st.close()
}

// join adds c and has the next picture be a key frame, c's first.
// It returns the number of the last picture before it.
func (st *vstream) join(c *client) uint64 {
	st.mu.Lock()
	st.viewers[c] = struct{}{}
	st.wantKey = true
	seq := st.seq
	st.mu.Unlock()
	st.kickEncoder()
	return seq
}

func (st *vstream) leave(c *client) {
	st.mu.Lock()
	delete(st.viewers, c)
	if len(st.viewers) == 0 {
		st.alone = time.Now()
	}
	st.mu.Unlock()
}

// videoState is a viewer's place in the stream it follows (writer only).
type videoState struct {
	st    *vstream
	next  uint64 // the next picture it needs; 0: it waits for a key frame after join
	join  uint64
	reset bool // the next picture resets its decoder context
	// backlog is the pictures an update lately (a moving average): over
	// one, the viewer does not keep up.
	backlog  float64
	afterKey bool // the last update held a key frame
	// tierState goes with the viewer from stream to stream.
	tierState
	// pics are the pictures of the update being built.
	pics [][]byte
}

// tierState is what decides a viewer's stream tier (see followVideo).
type tierState struct {
	// level is the quality level whose tier it follows, since levelAt;
	// -1 at first.
	level   int
	levelAt time.Time
	// heldAt is when the window last held pictures back (the path did
	// not take them as fast as they came), since heldSince without a
	// break; probeAt when the level last went up on trial, upWait how
	// long a level holds before the next trial (doubling while trials
	// fail).
	heldAt, heldSince, probeAt time.Time
	upWait                     time.Duration
	// taken counts the pictures it took; rate is how many a second it
	// took over the last whole second (rateAt, rateTaken: the start of
	// the second being counted).
	taken, rateTaken uint64
	rate             float64
	rateAt           time.Time
	// A step down is judged at downAt + 2 x videoDown: when the window
	// still holds pictures back and the viewer takes no more of them a
	// second than before it (downRate), the path was not what held them
	// (its page or its machine was: a lower tier decodes no faster) and
	// the step is undone, back to downFrom; no step down again before
	// noDownUntil, downWait later each time (doubling).
	downAt, noDownUntil time.Time
	downRate            float64
	downFrom            int
	downWait            time.Duration
}

// followVideo moves c to the stream it should follow now: that of the
// region at its quality tier when it takes encoding 50 and JPEG, none
// otherwise. Leaving a stream, the region goes again in c's other
// encodings. Callers hold c.mu.
//
// The tier follows what the path carries: a viewer that gets pictures
// in twos and threes while the window holds them back (the path does not
// take the stream as fast as it comes) goes a level down rateLadder.
// Pictures in twos and threes alone are not enough: a viewer whose page
// stopped for 50 ms (a person's browser busy; the bench reading noVNC's
// canvas) takes the ones that came meanwhile together, and a lower tier
// would not decode faster; it went to the lowest tier within two seconds
// and stayed there (SSIM 0.81 where its own tier gives 0.88). Back up
// when it takes them one by one and the path's rate (as congestion
// control measures it) is three times the stream's, or on trial: after
// upWait at a level with nothing held back (the rate a stream shows is
// the stream's, seldom three times it), doubled each time a trial is
// followed by a step down within 2 x videoUp. A step down after which
// the viewer, still held back, takes no more pictures a second than
// before is undone (see tierState.downAt): on a machine short of CPU
// the window holds pictures back too, and a lower tier only cost
// fidelity (SSIM 0.87 where its own tier gave 0.92). A stream the path
// cannot carry falls behind and starts again from key frames: 6 frames
// a second through 8 Mbit/s. Held: a new tier is a new stream and a key
// frame, many pictures' worth; down at most once a videoDown. Not JPEG's
// level: that rule takes a key frame crossing the path for motion that
// does not fit (a viewer went through three streams in a second, each a
// key frame that lowered the level again).
func (c *client) followVideo() {
	vs := &c.video
	var want *vstream
	if c.h264 && c.s.cfg.Video != nil && c.quality >= 0 {
		now := time.Now()
		if vs.level < 0 || vs.level > c.quality { // the first, or the viewer lowered its own
			vs.level, vs.levelAt = c.quality, now
		}
		if st := vs.st; st != nil && vs.next > 0 {
			st.mu.Lock()
			sr := st.rate()
			st.mu.Unlock()
			switch vs.step(now, c.quality, sr, c.cong.rate, !c.flow.enabled) {
			case -1:
				c.s.log.Debug("viewer's path behind its video stream: a tier down", "level", vs.level, "backlog", vs.backlog)
			case 1:
				c.s.log.Debug("viewer keeps up with its video stream: a tier up", "level", vs.level, "next_trial", vs.upWait)
			case 2:
				c.s.log.Debug("a tier down did not help the viewer keep up: undone", "level", vs.level, "pictures_per_second", vs.rate, "no_step_down_until", vs.noDownUntil)
			}
		}
		want = c.s.streamFor(videoTier(vs.level))
	}
	if want == vs.st {
		return
	}
	if vs.st != nil {
		vs.st.leave(c)
		r := vs.st.region.Intersect(Rect{0, 0, c.fbW, c.fbH})
		c.snap.forget(r) // the viewer has it as video: send it whole
		c.dirty.mark(r)
	}
	*vs = videoState{st: want, pics: vs.pics[:0], tierState: vs.tierState, backlog: 1}
	if want != nil {
		vs.join, vs.reset = want.join(c), true
	}
}

// videoDue reports whether the stream c follows has pictures for it.
// Callers hold c.mu.
func (c *client) videoDue() bool {
	vs := &c.video
	if vs.st == nil {
		return false
	}
	st := vs.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if vs.next == 0 {
		for _, p := range st.pics {
			if p.seq > vs.join && p.key {
				return true
			}
		}
		if len(st.pics) > 0 && st.pics[0].seq > vs.join+1 {
			// The key frame made for it is gone from the ring (it could
			// not take it in time): another.
			vs.join = st.seq
			st.wantKey = true
			st.kickEncoder()
		}
		return false
	}
	if len(st.pics) > 0 && vs.next < st.pics[0].seq {
		// Further behind than the stream keeps: a key frame again, and
		// a tier down when there is one (the path did not carry this).
		vs.next, vs.join, vs.reset = 0, st.seq, true
		st.wantKey = true
		st.kickEncoder()
		vs.lower(time.Now())
		c.s.log.Debug("viewer fell behind its video stream: a key frame", "level", vs.level)
		return false
	}
	return st.seq >= vs.next
}

// videoRoom reports whether pictures may go though the window is full:
// while the bytes in flight are under half a second of the stream (256
// KiB at least). The window follows the rate the viewer's answers show,
// and a viewer answers a picture once it has decoded it: small pictures
// decoded one by one show a low rate (5.6 Mbit/s on a 100 Mbit/s path),
// a window too small for the pictures of one round trip, pictures
// piling up, and a stream a tier down, then another (measured). A path
// that does not carry the stream still fills this and holds pictures
// back: they pile up and the viewer goes down a tier. Callers hold c.mu.
func (c *client) videoRoom() bool {
	st := c.video.st
	if st == nil {
		return false
	}
	st.mu.Lock()
	allow := max(st.rate()/2, 256<<10)
	st.mu.Unlock()
	return float64(c.cong.inFlight()) < allow
}

// takeVideo collects the pictures c gets in this update into
// c.video.pics (shared slices: pictures are never written again).
// Callers hold c.mu.
func (c *client) takeVideo() {
	vs := &c.video
	vs.pics = vs.pics[:0]
	if vs.st == nil {
		return
	}
	st := vs.st
	st.mu.Lock()
	defer st.mu.Unlock()
	key := false
	for _, p := range st.pics {
		switch {
		case vs.next == 0 && p.seq > vs.join && p.key:
			vs.next = p.seq
		case vs.next == 0 || p.seq < vs.next:
			continue
		}
		vs.pics = append(vs.pics, p.data)
		vs.next = p.seq + 1
		key = key || p.key
	}
	// Pictures that piled up behind a key frame, or while congestion
	// control still looks for the path's rate (the window grows from
	// 64 KiB: on a long path the first updates wait a round trip each),
	// say nothing of whether the viewer keeps up.
	vs.taken += uint64(len(vs.pics))
	if len(vs.pics) > 0 && !key && !vs.afterKey && c.cong.trusted {
		vs.backlog += (float64(len(vs.pics)) - vs.backlog) / 8
	}
	vs.afterKey = key
}

// step moves the level the tier follows, for a viewer that asked for
// own, with sr the stream's rate and path the rate congestion control
// measured (bytes a second; 0: unknown); paced: the viewer asks for each
// update, so no window holds pictures back and pictures in twos and
// threes are all there is to go by. It reports -1 for a step down, 1 up,
// 2 a step down undone, 0 none (see followVideo).
func (vs *videoState) step(now time.Time, own int, sr, path float64, paced bool) int {
	if vs.upWait == 0 {
		vs.upWait, vs.downWait = videoUp, videoUp
	}
	if d := now.Sub(vs.rateAt); d >= time.Second {
		if !vs.rateAt.IsZero() {
			vs.rate = float64(vs.taken-vs.rateTaken) / d.Seconds()
		}
		vs.rateAt, vs.rateTaken = now, vs.taken
	}
	held := paced || now.Sub(vs.heldAt) < heldBreak && vs.heldAt.Sub(vs.heldSince) >= heldLong
	if !vs.downAt.IsZero() && now.Sub(vs.downAt) >= 2*videoDown {
		judged := vs.downAt
		vs.downAt = time.Time{}
		if held && !paced && vs.rate < 1.15*vs.downRate && vs.levelAt == judged {
			vs.level, vs.levelAt = vs.downFrom, now
			vs.noDownUntil = now.Add(vs.downWait)
			vs.downWait = min(2*vs.downWait, videoUpMax)
			return 2
		}
	}
	switch {
	case vs.backlog >= 2.5 && held && now.Sub(vs.levelAt) >= videoDown && videoTier(vs.level) > videoTier(rateFloor) && !now.Before(vs.noDownUntil):
		if !vs.probeAt.IsZero() && now.Sub(vs.probeAt) < 2*videoUp {
			vs.upWait = min(2*vs.upWait, videoUpMax) // the trial failed
		}
		vs.downAt, vs.downRate, vs.downFrom = now, vs.rate, vs.level
		vs.lower(now)
		return -1
	case vs.level >= own || vs.backlog > 1.2:
		return 0
	case now.Sub(vs.levelAt) >= videoUp && sr > 0 && 3*sr < path:
		vs.raise(own, now)
		return 1
	case now.Sub(vs.levelAt) >= vs.upWait && now.Sub(vs.heldAt) >= vs.upWait:
		vs.raise(own, now)
		vs.probeAt = now
		return 1
	}
	return 0
}

// noteHeld notes that the window held pictures back at now.
func (vs *tierState) noteHeld(now time.Time) {
	if now.Sub(vs.heldAt) >= heldBreak {
		vs.heldSince = now
	}
	vs.heldAt = now
}

// lower moves the level its tier follows a step down rateLadder.
func (vs *videoState) lower(now time.Time) {
	for _, l := range rateLadder {
		if videoTier(l) < videoTier(vs.level) {
			vs.level, vs.levelAt = l, now
			return
		}
	}
}

// raise moves the level its tier follows a step up rateLadder, to own
// at most.
func (vs *videoState) raise(own int, now time.Time) {
	next := own
	for _, l := range rateLadder { // from the top: the last that fits is the next up
		if videoTier(l) > videoTier(vs.level) && l < own {
			next = l
		}
	}
	vs.level, vs.levelAt = next, now
}

// appendVideo appends the H.264 rectangle of c's pictures (§ encoding 50
// as noVNC reads it): the header, u32 length, u32 flags, Annex-B.
func (c *client) appendVideo(dst []byte) []byte {
	vs := &c.video
	n := 0
	for _, p := range vs.pics {
		n += len(p)
	}
	dst = appendRectHeader(dst, vs.st.region, EncH264)
	flags := uint32(0)
	if vs.reset {
		flags = h264ResetThis
		vs.reset = false
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	dst = binary.BigEndian.AppendUint32(dst, flags)
	for _, p := range vs.pics {
		dst = append(dst, p...)
	}
	return dst
}

// cutOut returns the parts of rs outside r.
func cutOut(rs []Rect, r Rect) []Rect {
	out := rs[:0:0]
	for _, a := range rs {
		in := a.Intersect(r)
		if in.Empty() {
			out = append(out, a)
			continue
		}
		if in.Y > a.Y { // above
			out = append(out, Rect{a.X, a.Y, a.W, in.Y - a.Y})
		}
		if in.X > a.X { // left
			out = append(out, Rect{a.X, in.Y, in.X - a.X, in.H})
		}
		if e := in.X + in.W; e < a.X+a.W { // right
			out = append(out, Rect{e, in.Y, a.X + a.W - e, in.H})
		}
		if e := in.Y + in.H; e < a.Y+a.H { // below
			out = append(out, Rect{a.X, e, a.W, a.Y + a.H - e})
		}
	}
	return out
}

// videoRegion is the region video mode is on, empty when off.
func (s *Server) videoRegion() Rect {
	s.video.mu.Lock()
	defer s.video.mu.Unlock()
	return s.video.region
}
