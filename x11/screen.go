package x11

import (
	"errors"
	"fmt"
	"image"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/damage"
	"github.com/jezek/xgb/randr"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
	"golang.org/x/sys/unix"
)

// Screen is an X display's root window: captured with MIT-SHM (or
// GetImage where the server cannot share memory with us), watched with
// DAMAGE, driven with XTEST. Its methods are safe for concurrent use.
type Screen struct {
	display string
	c       *xgb.Conn
	root    xproto.Window
	log     *slog.Logger

	sizeMu   sync.Mutex // guards w and h, which RANDR changes
	w, h     int
	sizeCh   chan image.Point
	randr    bool       // RANDR 1.2+: Resize works
	resizeMu sync.Mutex // one Resize at a time

	capMu    sync.Mutex // one capture at a time (the SHM segment is shared)
	shmOp    byte       // MIT-SHM's major opcode
	shmID    int
	shmem    []byte // nil: GetImage
	shmc     *xConn // nil after a broken stream: dialled again
	shmDials int    // connections made, for the tests

	damage   chan image.Rectangle
	dmg      *xConn       // DAMAGE's connection (damageconn.go); nil: xgb's
	notify   byte         // DamageNotify's event code
	damaged  atomic.Int64 // notifications read, for the tests
	closed   atomic.Bool  // Close was called
	cursorCh chan struct{}
	clip     *clipboard
	wg       sync.WaitGroup // the clipboard's goroutine

	inMu    sync.Mutex // this connection's input state
	buttons uint16
	shifts  int // Shift keys the viewer holds down
	// The display's keyboard mapping, shared with deskd's other Screens
	// on it (Keyboard); its own lock is taken after inMu.
	kb             *Keyboard
	minKey, maxKey xproto.Keycode

	done chan struct{}
}

// extInit records which extensions have had xgb's Init in this process.
// Init also fills xgb's package-level event and error decoder tables,
// which every connection's reader goroutine reads: running it again for a
// second connection (a second display, a test's own client) races with
// them. So Init runs once per extension; later connections only look the
// extension's opcode up. The state is package-level because xgb's is.
var extInit = struct {
	sync.Mutex
	done map[string]bool
}{done: map[string]bool{}}

func useExtension(c *xgb.Conn, name string, initFn func(*xgb.Conn) error) error {
	extInit.Lock()
	defer extInit.Unlock()
	if !extInit.done[name] {
		if err := initFn(c); err != nil {
			return err
		}
		extInit.done[name] = true
		return nil
	}
	rep, err := xproto.QueryExtension(c, uint16(len(name)), name).Reply()
	if err != nil {
		return err
	}
	if !rep.Present {
		return fmt.Errorf("no %s extension on this X server", name)
	}
	c.ExtLock.Lock()
	c.Extensions[name] = rep.MajorOpcode
	c.ExtLock.Unlock()
	return nil
}

// connect opens xgb's connection to display. A local display's socket is
// dialled here, with raw reads and writes (rawconn: the damage events
// that start every update then do not wake the Go runtime's monitor
// thread). xgb then finds the cookie for an unnamed display: when that
// fails (an Xauthority with per-display entries only) xgb dials itself.
func connect(display string, log *slog.Logger) (*xgb.Conn, error) {
	if _, scr, ok := strings.Cut(display, "."); ok && scr != "0" {
		return xgb.NewConnDisplay(display) // xgb over its own socket is on screen 0
	}
	conn, _, err := dialLocal(display)
	if err == nil {
		c, err := xgb.NewConnNet(conn)
		if err == nil {
			return c, nil
		}
		conn.Close()
		log.Info("X connection over a raw socket refused; letting xgb dial", "err", err)
	}
	return xgb.NewConnDisplay(display)
}

// OpenScreen connects to display and prepares capture, damage and input,
// with a keyboard mapping of its own (see OpenScreenWith).
func OpenScreen(display string, log *slog.Logger) (*Screen, error) {
	return OpenScreenWith(display, NewKeyboard(), log)
}

// OpenScreenWith connects to display and prepares capture, damage and
// input; its keys go through kb, which every Screen deskd opens on the
// display must share. The extensions are initialised and their versions
// queried before any concurrent use (a request before QueryVersion gets
// BadRequest).
func OpenScreenWith(display string, kb *Keyboard, log *slog.Logger) (*Screen, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c, err := connect(display, log)
	if err != nil {
		return nil, fmt.Errorf("x11: connect %s: %w", display, err)
	}
	setup := xproto.Setup(c)
	scr := setup.DefaultScreen(c)
	s := &Screen{display: display, c: c, root: scr.Root, w: int(scr.WidthInPixels), h: int(scr.HeightInPixels), log: log,
		damage: make(chan image.Rectangle, 4096), cursorCh: make(chan struct{}, 1), sizeCh: make(chan image.Point, 1), minKey: setup.MinKeycode,
		maxKey: setup.MaxKeycode, kb: kb, done: make(chan struct{})}
	fail := func(err error) (*Screen, error) { c.Close(); return nil, err }
	if scr.RootDepth != 24 {
		return fail(fmt.Errorf("x11: %s has depth %d: deskd captures 24-bit screens only", display, scr.RootDepth))
	}
	for _, init := range []struct {
		name string
		fn   func() error
	}{
		{"XFIXES", func() error {
			if err := useExtension(c, "XFIXES", xfixes.Init); err != nil {
				return err
			}
			_, err := xfixes.QueryVersion(c, 5, 0).Reply()
			return err
		}},
		{"DAMAGE", func() error {
			if err := useExtension(c, "DAMAGE", damage.Init); err != nil {
				return err
			}
			_, err := damage.QueryVersion(c, 1, 1).Reply()
			return err
		}},
		{"XTEST", func() error {
			if err := useExtension(c, "XTEST", xtest.Init); err != nil {
				return err
			}
			_, err := xtest.GetVersion(c, 2, 2).Reply()
			return err
		}},
	} {
		if err := init.fn(); err != nil {
			return fail(fmt.Errorf("x11: %s: %w", init.name, err))
		}
	}
	// A new connection may be to a new server on the same display (Xvfb
	// restarted): the shared mapping is read again.
	kb.mu.Lock()
	kb.invalidate()
	err = kb.ensure(c, s.minKey, s.maxKey)
	kb.mu.Unlock()
	if err != nil {
		return fail(err)
	}
	if err := initRandR(c); err != nil {
		log.Info("screen cannot be resized", "err", err)
	} else if err := randr.SelectInputChecked(c, s.root, randr.NotifyMaskScreenChange).Check(); err != nil {
		return fail(fmt.Errorf("x11: RANDR events: %w", err))
	} else {
		s.randr = true
	}
	if err := s.openSHM(); err != nil {
		log.Info("MIT-SHM unavailable; capturing with GetImage", "err", err)
	}
	if err := s.openDamage(); err != nil {
		log.Info("damage on a connection of its own unavailable; through xgb", "err", err)
		d, err := damage.NewDamageId(c)
		if err != nil {
			return fail(fmt.Errorf("x11: damage id: %w", err))
		}
		if err := damage.CreateChecked(c, d, xproto.Drawable(s.root), damage.ReportLevelRawRectangles).Check(); err != nil {
			return fail(fmt.Errorf("x11: create damage: %w", err))
		}
	}
	if err := xfixes.SelectCursorInputChecked(c, s.root, xfixes.CursorNotifyMaskDisplayCursor).Check(); err != nil {
		return fail(fmt.Errorf("x11: cursor events: %w", err))
	}
	if s.clip, err = newClipboard(s); err != nil {
		return fail(err)
	}
	go s.events() // ends when the connection closes
	if s.dmg != nil {
		s.wg.Go(s.readDamage) // ends when s.dmg closes
	}
	s.wg.Go(func() { s.clip.run(s.done) })
	return s, nil
}

// openSHM attaches a segment big enough for the whole screen on a
// connection of its own (shmconn.go). It fails when the X server does not
// share our IPC namespace.
func (s *Screen) openSHM() error {
	rep, err := xproto.QueryExtension(s.c, uint16(len("MIT-SHM")), "MIT-SHM").Reply()
	if err != nil {
		return err
	}
	if !rep.Present {
		return errors.New("no MIT-SHM extension on this X server")
	}
	// Big enough for the largest size RANDR allows, so that a resize
	// needs no new segment (untouched pages cost nothing).
	w, h := s.w, s.h
	if s.randr {
		if mw, mh, err := maxSize(s.c, s.root); err == nil {
			w, h = max(w, mw), max(h, mh)
		}
	}
	size := w * h * 4
	id, err := unix.SysvShmGet(unix.IPC_PRIVATE, size, unix.IPC_CREAT|0o600)
	if err != nil {
		return fmt.Errorf("shmget: %w", err)
	}
	mem, err := unix.SysvShmAttach(id, 0, 0)
	if err != nil {
		unix.SysvShmCtl(id, unix.IPC_RMID, nil)
		return fmt.Errorf("shmat: %w", err)
	}
	// Xvfb may run as another user (the GUI user, while deskd is root):
	// it then cannot attach a 0600 segment of ours. Make it the owner,
	// still 0600; root keeps access through CAP_IPC_OWNER.
	if uid, gid, err := serverCred(s.display); err == nil && uid != uint32(os.Geteuid()) && os.Geteuid() == 0 {
		desc := unix.SysvShmDesc{Perm: unix.SysvIpcPerm{Uid: uid, Gid: gid, Mode: 0o600}}
		if _, err := unix.SysvShmCtl(id, unix.IPC_SET, &desc); err != nil {
			s.log.Info("cannot give the SHM segment to the X server's user", "uid", uid, "err", err)
		}
	}
	c, err := dialSHM(s.display, rep.MajorOpcode, id)
	if err != nil {
		unix.SysvShmCtl(id, unix.IPC_RMID, nil)
		unix.SysvShmDetach(mem)
		return err
	}
	// Marked for removal now: it goes away when both sides detach (Linux
	// still lets a new connection attach it, after a broken one).
	unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	s.shmOp, s.shmID, s.shmem, s.shmc, s.shmDials = rep.MajorOpcode, id, mem, c, 1
	return nil
}

// openDamage creates the damage object of the root window on a
// connection of its own (damageconn.go).
func (s *Screen) openDamage() error {
	rep, err := xproto.QueryExtension(s.c, uint16(len("DAMAGE")), "DAMAGE").Reply()
	if err != nil {
		return err
	}
	if !rep.Present || rep.FirstEvent < 64 || rep.FirstEvent > 127 { // extension events are 64-127
		return fmt.Errorf("DAMAGE: first event %d", rep.FirstEvent)
	}
	c, err := dialDamage(s.display, rep.MajorOpcode, uint32(s.root))
	if err != nil {
		return err
	}
	s.dmg, s.notify = c, rep.FirstEvent // DamageNotify is DAMAGE's event 0
	return nil
}

// readDamage queues the damage connection's notifications until it
// closes (Close, or the X server gone), then closes the damage channel.
func (s *Screen) readDamage() {
	defer close(s.damage)
	err := readDamage(s.dmg.conn, s.notify, func(r image.Rectangle) {
		s.damaged.Add(1)
		w, h := s.Size()
		queueDamage(s.damage, r, image.Rect(0, 0, w, h))
	})
	if !s.closed.Load() {
		s.log.Warn("damage connection ended; the screen is gone", "err", err)
	}
}

// events drains the connection's events (xgb blocks every reply once 5000
// are queued) and turns DAMAGE notifications into rectangles.
func (s *Screen) events() {
	if s.dmg == nil {
		defer close(s.damage)
	}
	defer close(s.done)
	for {
		ev, err := s.c.WaitForEvent()
		if ev == nil && err == nil {
			return // connection closed
		}
		if s.clip.forward(ev) {
			continue
		}
		if m, ok := ev.(xproto.MappingNotifyEvent); ok {
			if m.Request != xproto.MappingPointer {
				s.kb.invalidate() // the next key reads the mapping again
			}
			continue
		}
		if _, ok := ev.(xfixes.CursorNotifyEvent); ok {
			select {
			case s.cursorCh <- struct{}{}:
			default:
			}
			continue
		}
		if e, ok := ev.(randr.ScreenChangeNotifyEvent); ok {
			w, h := int(e.Width), int(e.Height)
			if e.Rotation&(randr.RotationRotate90|randr.RotationRotate270) != 0 {
				w, h = h, w
			}
			s.setSize(w, h)
			continue
		}
		n, ok := ev.(damage.NotifyEvent)
		if !ok {
			continue
		}
		s.damaged.Add(1)
		r := image.Rect(int(n.Area.X), int(n.Area.Y), int(n.Area.X)+int(n.Area.Width), int(n.Area.Y)+int(n.Area.Height))
		w, h := s.Size()
		queueDamage(s.damage, r, image.Rect(0, 0, w, h))
	}
}

// queueDamage queues r without blocking. When the queue is full the
// oldest entry gives its place to the whole screen, which covers it, r and
// whatever else was lost: the newest picture always reaches viewers,
// however far behind the reader is. The caller is the only sender.
func queueDamage(q chan image.Rectangle, r, screen image.Rectangle) {
	select {
	case q <- r:
		return
	default:
	}
	select {
	case <-q: // the reader may have made room meanwhile: then nothing is lost
	default:
	}
	select {
	case q <- screen:
	default: // unreachable with one sender: a place was just freed
	}
}

// serverCred returns the user and group of the X server of display, from
// its local socket (SO_PEERCRED).
func serverCred(display string) (uint32, uint32, error) {
	c, _, err := dialSocket(display)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, 0, err
	}
	if serr != nil {
		return 0, 0, serr
	}
	return cred.Uid, cred.Gid, nil
}

// Size is the screen size in pixels.
func (s *Screen) Size() (int, int) {
	s.sizeMu.Lock()
	defer s.sizeMu.Unlock()
	return s.w, s.h
}

// Damage delivers changed rectangles until the screen is closed.
func (s *Screen) Damage() <-chan image.Rectangle { return s.damage }

// Capture copies r into pix (BGRX, stride bytes a row) at r's position.
func (s *Screen) Capture(r image.Rectangle, pix []byte, stride int) error {
	w, h := s.Size()
	r = r.Intersect(image.Rect(0, 0, w, h))
	if r.Empty() {
		return nil
	}
	row := r.Dx() * 4
	err := s.CaptureShared(r, func(sh []byte, shStride int) {
		for y := r.Min.Y; y < r.Max.Y; y++ {
			copy(pix[y*stride+4*r.Min.X:], sh[y*shStride+4*r.Min.X:][:row])
		}
	})
	if !errors.Is(err, ErrNoSHM) {
		return err
	}
	s.capMu.Lock()
	defer s.capMu.Unlock()
	rep, err := xproto.GetImage(s.c, xproto.ImageFormatZPixmap, xproto.Drawable(s.root), int16(r.Min.X), int16(r.Min.Y),
		uint16(r.Dx()), uint16(r.Dy()), 0xffffffff).Reply()
	if err != nil {
		return fmt.Errorf("x11: capture: %w", err)
	}
	if len(rep.Data) < row*r.Dy() {
		return errors.New("x11: short image")
	}
	for y := 0; y < r.Dy(); y++ {
		copy(pix[(r.Min.Y+y)*stride+4*r.Min.X:], rep.Data[y*row:(y+1)*row])
	}
	return nil
}

// ErrNoSHM is CaptureShared's error when the X server shares no memory
// with us (another IPC namespace): Capture still works.
var ErrNoSHM = errors.New("x11: no MIT-SHM segment")

// CaptureShared captures r into the shared memory segment and calls fn
// with its pixels in place, addressed in screen coordinates: pixel (x, y)
// of r is at pix[y*stride+4*x] (the image is put at that offset in the
// segment). Nothing is copied: a caller that compares a big damaged area
// with its own picture reads the X server's copy once. pix is valid only
// while fn runs; other captures wait for it.
func (s *Screen) CaptureShared(r image.Rectangle, fn func(pix []byte, stride int)) error {
	w, h := s.Size()
	r = r.Intersect(image.Rect(0, 0, w, h))
	if r.Empty() {
		return nil
	}
	stride := r.Dx() * 4
	off := r.Min.Y*stride + 4*r.Min.X // pixel r.Min
	end := off + r.Dy()*stride        // past the last row's last pixel
	if s.shmem == nil || end > len(s.shmem) {
		return ErrNoSHM
	}
	s.capMu.Lock()
	defer s.capMu.Unlock()
	// A broken stream is dialled again, and the capture tried once more
	// on the new connection: a caller that saw an error would give up
	// shared capture for good.
	for try := 1; ; try++ {
		if s.shmc == nil {
			select {
			case <-s.done: // closed, or the X server is gone
				return errors.New("x11: shm capture: screen closed")
			default:
			}
			c, err := dialSHM(s.display, s.shmOp, s.shmID)
			if err != nil {
				return err
			}
			s.shmc = c
			s.shmDials++
		}
		err := s.shmc.getImage(uint32(s.root), r.Min.X, r.Min.Y, r.Dx(), r.Dy(), uint32(off))
		if err == nil {
			break
		}
		if xe := (*xError)(nil); errors.As(err, &xe) {
			return err // the connection is still in step
		}
		s.shmc.Close()
		s.shmc = nil
		if try == 2 {
			return err
		}
	}
	fn(s.shmem[:end], stride)
	return nil
}

// Close detaches the SHM segment and closes the connection.
func (s *Screen) Close() error {
	s.closed.Store(true)
	s.c.Close()
	if s.dmg != nil {
		s.dmg.Close()
	}
	<-s.done
	s.wg.Wait()
	s.capMu.Lock()
	if s.shmc != nil {
		s.shmc.Close()
		s.shmc = nil
	}
	s.capMu.Unlock()
	if s.shmem != nil {
		unix.SysvShmDetach(s.shmem)
	}
	return nil
}

// Pointer moves the pointer and presses or releases the buttons that
// changed (bit i is button i+1: 1-3 left/middle/right, 4-7 wheel).
func (s *Screen) Pointer(x, y int, buttons uint16) error {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	xtest.FakeInput(s.c, xproto.MotionNotify, 0, 0, s.root, int16(x), int16(y), 0)
	for i := range 16 { // buttons 1-16: 8 and 9 are back and forward
		bit := uint16(1) << i
		if (s.buttons^buttons)&bit == 0 {
			continue
		}
		typ := byte(xproto.ButtonRelease)
		if buttons&bit != 0 {
			typ = xproto.ButtonPress
		}
		xtest.FakeInput(s.c, typ, byte(i+1), 0, s.root, 0, 0, 0)
	}
	s.buttons = buttons
	return s.sync()
}

// Ping checks that the X connection answers and that a capture works
// (one pixel): what a viewer needs of the display.
func (s *Screen) Ping() error {
	if err := s.sync(); err != nil {
		return fmt.Errorf("x11: display does not answer: %w", err)
	}
	var px [4]byte
	if err := s.Capture(image.Rect(0, 0, 1, 1), px[:], 4); err != nil {
		return fmt.Errorf("x11: capture: %w", err)
	}
	return nil
}

// sync waits until the server has processed every request sent so far:
// input then lands before anything a viewer does next.
func (s *Screen) sync() error {
	_, err := xproto.GetInputFocus(s.c).Reply()
	return err
}
