package bridge

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"image"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memScreen is an in-memory Screen.
type memScreen struct {
	mu     sync.Mutex
	f      *Frame
	damage chan image.Rectangle
	keys   []uint32
	ptrs   [][3]int
	// captures counts Capture calls, so tests can wait for the
	// capture loop to have taken a change in.
	captures int
}

func newMemScreen(w, h int) *memScreen {
	return &memScreen{f: testFrame(w, h), damage: make(chan image.Rectangle, 64)}
}

func (m *memScreen) Capture(r image.Rectangle, pix []byte, stride int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.captures++
	for y := r.Min.Y; y < r.Max.Y; y++ {
		i := y*m.f.Stride + 4*r.Min.X
		copy(pix[y*stride+4*r.Min.X:], m.f.Pix[i:i+4*r.Dx()])
	}
	return nil
}

func (m *memScreen) Damage() <-chan image.Rectangle { return m.damage }

func (m *memScreen) Key(k uint32, down bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if down {
		m.keys = append(m.keys, k)
	}
	return nil
}

func (m *memScreen) Pointer(x, y int, b uint16) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ptrs = append(m.ptrs, [3]int{x, y, int(b)})
	return nil
}

// cursorScreen is a memScreen with a pointer shape.
type cursorScreen struct {
	*memScreen
	img     *image.NRGBA
	hot     image.Point
	changed chan struct{}
}

func (c *cursorScreen) CursorImage() (*image.NRGBA, image.Point, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.img, c.hot, nil
}

func (c *cursorScreen) CursorChanged() <-chan struct{} { return c.changed }

func (c *cursorScreen) setCursor(w, h int, hot image.Point, rgb uint32) {
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			i := 4 * (y*w + x)
			img.Pix[i], img.Pix[i+1], img.Pix[i+2] = byte(rgb>>16), byte(rgb>>8), byte(rgb)
			if x <= y { // a triangle: the rest is transparent
				img.Pix[i+3] = 255
			}
		}
	}
	c.mu.Lock()
	c.img, c.hot = img, hot
	c.mu.Unlock()
	c.changed <- struct{}{}
}

// paint fills r with colour and reports the damage.
func (m *memScreen) paint(r Rect, rgb uint32) {
	m.mu.Lock()
	for y := r.Y; y < r.Y+r.H; y++ {
		for x := r.X; x < r.X+r.W; x++ {
			p := m.f.at(x, y)
			p[0], p[1], p[2] = byte(rgb), byte(rgb>>8), byte(rgb>>16)
		}
	}
	m.mu.Unlock()
	m.damage <- toImage(r)
}

// rfbClient is a minimal viewer for the tests.
type rfbClient struct {
	t      *testing.T
	c      net.Conn
	br     *bufio.Reader
	w, h   int
	pf     PixelFormat
	fb     []uint32
	tight  tightDecoder
	zrle   inflater
	zlib   inflater
	closed chan error
	cursor cursorSeen
	sizes  []Rect // size pseudo-rectangles received (x: reason, y: status)
	copies int    // CopyRect rectangles applied
	jpegs  int    // Tight rectangles that came as JPEG
	videos []videoRect
}

type cursorSeen struct {
	r    Rect // x, y: hotspot
	pix  []uint32
	mask []byte
}

func serve(t *testing.T, s *Server, o ConnOptions) (net.Conn, chan error) {
	a, b := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- s.Serve(t.Context(), a, o) }()
	t.Cleanup(func() { b.Close(); <-done })
	return b, done
}

func dialRFB(t *testing.T, s *Server, version, password string, o ConnOptions) *rfbClient {
	t.Helper()
	conn, done := serve(t, s, o)
	return handshakeRFB(t, conn, done, version, password)
}

// handshakeRFB runs the client's side of the handshake on conn.
func handshakeRFB(t *testing.T, conn net.Conn, done chan error, version, password string) *rfbClient {
	t.Helper()
	c := &rfbClient{t: t, c: conn, br: bufio.NewReader(conn), closed: done}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	v := c.read(12)
	if string(v) != version38 {
		t.Fatalf("server version %q", v)
	}
	c.write([]byte(version))
	var sec byte
	if version == version33 {
		sec = byte(binary.BigEndian.Uint32(c.read(4)))
	} else {
		n := c.read(1)[0]
		types := c.read(int(n))
		sec = types[0]
		c.write([]byte{sec})
	}
	if sec == SecVNCAuth {
		challenge := c.read(16)
		c.write(vncEncrypt(password, challenge))
		if res := binary.BigEndian.Uint32(c.read(4)); res != 0 {
			return nil
		}
	} else if version == version38 {
		if res := binary.BigEndian.Uint32(c.read(4)); res != 0 {
			t.Fatalf("security result %d", res)
		}
	}
	c.write([]byte{1}) // shared
	init := c.read(24)
	c.w, c.h = int(binary.BigEndian.Uint16(init)), int(binary.BigEndian.Uint16(init[2:]))
	c.pf = parsePixelFormat(init[4:20])
	c.read(int(binary.BigEndian.Uint32(init[20:])))
	c.fb = make([]uint32, c.w*c.h)
	conn.SetDeadline(time.Time{})
	return c
}

// noVNCViewer connects as noVNC does (its pixel format, encs) and reads
// the first full update.
func noVNCViewer(t *testing.T, s *Server, encs ...int32) *rfbClient {
	t.Helper()
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setPixelFormat(noVNCFormat)
	c.setEncodings(encs...)
	c.request(false)
	c.update()
	return c
}

// waitUntil checks done every millisecond until it holds, and fails the
// test with what if it does not within 5 s.
func waitUntil(t *testing.T, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !done(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
	}
}

func (c *rfbClient) read(n int) []byte {
	c.t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c.br, b); err != nil {
		c.t.Fatalf("read %d: %v", n, err)
	}
	return b
}

func (c *rfbClient) write(b []byte) {
	c.t.Helper()
	if _, err := c.c.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *rfbClient) setPixelFormat(pf PixelFormat) {
	c.write(append([]byte{msgSetPixelFormat, 0, 0, 0}, pf.marshal()...))
	c.pf = pf
	c.tight.pf = pf
}

func (c *rfbClient) setEncodings(encs ...int32) {
	b := []byte{msgSetEncodings, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(len(encs)))
	for _, e := range encs {
		b = binary.BigEndian.AppendUint32(b, uint32(e))
	}
	c.write(b)
}

func (c *rfbClient) request(incremental bool) {
	b := []byte{msgFBUpdateRequest, 0}
	if incremental {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint16(b, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(c.w))
	b = binary.BigEndian.AppendUint16(b, uint16(c.h))
	c.write(b)
}

// update reads one FramebufferUpdate into c.fb and returns its rects.
func (c *rfbClient) update() []Rect {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.c.SetReadDeadline(time.Time{})
	h := c.read(4)
	if h[0] != msgFramebufferUpdate {
		c.t.Fatalf("message type %d", h[0])
	}
	n := int(binary.BigEndian.Uint16(h[2:]))
	var rects []Rect
	for range n {
		rh := c.read(12)
		be := binary.BigEndian
		r := Rect{int(be.Uint16(rh)), int(be.Uint16(rh[2:])), int(be.Uint16(rh[4:])), int(be.Uint16(rh[6:]))}
		enc := int32(be.Uint32(rh[8:]))
		if enc == EncExtendedDesktopSize || enc == EncDesktopSize {
			if enc == EncExtendedDesktopSize {
				n := int(c.read(4)[0])
				c.read(16 * n)
			}
			c.sizes = append(c.sizes, r)
			if enc == EncDesktopSize || r.Y == resizeOK { // x: reason, y: status
				c.w, c.h = r.W, r.H
				c.fb = make([]uint32, r.W*r.H)
			}
			rects = append(rects, Rect{W: -2}) // marks a size rectangle
			continue
		}
		if enc == EncCopyRect {
			src := c.read(4)
			sx, sy := int(binary.BigEndian.Uint16(src)), int(binary.BigEndian.Uint16(src[2:]))
			tmp := make([]uint32, r.W*r.H)
			for y := range r.H {
				copy(tmp[y*r.W:(y+1)*r.W], c.fb[(sy+y)*c.w+sx:])
			}
			for y := range r.H {
				copy(c.fb[(r.Y+y)*c.w+r.X:], tmp[y*r.W:(y+1)*r.W])
			}
			c.copies++
			rects = append(rects, r)
			continue
		}
		if enc == EncH264 {
			hd := c.read(8)
			c.videos = append(c.videos, videoRect{r: r, flags: binary.BigEndian.Uint32(hd[4:]), data: c.read(int(binary.BigEndian.Uint32(hd)))})
			rects = append(rects, r)
			continue
		}
		px := c.decode(r, enc)
		if enc == EncCursor {
			rects = append(rects, Rect{W: -1}) // marks a cursor rectangle
			continue
		}
		for i, p := range px {
			c.fb[(r.Y+i/r.W)*c.w+r.X+i%r.W] = p
		}
		rects = append(rects, r)
	}
	return rects
}

func (c *rfbClient) decode(r Rect, enc int32) []uint32 {
	bpp := int(c.pf.BPP) / 8
	switch enc {
	case EncCursor:
		pix := pixels(c.pf, c.read(r.W*r.H*bpp))
		mask := c.read((r.W + 7) / 8 * r.H)
		c.cursor = cursorSeen{r: r, pix: pix, mask: mask}
		return nil
	case EncRaw:
		return pixels(c.pf, c.read(r.W*r.H*bpp))
	case EncZlib:
		n := binary.BigEndian.Uint32(c.read(4))
		return pixels(c.pf, c.zlib.inflate(c.t, c.read(int(n)), r.W*r.H*bpp))
	case EncTight:
		px, jpeg := c.tight.decodeFrom(c.t, c.read, r)
		if jpeg {
			c.jpegs++
		}
		return px
	}
	c.t.Fatalf("encoding %d", enc)
	return nil
}

func (c *rfbClient) matches(s *memScreen) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for y := 0; y < c.h; y++ {
		for x := 0; x < c.w; x++ {
			if diff(c.fb[y*c.w+x], quantise(c.pf, s.f.bgr(x, y))) > 0 {
				return false
			}
		}
	}
	return true
}

func newTestServer(t *testing.T, scr Screen, password string) *Server {
	s, err := NewServer(scr, Config{Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestHandshakeVersionsAndUpdates(t *testing.T) {
	for _, v := range []string{version33, version37, version38} {
		t.Run(v[:11], func(t *testing.T) {
			scr := newMemScreen(200, 130)
			s := newTestServer(t, scr, "")
			c := dialRFB(t, s, v, "", ConnOptions{})
			if c.w != 200 || c.h != 130 || c.pf != ServerFormat {
				t.Fatalf("server init %dx%d %+v", c.w, c.h, c.pf)
			}
			c.setEncodings(EncRaw)
			c.request(false)
			c.update()
			if !c.matches(scr) {
				t.Fatal("full update does not match the screen")
			}
		})
	}
}

func TestVNCAuth(t *testing.T) {
	scr := newMemScreen(64, 64)
	s := newTestServer(t, scr, "s3cret")
	if c := dialRFB(t, s, version38, "wrong", ConnOptions{}); c != nil {
		t.Fatal("wrong password accepted")
	}
	c := dialRFB(t, s, version38, "s3cret", ConnOptions{})
	if c == nil {
		t.Fatal("right password refused")
	}
}

func TestIncrementalUpdatesPerEncoding(t *testing.T) {
	for name, setup := range map[string]func(c *rfbClient){
		"raw":           func(c *rfbClient) { c.setEncodings(EncRaw) },
		"zlib noVNC pf": func(c *rfbClient) { c.setPixelFormat(noVNCFormat); c.setEncodings(EncZlib, EncRaw) },
		"tight":         func(c *rfbClient) { c.setPixelFormat(noVNCFormat); c.setEncodings(EncTight, EncRaw) },
		"tight jpeg":    func(c *rfbClient) { c.setPixelFormat(noVNCFormat); c.setEncodings(EncTight, encJPEGQuality0+9) },
		"zlib 565":      func(c *rfbClient) { c.setPixelFormat(rgb565BE); c.setEncodings(EncZlib) },
	} {
		t.Run(name, func(t *testing.T) {
			scr := newMemScreen(300, 200)
			s := newTestServer(t, scr, "")
			c := dialRFB(t, s, version38, "", ConnOptions{})
			setup(c)
			c.tight.pf = c.pf
			c.request(false)
			c.update()
			if name != "tight jpeg" && !c.matches(scr) {
				t.Fatal("full update does not match the screen")
			}
			// A change inside one tile is sent as the box that changed.
			scr.paint(Rect{70, 70, 10, 10}, 0xabcdef)
			c.request(true)
			rects := c.update()
			if len(rects) != 1 || rects[0] != (Rect{70, 70, 10, 10}) {
				t.Fatalf("incremental update sent %v, want the box that changed", rects)
			}
			if name != "tight jpeg" && !c.matches(scr) {
				t.Fatal("incremental update does not match the screen")
			}
		})
	}
}

func TestCursorShape(t *testing.T) {
	cs := &cursorScreen{memScreen: newMemScreen(64, 64), changed: make(chan struct{}, 1)}
	cs.setCursor(9, 12, image.Pt(1, 2), 0x11aa22)
	s, err := NewServer(cs, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw, EncCursor)
	c.request(false)
	c.update()
	cur := c.cursor
	if cur.r != (Rect{1, 2, 9, 12}) || cur.pix[0] != 0x11aa22 {
		t.Fatalf("cursor rect %+v, first pixel %06x", cur.r, cur.pix[0])
	}
	// Row y has its first y+1 pixels opaque; rows are 2 bytes wide.
	if cur.mask[0] != 0x80 || cur.mask[2*8] != 0xff || cur.mask[2*8+1] != 0x80 {
		t.Fatalf("mask rows 0 and 8: %08b, %08b %08b", cur.mask[0], cur.mask[16], cur.mask[17])
	}
	// A new shape alone makes an update, with nothing but the cursor.
	cs.setCursor(4, 4, image.Pt(0, 0), 0xffffff)
	c.request(true)
	if rects := c.update(); len(rects) != 1 || rects[0].W != -1 || c.cursor.r != (Rect{0, 0, 4, 4}) {
		t.Fatalf("after a shape change: %v, cursor %+v", rects, c.cursor.r)
	}
}

// When the screen goes away (the X server died), viewers are cut off so
// they can reconnect to the next one, and the server says it is done.
func TestScreenGoneEndsViewers(t *testing.T) {
	scr := newMemScreen(64, 64)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	close(scr.damage)
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server not done after its screen went away")
	}
	select {
	case err := <-c.closed:
		c.closed <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("viewer still connected to a server without a screen")
	}
}

func TestInputAndViewOnly(t *testing.T) {
	scr := newMemScreen(64, 64)
	s := newTestServer(t, scr, "")
	ro := dialRFB(t, s, version38, "", ConnOptions{ViewOnly: true})
	ro.write([]byte{msgKeyEvent, 1, 0, 0, 0, 0, 0, 'x'})
	ro.write([]byte{msgPointerEvent, 1, 0, 5, 0, 6})
	rw := dialRFB(t, s, version38, "", ConnOptions{})
	rw.write([]byte{msgKeyEvent, 1, 0, 0, 0, 0, 0, 'a'})
	rw.write([]byte{msgPointerEvent, 4, 0, 10, 0, 20})
	rw.setEncodings(EncRaw)
	rw.request(false)
	rw.update() // everything before it has been handled
	scr.mu.Lock()
	defer scr.mu.Unlock()
	if len(scr.keys) != 1 || scr.keys[0] != 'a' || len(scr.ptrs) != 1 || scr.ptrs[0] != [3]int{10, 20, 4} {
		t.Fatalf("keys %v pointers %v; want only the read-write viewer's", scr.keys, scr.ptrs)
	}
}

func TestBadMessageEndsConnection(t *testing.T) {
	scr := newMemScreen(64, 64)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.write([]byte{msgSetEncodings, 0, 0xff, 0xff}) // 65535 encodings
	select {
	case err := <-c.closed:
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("Serve ended with %v, want a protocol error", err)
		}
		c.closed <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("connection not ended")
	}
}

func FuzzReadClientMessage(f *testing.F) {
	seeds := [][]byte{
		{msgSetPixelFormat, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0},
		{msgSetEncodings, 0, 0, 2, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0x21},
		{msgFBUpdateRequest, 1, 0, 0, 0, 0, 4, 0, 3, 0},
		{msgKeyEvent, 1, 0, 0, 0, 0, 0xff, 0x0d},
		{msgPointerEvent, 1, 0, 1, 0, 2},
		{msgClientCutText, 0, 0, 0, 0, 0, 0, 2, 'h', 'i'},
		{msgClientCutText, 0, 0, 0, 0x80, 0, 0, 0},
		{msgFence, 0, 0, 0, 0, 0, 0, 1, 3, 'a', 'b', 'c'},
		{msgSetDesktopSize, 0, 4, 0, 3, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 4, 0, 3, 0, 0, 0, 0, 0},
		{msgQEMU, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 0x1e},
		{msgEnableContUpdates, 1, 0, 0, 0, 0, 1, 0, 1, 0},
		{99},
		// from the hostile suite (bench/hostile.go)
		{msgClientCutText, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, '0', '1', '2'},
		{msgClientCutText, 0, 0, 0, 0, 0x10, 0, 1},
		{msgSetEncodings, 0, 0xff, 0xff},
		{msgFence, 0, 0, 0, 0, 0, 0, 0, 255},
		{msgSetDesktopSize, 0, 4, 0, 3, 0, 255, 0},
		{msgSetDesktopSize, 0, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadClientMessage(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(m.Encodings) > MaxEncodings || len(m.Text) > MaxCutText || len(m.Payload) > MaxFence || len(m.Screens) > MaxScreens {
			t.Fatalf("bounds exceeded: %+v", m)
		}
		if m.Dropped != 0 && (m.Dropped <= MaxCutText || m.Text != nil) {
			t.Fatalf("dropped %d bytes, kept %d", m.Dropped, len(m.Text))
		}
		if m.Type == msgSetPixelFormat && m.PixelFormat.validate() != nil {
			t.Fatal("invalid pixel format accepted")
		}
	})
}

// With no viewer the server drains damage without capturing; the next
// viewer still gets the screen as it is now.
func TestIdleServerRefreshesForNextViewer(t *testing.T) {
	scr := newMemScreen(128, 64)
	s := newTestServer(t, scr, "")
	first := dialRFB(t, s, version38, "", ConnOptions{})
	first.setEncodings(EncRaw)
	first.request(false)
	first.update()
	first.c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.mu.RLock()
		n := len(s.clients)
		s.mu.RUnlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("viewer not gone")
		}
	}
	scr.paint(Rect{0, 0, 64, 64}, 0x00ff00)
	scr.paint(Rect{64, 0, 64, 64}, 0x0000ff)
	for deadline := time.Now().Add(5 * time.Second); len(scr.damage) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("damage not drained")
		}
	}
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw)
	for i := range 10 {
		c.request(i > 0)
		c.update()
		if c.matches(scr) {
			return
		}
	}
	t.Fatal("the viewer after an idle period never saw the current screen")
}

// A large Tight update is encoded in two halves at once, on streams 0-1
// and 2-3; over several updates every stream must stay in step with the
// viewer's inflaters.
func TestParallelTightUpdates(t *testing.T) {
	scr := newMemScreen(640, 480) // 307200 pixels: above parallelArea
	s := newTestServer(t, scr, "")
	c := noVNCViewer(t, s, EncTight) // no JPEG quality: lossless
	if !c.matches(scr) {
		t.Fatal("first update differs from the screen")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range 5 {
		for j := range 4 {
			scr.paint(Rect{rng.IntN(500), rng.IntN(400), 140, 80}, rng.Uint32()&0xffffff)
			_ = j
		}
		scr.paint(Rect{0, 0, 640, 480}, 0x102030+uint32(i)) // everything changes: parallel again
		for range 10 {
			if c.matches(scr) {
				break
			}
			c.request(true)
			c.update()
		}
		if !c.matches(scr) {
			t.Fatalf("after change %d the viewer differs from the screen", i)
		}
	}
}

// Tiles sent as JPEG are sent again lossless once the screen has been
// still for refineDelay: the viewer ends up with the exact picture.
func TestLossyRefinement(t *testing.T) {
	scr := newMemScreen(256, 128)
	rng := rand.New(rand.NewPCG(5, 6))
	scr.mu.Lock()
	for i := range scr.f.Pix { // photo-like noise everywhere: JPEG at any quality level
		scr.f.Pix[i] = byte(rng.IntN(256))
	}
	scr.mu.Unlock()
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setPixelFormat(noVNCFormat)
	c.setEncodings(EncTight, encJPEGQuality0+6)
	c.request(false)
	t0 := time.Now()
	c.update()
	if c.jpegs == 0 || c.matches(scr) {
		t.Fatalf("first update: %d JPEG rectangles, exact %v; want lossy", c.jpegs, c.matches(scr))
	}
	jpegs := c.jpegs
	c.request(true)
	rects := c.update()
	if waited := time.Since(t0); waited < refineDelay {
		t.Fatalf("refined after %v, before the screen was still for %v", waited, refineDelay)
	}
	if c.jpegs != jpegs || len(rects) == 0 || !c.matches(scr) {
		t.Fatalf("refinement: %d rectangles, %d more JPEG, exact %v", len(rects), c.jpegs-jpegs, c.matches(scr))
	}
	// A clock ticking in one tile does not hold up the others: noise
	// everywhere else, sent as JPEG again, still settles exact.
	scr.mu.Lock()
	for i := range scr.f.Pix {
		scr.f.Pix[i] = byte(rng.IntN(256))
	}
	scr.mu.Unlock()
	scr.damage <- toImage(Rect{0, 0, 256, 128})
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() { // the clock: ends with stop
		defer close(ticked)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			scr.paint(Rect{192, 64, 64, 64}, uint32(i*0x10101)&0xffffff)
		}
	}()
	exact := func() bool { // all but the clock's tile
		scr.mu.Lock()
		defer scr.mu.Unlock()
		for y := range 128 {
			for x := range 256 {
				if (x < 192 || y < 64) && diff(c.fb[y*c.w+x], quantise(c.pf, scr.f.bgr(x, y))) > 0 {
					return false
				}
			}
		}
		return true
	}
	deadline := time.Now().Add(5 * time.Second)
	for !exact() && time.Now().Before(deadline) {
		c.request(true)
		c.update()
	}
	close(stop)
	<-ticked
	if !exact() {
		t.Fatal("with a clock ticking, the still JPEG tiles were not refined")
	}
	for deadline := time.Now().Add(5 * time.Second); !c.matches(scr) && time.Now().Before(deadline); {
		c.request(true) // the clock's last tick, then nothing lossy left
		c.update()
	}

	// Nothing more to refine: the next request waits for a change.
	c.request(true)
	scr.paint(Rect{0, 0, 64, 64}, 0x123456)
	if rects := c.update(); len(rects) != 1 || !c.matches(scr) {
		t.Fatalf("after a change: %v", rects)
	}
}

// A refinement that fell due while the viewer did not ask (a slow
// viewer) yields to motion: the JPEG tiles changed again before it asked,
// so they go lossy (not a lossless copy of moving pixels, several times
// bigger), and are refined once still.
func TestRefinementYieldsToMotion(t *testing.T) {
	scr := newMemScreen(256, 128)
	rng := rand.New(rand.NewPCG(7, 8))
	noise := func() {
		scr.mu.Lock()
		for i := range scr.f.Pix {
			scr.f.Pix[i] = byte(rng.IntN(256))
		}
		scr.mu.Unlock()
	}
	noise()
	s := newTestServer(t, scr, "")
	c := noVNCViewer(t, s, EncTight, encJPEGQuality0+6)
	if c.jpegs == 0 {
		t.Fatal("first update: no JPEG")
	}
	time.Sleep(2 * refineDelay) // the refinement falls due; the viewer does not ask
	changeMarked(t, s, func() {
		noise()
		scr.damage <- toImage(Rect{0, 0, 256, 128})
	})
	jpegs := c.jpegs
	c.request(true)
	c.update()
	if c.jpegs == jpegs {
		t.Fatal("the moving picture went lossless: the refinement that was due did not yield")
	}
	for deadline := time.Now().Add(5 * time.Second); !c.matches(scr) && time.Now().Before(deadline); {
		c.request(true)
		c.update()
	}
	if !c.matches(scr) {
		t.Fatal("once still, the picture was not refined")
	}
}
