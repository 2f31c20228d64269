package bridge

import (
	"encoding/binary"
	"errors"
	"image"
	"testing"
	"time"
)

// sizedScreen is a memScreen whose size can change up to a maximum.
type sizedScreen struct {
	*memScreen
	maxW, maxH int
	sizeCh     chan image.Point
}

func (m *sizedScreen) Resize(w, h int) (int, int, error) {
	if w < 1 || h < 1 {
		return 0, 0, errors.New("bad size")
	}
	w, h = min(w, m.maxW), min(h, m.maxH)
	m.setSize(w, h)
	return w, h, nil
}

func (m *sizedScreen) setSize(w, h int) {
	m.mu.Lock()
	m.f = testFrame(w, h)
	m.mu.Unlock()
	m.sizeCh <- image.Pt(w, h)
}

func (m *sizedScreen) SizeChanged() <-chan image.Point { return m.sizeCh }

func (m *memScreen) Size() (int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.f.W, m.f.H
}

func (c *rfbClient) setDesktopSize(w, h int) {
	b := []byte{msgSetDesktopSize, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(w))
	b = binary.BigEndian.AppendUint16(b, uint16(h))
	b = append(b, 1, 0)
	b = binary.BigEndian.AppendUint32(b, 0)
	for _, v := range []int{0, 0, w, h} {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	c.write(binary.BigEndian.AppendUint32(b, 0))
}

// sizeUpdate reads an update that must be a size message and returns it.
func (c *rfbClient) sizeUpdate() Rect {
	c.t.Helper()
	c.request(true)
	rs := c.update()
	if len(rs) != 1 || rs[0].W != -2 {
		c.t.Fatalf("update %v, want one size rectangle", rs)
	}
	return c.sizes[len(c.sizes)-1]
}

// fullUpdate asks for updates until the viewer's picture matches the
// screen: incremental ones, so after a resize it proves that the resize
// made everything dirty.
func (c *rfbClient) fullUpdate(scr *memScreen, incremental bool) {
	c.t.Helper()
	for range 10 {
		c.request(incremental)
		c.update()
		if c.matches(scr) {
			return
		}
	}
	c.t.Fatalf("viewer's %dx%d picture never matched the screen", c.w, c.h)
}

func TestSetDesktopSize(t *testing.T) {
	scr := &sizedScreen{memScreen: newMemScreen(200, 100), maxW: 300, maxH: 200, sizeCh: make(chan image.Point, 1)}
	s, err := NewServer(scr, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)

	ext := dialRFB(t, s, version38, "", ConnOptions{})
	ext.setEncodings(EncRaw, EncExtendedDesktopSize, EncDesktopSize)
	if r := ext.sizeUpdate(); r != (Rect{reasonServer, resizeOK, 200, 100}) {
		t.Fatalf("first ExtendedDesktopSize %+v", r)
	}
	ext.fullUpdate(scr.memScreen, false)
	plain := dialRFB(t, s, version38, "", ConnOptions{})
	plain.setEncodings(EncRaw, EncDesktopSize)
	plain.request(false)
	plain.update()
	blind := dialRFB(t, s, version38, "", ConnOptions{})
	blind.setEncodings(EncRaw)
	view := dialRFB(t, s, version38, "", ConnOptions{ViewOnly: true})
	view.setEncodings(EncRaw, EncExtendedDesktopSize)
	view.sizeUpdate()

	// The extended viewer asks: it gets reason "you", the others the new
	// size; a viewer that cannot follow is let go.
	ext.setDesktopSize(250, 150)
	if r := ext.sizeUpdate(); r != (Rect{reasonThisClient, resizeOK, 250, 150}) {
		t.Fatalf("answer to SetDesktopSize %+v", r)
	}
	ext.fullUpdate(scr.memScreen, true)
	if r := view.sizeUpdate(); r != (Rect{reasonOtherClient, resizeOK, 250, 150}) {
		t.Fatalf("other viewer got %+v", r)
	}
	if r := plain.sizeUpdate(); r.W != 250 || r.H != 150 {
		t.Fatalf("DesktopSize viewer got %+v", r)
	}
	plain.fullUpdate(scr.memScreen, true)
	blind.request(true) // its next update would be at a size it cannot take
	select {
	case err := <-blind.closed:
		if err == nil {
			t.Fatal("viewer without DesktopSize ended without an error")
		}
		blind.closed <- err
	case <-time.After(5 * time.Second):
		t.Fatal("viewer without DesktopSize still connected after a resize")
	}

	// Too big: clamped to what the screen allows.
	ext.setDesktopSize(999, 999)
	if r := ext.sizeUpdate(); r != (Rect{reasonThisClient, resizeOK, 300, 200}) {
		t.Fatalf("clamped answer %+v", r)
	}
	ext.fullUpdate(scr.memScreen, true)
	// The same size again: an answer, no change.
	ext.setDesktopSize(300, 200)
	if r := ext.sizeUpdate(); r != (Rect{reasonThisClient, resizeOK, 300, 200}) {
		t.Fatalf("answer for the same size %+v", r)
	}
	// A view-only viewer may not resize.
	view.sizeUpdate() // the 300x200 change
	view.setDesktopSize(100, 100)
	if r := view.sizeUpdate(); r != (Rect{reasonThisClient, resizeProhibited, 300, 200}) {
		t.Fatalf("view-only answer %+v", r)
	}
	// The screen changes by itself.
	scr.setSize(120, 80)
	if r := ext.sizeUpdate(); r != (Rect{reasonServer, resizeOK, 120, 80}) {
		t.Fatalf("server-side resize %+v", r)
	}
	ext.fullUpdate(scr.memScreen, true)
}

// A screen of fixed size refuses SetDesktopSize.
func TestSetDesktopSizeFixedScreen(t *testing.T) {
	scr := newMemScreen(64, 48)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw, EncExtendedDesktopSize)
	c.sizeUpdate()
	c.setDesktopSize(100, 100)
	if r := c.sizeUpdate(); r != (Rect{reasonThisClient, resizeProhibited, 64, 48}) {
		t.Fatalf("answer %+v", r)
	}
}
