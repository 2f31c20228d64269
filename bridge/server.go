package bridge

import (
	"bufio"
	"bytes"
	"context"
	"crypto/des"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubepod/deskd/cores"
)

// Screen is what the server shows and drives: x11 implements it for a
// real X display (in standard types only, so x11 knows nothing of RFB);
// tests use an in-memory one.
type Screen interface {
	Size() (w, h int)
	// Capture copies r of the screen into pix (BGRX, 4 bytes a pixel,
	// stride bytes a row) at r's coordinates.
	Capture(r image.Rectangle, pix []byte, stride int) error
	// Damage delivers rectangles that may have changed. The server
	// compares tiles, so an over-estimate costs only a capture.
	Damage() <-chan image.Rectangle
	Key(keysym uint32, down bool) error
	Pointer(x, y int, buttons uint16) error
}

// CursorScreen is a Screen that also tells its pointer's shape, which
// viewers that accept the Cursor pseudo-encoding draw themselves (the
// captured screen has no pointer in it).
type CursorScreen interface {
	CursorImage() (*image.NRGBA, image.Point, error)
	CursorChanged() <-chan struct{}
}

// cursorShape is the current pointer shape, numbered so each viewer knows
// whether it has it.
type cursorShape struct {
	img    *image.NRGBA
	hot    image.Point
	serial int
}

func toImage(r Rect) image.Rectangle { return image.Rect(r.X, r.Y, r.X+r.W, r.Y+r.H) }

func fromImage(r image.Rectangle) Rect { return Rect{r.Min.X, r.Min.Y, r.Dx(), r.Dy()} }

// Config configures a Server.
type Config struct {
	Name     string // desktop name shown by viewers
	Password string // VNC authentication when set (at most 8 bytes count)
	Logger   *slog.Logger
	// OnResize, when set, is called (from the capture loop, so briefly)
	// after the screen changed size.
	OnResize func(w, h int)
	// MaxViewers caps concurrent connections (default 32); one past it
	// is refused in the handshake with a reason it can show.
	MaxViewers int
	// WriteTimeout bounds each write to a viewer (default 30 s): a
	// viewer that stops reading is dropped and its memory freed.
	WriteTimeout time.Duration
	// OnInput, when set, is called (briefly, from a viewer's reader)
	// after a viewer's key or pointer event reached the screen.
	OnInput func()
	// Cores, when the daemon runs on one P, is widened while a big
	// update is encoded on two (nil: the runtime's own setting).
	Cores *cores.Cores
	// Video, when set, starts an H.264 encoder for w×h frames at a JPEG
	// quality level (0-9): viewers that take encoding 50 then get the
	// part of the screen that keeps moving as video (video.go). Nil:
	// encoding 50 is never used.
	Video func(w, h, quality int) (VideoEncoder, error)
}

// DefaultMaxViewers is Config.MaxViewers' default.
const DefaultMaxViewers = 32

// Server serves one Screen to any number of viewers.
type Server struct {
	cfg    Config
	log    *slog.Logger
	screen Screen

	conns atomic.Int32 // connections being served, in the handshake or after

	mu      sync.RWMutex // guards fb, cursor, clip and clients
	fb      *Frame
	cursor  cursorShape
	clip    clipState
	clients map[*client]struct{}

	resizeCh   chan resizeReq // viewers' SetDesktopSize, for the capture loop
	refresh    chan struct{}  // the first viewer after none: capture everything
	scrollSc   scrollScratch  // the capture loop's
	regionSc   regionScratch  // the capture loop's
	sample     sampler        // the capture loop's (s.mu where it compares)
	verify     *verifyTimer   // the capture loop's: when suspects may be due
	sampleBits []bool         // the capture loop's: sampleBox's per tile
	sums       rowSums        // the capture loop's: s.fb's row hashes for sampleBox
	noShared   bool           // the capture loop's: the screen's CaptureShared failed
	versions   []uint64       // per tile: content version (s.mu)
	gen        uint64         // last version given (s.mu)
	cache      tileCache      // tiles encoded once for viewers with equal settings
	motion     motion         // the capture loop's: which tiles keep changing
	video      video          // video mode (video.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// tile is the unit of change detection and of dirty tracking.
const tile = 64

// NewServer captures the screen once and starts the capture loop; Close
// stops it.
func NewServer(screen Screen, cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Name == "" {
		cfg.Name = "deskd"
	}
	if cfg.MaxViewers <= 0 {
		cfg.MaxViewers = DefaultMaxViewers
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	w, h := screen.Size()
	s := &Server{cfg: cfg, log: cfg.Logger, screen: screen, fb: NewFrame(w, h), clients: map[*client]struct{}{},
		resizeCh: make(chan resizeReq, 8), refresh: make(chan struct{}, 1), verify: newVerifyTimer()}
	if err := screen.Capture(image.Rect(0, 0, w, h), s.fb.Pix, s.fb.Stride); err != nil {
		return nil, fmt.Errorf("rfb: first capture: %w", err)
	}
	s.bumpVersions()
	s.sums.reset(h)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.captureLoop()
	if cs, ok := screen.(CursorScreen); ok {
		s.readCursor(cs)
		s.wg.Add(1)
		go s.cursorLoop(cs)
	}
	if cs, ok := screen.(ClipboardScreen); ok {
		s.wg.Add(1)
		go s.clipboardLoop(cs)
	}
	return s, nil
}

func (s *Server) noteInput() {
	if s.cfg.OnInput != nil {
		s.cfg.OnInput()
	}
}

// Close stops the capture loop and ends the connections.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
}

// Done is closed when the server has stopped: Close was called, or the
// screen went away (its damage channel closed, e.g. the X server died).
// Its viewers are disconnected then, so they can reconnect elsewhere.
func (s *Server) Done() <-chan struct{} { return s.ctx.Done() }

// captureLoop turns damage into changed tiles in the shared framebuffer
// and marks them dirty for every client. It also applies size changes:
// it alone replaces the framebuffer.
func (s *Server) captureLoop() {
	defer s.wg.Done()
	scratch := NewFrame(s.fb.W, s.fb.H)
	var sizeChanged <-chan image.Point
	if rs, ok := s.screen.(ResizableScreen); ok {
		sizeChanged = rs.SizeChanged()
	}
	defer s.verify.stop()
	videoCheck := time.NewTimer(time.Hour) // owned here: armed while video mode is on
	videoCheck.Stop()
	defer videoCheck.Stop()
	videoArmed := false
	for {
		var damaged []Rect
		exact := false
		select {
		case <-s.ctx.Done():
			return
		case now := <-videoCheck.C:
			videoArmed = false
			if d := s.videoIdleCheck(now); d > 0 {
				videoCheck.Reset(d)
				videoArmed = true
			}
			continue
		case req := <-s.resizeCh:
			s.setDesktopSize(req, &scratch)
			continue
		case p := <-sizeChanged:
			s.applySize(p.X, p.Y, nil, &scratch)
			continue
		case <-s.refresh:
			damaged = append(damaged, Rect{0, 0, s.fb.W, s.fb.H})
			exact = true
		case now := <-s.verify.t.C: // sampled tiles, compared in full when due
			s.verify.fired()
			s.mu.Lock()
			wait, ok := s.sample.refire(now)
			if ok && wait == 0 {
				damaged = s.sample.verify(s.fb.W, s.fb.H, now)
			}
			s.mu.Unlock()
			if !ok {
				continue
			}
			if wait > 0 {
				s.verify.arm(wait)
				continue
			}
			exact = true
		case r, ok := <-s.screen.Damage():
			if !ok {
				s.log.Info("screen gone; disconnecting viewers")
				s.cancel()
				return
			}
			damaged = append(damaged, fromImage(r))
		}
		// Coalesce whatever else is queued: a burst is captured once.
	drain:
		for len(damaged) < 1024 {
			select {
			case r := <-s.screen.Damage():
				damaged = append(damaged, fromImage(r))
			default:
				break drain
			}
		}
		// With no viewer, damage is drained but not captured: an idle
		// server costs nothing while the screen changes. The first viewer
		// to come triggers a full capture (refresh).
		s.mu.RLock()
		viewers := len(s.clients)
		s.mu.RUnlock()
		if viewers == 0 {
			continue
		}
		changed, sc := s.capture(damaged, scratch, s.wantCopyRect(), exact)
		s.mu.RLock()
		wait, suspects := s.sample.due(time.Now())
		s.mu.RUnlock()
		if suspects {
			s.verify.arm(wait) // when not armed already: see verifyTimer
		} else {
			s.verify.stop()
		}
		if len(changed) == 0 {
			continue
		}
		if s.cfg.Video != nil && sc == nil {
			s.noteMotion(changed, time.Now())
			if !videoArmed && !s.videoRegion().Empty() {
				videoCheck.Reset(videoIdle)
				videoArmed = true
			}
		}
		s.mu.RLock()
		for c := range s.clients {
			if sc != nil {
				c.markScrolled(changed, *sc)
			} else {
				c.markDirty(changed)
			}
		}
		s.mu.RUnlock()
	}
}

// cursorLoop follows the pointer's shape.
func (s *Server) cursorLoop(cs CursorScreen) {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case _, ok := <-cs.CursorChanged():
			if !ok {
				return
			}
		}
		s.readCursor(cs)
		s.mu.RLock()
		for c := range s.clients {
			c.poke()
		}
		s.mu.RUnlock()
	}
}

func (s *Server) readCursor(cs CursorScreen) {
	img, hot, err := cs.CursorImage()
	if err != nil {
		s.log.Debug("cursor image", "err", err)
		return
	}
	s.mu.Lock()
	s.cursor = cursorShape{img: img, hot: hot, serial: s.cursor.serial + 1}
	s.mu.Unlock()
}

// wantCopyRect reports whether any viewer takes CopyRect (only then is
// scroll detection worth its time).
func (s *Server) wantCopyRect() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for c := range s.clients {
		c.mu.Lock()
		ok := c.copyRect
		c.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// capture grabs the damaged area and returns the tiles that differ from
// the shared framebuffer, which it updates, and a scroll it found when
// asked to look (in the largest box captured). With exact, every tile is
// compared in full (a first capture for a viewer, suspects checked);
// otherwise big boxes with no scroll in them are sampled (sample.go).
func (s *Server) capture(damaged []Rect, scratch *Frame, findScroll, exact bool) ([]Rect, *scroll) {
	full := Rect{0, 0, s.fb.W, s.fb.H}
	boxes := damageBoxes(damaged, full.W, full.H, &s.regionSc)
	if len(boxes) == 0 {
		return nil, nil
	}
	// The biggest box first: the scroll search compares it with the old
	// picture, and the other boxes' tiles are compared knowing the move.
	biggest := 0
	for i, box := range boxes {
		if box.W*box.H > boxes[biggest].W*boxes[biggest].H {
			biggest = i
		}
	}
	boxes[0], boxes[biggest] = boxes[biggest], boxes[0]
	var (
		sc      *scroll
		changed []Rect
		sampled bool
		failed  bool
	)
	now := time.Now()
	s.mu.Lock()
	s.sample.seq++
	s.mu.Unlock()
	s.scrollSc.fbGen, s.scrollSc.fresh = s.gen, false // (only this goroutine writes s.gen)
	for k, box := range boxes {
		err := s.grab(box, scratch, func(cur *Frame) {
			// s.fb is the old picture: only this goroutine writes it.
			var differs []bool // per tile of box: its sampled rows differ
			inPlace := false
			if !exact && sc == nil && box.W*box.H >= sampleMinArea {
				// The sampled rows first: they also tell whether most
				// of the box is where it was, which a scroll search
				// would otherwise check on rows of its own (typing).
				n := ((box.W + tile - 1) / tile) * ((box.H + tile - 1) / tile)
				if cap(s.sampleBits) < n {
					s.sampleBits = make([]bool, n)
				}
				differs = s.sampleBits[:n]
				same, rows := sampleBox(s.fb, cur, box, s.sample.phase, differs, s.sums)
				inPlace = 4*same >= 3*rows
			}
			if k == 0 && findScroll && !inPlace {
				if found, ok := detectScroll(s.fb, cur, box, &s.scrollSc, differs == nil); ok {
					sc = &found
					differs = nil // compared in full, knowing the move
				}
			}
			sampled = sampled || differs != nil
			s.mu.Lock()
			changed = s.compareBox(changed, cur, box, sc, differs, now)
			s.mu.Unlock()
		})
		if err != nil {
			s.log.Warn("capture failed", "rect", box, "err", err)
			failed = true
			break // what changed so far is in s.fb: it goes out
		}
	}
	if !failed && !sampled && s.scrollSc.fresh {
		// The framebuffer holds the rows the search hashed as new: the
		// next search may take them as old.
		s.scrollSc.hashedGen = s.gen
	}
	if sampled { // the next capture compares other rows
		s.mu.Lock()
		s.sample.phase = (s.sample.phase + 3) % sampleStep
		s.sample.last = now
		s.mu.Unlock()
	}
	return changed, sc
}

// SharedScreen is a Screen that can lend its capture buffer: x11 captures
// into memory it shares with the X server, and the server compares that
// with its framebuffer in place instead of copying a damaged area first
// (a full-window damage at every keystroke copied 3.6 MB each time).
type SharedScreen interface {
	// CaptureShared captures r and calls fn with its pixels, pixel (x, y)
	// at pix[y*stride+4*x], valid only while fn runs. An error before fn
	// ran means the caller should use Capture.
	CaptureShared(r image.Rectangle, fn func(pix []byte, stride int)) error
}

// grab captures box and calls fn with a frame holding it at its
// coordinates: the screen's shared memory when it lends it, else
// scratch.
func (s *Server) grab(box Rect, scratch *Frame, fn func(*Frame)) error {
	if ss, ok := s.screen.(SharedScreen); ok && !s.noShared {
		ran := false
		err := ss.CaptureShared(toImage(box), func(pix []byte, stride int) {
			ran = true
			fn(&Frame{W: s.fb.W, H: s.fb.H, Stride: stride, Pix: pix})
		})
		if err == nil || ran {
			return err
		}
		s.log.Info("shared capture unavailable; copying", "err", err)
		s.noShared = true
	}
	if err := s.screen.Capture(toImage(box), scratch.Pix, scratch.Stride); err != nil {
		return err
	}
	fn(scratch)
	return nil
}

// compareBox compares box's tiles of cur with s.fb, copies those that
// differ into it and appends them to changed; with sampled (per tile of
// box, see sampleBox), a tile whose sampled rows differ is taken whole and the
// others become suspects. Callers hold s.mu.
func (s *Server) compareBox(changed []Rect, cur *Frame, box Rect, sc *scroll, sampled []bool, now time.Time) []Rect {
	full := Rect{0, 0, s.fb.W, s.fb.H}
	cols := (full.W + tile - 1) / tile
	if n := cols * ((full.H + tile - 1) / tile); len(s.sample.suspect) != n {
		s.sample.reset(n)
	}
	boxCols := (box.W + tile - 1) / tile
	for ty := box.Y; ty < box.Y+box.H; ty += tile {
		// Tiles taken whole side by side are copied as one span a row
		// (a tile's row is one short copy: on a video, calls, not bytes,
		// were most of the copying).
		span := Rect{Y: ty}
		copySpan := func() {
			if span.W > 0 {
				copyTile(s.fb, cur, span)
			}
			span.W = 0
		}
		for tx := box.X; tx < box.X+box.W; tx += tile {
			t := Rect{tx, ty, min(tile, full.W-tx), min(tile, full.H-ty)}
			i := ty/tile*cols + tx/tile
			var differs bool
			whole := sampled != nil && sampled[(ty-box.Y)/tile*boxCols+(tx-box.X)/tile]
			if !whole {
				copySpan()
			}
			switch {
			case whole:
				if span.W == 0 {
					span.X, span.H = tx, t.H
				}
				span.W += t.W
				differs = true
				s.sample.clear(i)
				s.sample.changedNow(i)
			case sampled != nil && s.sample.hot(i, tx/tile):
				differs = copyIfChanged(s.fb, cur, t)
				s.sample.clear(i)
				if differs {
					s.sample.changedNow(i)
				}
			case sampled != nil:
				s.sample.mark(i, now, s.sample.phase) // compared in full later
			default:
				explained := sc != nil && sc.explains(s.fb, cur, t) // before the tile is updated
				differs = copyIfChanged(s.fb, cur, t)
				s.sample.clear(i)
				// A tile the move does not hold for goes as pixels after
				// it even where the screen did not change: the move
				// brings the viewer other pixels there.
				if sc != nil && !explained && (differs || sc.isBad(t, full.W)) {
					sc.rest = append(sc.rest, t)
				}
			}
			if differs {
				s.sums.forget(t.Y, t.Y+t.H) // its rows in s.fb are new
				changed = append(changed, t)
				s.gen++
				if idx, ok := tileIndex(t, full.W, full.H); ok {
					s.versions[idx] = s.gen
				}
			}
		}
		copySpan()
	}
	return changed
}

func union(a, b Rect) Rect {
	x0, y0 := min(a.X, b.X), min(a.Y, b.Y)
	x1, y1 := max(a.X+a.W, b.X+b.W), max(a.Y+a.H, b.Y+b.H)
	return Rect{x0, y0, x1 - x0, y1 - y0}
}

// copyIfChanged copies tile t from src to dst when it differs, ignoring
// the undefined X byte.
func copyIfChanged(dst, src *Frame, t Rect) bool {
	changed := false
	for y := t.Y; y < t.Y+t.H; y++ {
		a := dst.Pix[y*dst.Stride+4*t.X : y*dst.Stride+4*(t.X+t.W)]
		b := src.Pix[y*src.Stride+4*t.X : y*src.Stride+4*(t.X+t.W)]
		changed = changed || !rowsEqual(a, b)
		if changed {
			copy(a, b)
		}
	}
	return changed
}

// ConnOptions are per connection.
type ConnOptions struct {
	ViewOnly bool // input is ignored
	// Recorder is an in-process viewer that records what it is sent
	// (package record): it is trusted (no password asked), not counted
	// against Config.MaxViewers, its input is ignored, and its JPEG
	// quality is what it asks for (the link is memory: congestion would
	// only measure how often it asks).
	Recorder bool
}

// HandshakeTimeout bounds the handshake.
const HandshakeTimeout = 10 * time.Second

// Serve runs one viewer on conn until it leaves or ctx ends.
func (s *Server) Serve(ctx context.Context, conn net.Conn, o ConnOptions) error {
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopServer := context.AfterFunc(s.ctx, cancel) // the server's end ends its viewers
	defer stopServer()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	full := false
	if !o.Recorder {
		full = s.conns.Add(1) > int32(s.cfg.MaxViewers)
		defer s.conns.Add(-1)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	bw := bufio.NewWriterSize(deadlineWriter{conn, s.cfg.WriteTimeout}, 256<<10)
	conn.SetDeadline(time.Now().Add(HandshakeTimeout))
	if err := s.handshake(br, bw, full, o.Recorder); err != nil {
		return err
	}
	conn.SetDeadline(time.Time{}) // writes get theirs from deadlineWriter

	s.mu.Lock()
	w, h := s.fb.W, s.fb.H
	c := &client{s: s, bw: bw, sent: -1, enc: newEncoder(ServerFormat), viewOnly: o.ViewOnly || o.Recorder, recorder: o.Recorder, cong: newCongestion(),
		dirty: newTiles(w, h), lossy: newTiles(w, h), snap: newSeen(w, h), markedGen: s.gen, fbW: w, fbH: h, wake: make(chan struct{}, 1), since: time.Now(),
		video: videoState{tierState: tierState{level: -1}}}
	s.clients[c] = struct{}{}
	if len(s.clients) == 1 {
		select {
		case s.refresh <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.clients, c)
		s.mu.Unlock()
		c.mu.Lock()
		c.left = true
		c.closeTaps()
		c.mu.Unlock()
	}()

	errc := make(chan error, 2)
	go func() { errc <- c.readLoop(ctx, br) }() // ends when conn closes
	go func() { errc <- c.writeLoop(ctx) }()    // ends with ctx
	err := <-errc
	cancel()
	conn.Close()
	<-errc
	if st := c.video.st; st != nil { // both loops are done: the writer's state is ours
		st.leave(c)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// deadlineWriter gives every write to the viewer its own deadline, so a
// viewer that stops reading fails the write instead of holding it.
type deadlineWriter struct {
	conn    net.Conn
	timeout time.Duration
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	d.conn.SetWriteDeadline(time.Now().Add(d.timeout))
	return d.conn.Write(p)
}

// ErrTooManyViewers is why a viewer past Config.MaxViewers is refused.
var ErrTooManyViewers = errors.New("rfb: too many viewers")

// handshake runs §7.1-7.3: version, security, ClientInit, ServerInit.
// When full, the viewer is refused where §7.1.2 lets a server say why:
// no security types (3.7+) or security type 0 (3.3), then a reason. A
// trusted viewer is offered no security even when there is a password.
func (s *Server) handshake(br *bufio.Reader, bw *bufio.Writer, full, trusted bool) error {
	bw.WriteString(version38)
	if err := bw.Flush(); err != nil {
		return err
	}
	var v [12]byte
	if _, err := io.ReadFull(br, v[:]); err != nil {
		return fmt.Errorf("rfb: read version: %w", err)
	}
	var minor int
	switch string(v[:]) {
	case version33:
		minor = 3
	case version37:
		minor = 7
	case version38, "RFB 003.889\n": // Apple's viewer speaks 3.8
		minor = 8
	default:
		if bytes.HasPrefix(v[:], []byte("RFB 003.")) {
			minor = 3 // unknown minor versions fall back to 3.3 (§7.1.1)
		} else {
			return fmt.Errorf("%w: not an RFB client (%q)", ErrProtocol, v[:])
		}
	}
	be := binary.BigEndian
	if full {
		reason := fmt.Sprintf("too many viewers: this desktop serves %d at most", s.cfg.MaxViewers)
		if minor == 3 {
			bw.Write(be.AppendUint32(nil, 0))
		} else {
			bw.WriteByte(0)
		}
		bw.Write(be.AppendUint32(nil, uint32(len(reason))))
		bw.WriteString(reason)
		bw.Flush()
		return fmt.Errorf("%w (%d)", ErrTooManyViewers, s.cfg.MaxViewers)
	}
	sec := byte(SecNone)
	if s.cfg.Password != "" && !trusted {
		sec = SecVNCAuth
	}
	if minor == 3 {
		bw.Write(be.AppendUint32(nil, uint32(sec)))
	} else {
		bw.Write([]byte{1, sec})
		if err := bw.Flush(); err != nil {
			return err
		}
		choice, err := br.ReadByte()
		if err != nil {
			return err
		}
		if choice != sec {
			return fmt.Errorf("%w: client chose security type %d", ErrProtocol, choice)
		}
	}
	if sec == SecVNCAuth {
		if err := s.vncAuth(br, bw, minor); err != nil {
			return err
		}
	} else if minor == 8 {
		bw.Write(be.AppendUint32(nil, 0)) // SecurityResult OK
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if _, err := br.ReadByte(); err != nil { // ClientInit: shared flag (always shared here)
		return err
	}
	s.mu.RLock()
	w, h := s.fb.W, s.fb.H
	s.mu.RUnlock()
	init := be.AppendUint16(nil, uint16(w))
	init = be.AppendUint16(init, uint16(h))
	init = append(init, ServerFormat.marshal()...)
	init = be.AppendUint32(init, uint32(len(s.cfg.Name)))
	init = append(init, s.cfg.Name...)
	bw.Write(init)
	return bw.Flush()
}

// vncAuth is §7.2.2: a 16-byte challenge DES-encrypted with the password.
func (s *Server) vncAuth(br *bufio.Reader, bw *bufio.Writer, minor int) error {
	challenge := make([]byte, 16)
	rand.Read(challenge)
	bw.Write(challenge)
	if err := bw.Flush(); err != nil {
		return err
	}
	resp := make([]byte, 16)
	if _, err := io.ReadFull(br, resp); err != nil {
		return err
	}
	want := vncEncrypt(s.cfg.Password, challenge)
	be := binary.BigEndian
	if subtle.ConstantTimeCompare(resp, want) != 1 {
		bw.Write(be.AppendUint32(nil, 1))
		if minor == 8 {
			reason := "authentication failed"
			bw.Write(be.AppendUint32(nil, uint32(len(reason))))
			bw.WriteString(reason)
		}
		bw.Flush()
		return errors.New("rfb: VNC authentication failed")
	}
	bw.Write(be.AppendUint32(nil, 0))
	return nil
}

// vncEncrypt DES-encrypts the challenge with the password as VNC does:
// the key is the first 8 bytes, each byte's bits reversed.
func vncEncrypt(password string, challenge []byte) []byte {
	key := make([]byte, 8)
	copy(key, password)
	for i, b := range key {
		var r byte
		for j := 0; j < 8; j++ {
			r |= (b >> j & 1) << (7 - j)
		}
		key[i] = r
	}
	c, _ := des.NewCipher(key)
	out := make([]byte, len(challenge))
	for i := 0; i < len(challenge); i += 8 {
		c.Encrypt(out[i:], challenge[i:i+8])
	}
	return out
}
