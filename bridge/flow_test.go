package bridge

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// serverMessage reads the next server message: an update is applied
// (its type returned), a fence returned with its flags and payload.
func (c *rfbClient) serverMessage(wait time.Duration) (typ byte, flags uint32, payload []byte, ok bool) {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(wait))
	defer c.c.SetReadDeadline(time.Time{})
	b, err := c.br.Peek(1)
	if err != nil {
		return 0, 0, nil, false // nothing within wait
	}
	switch b[0] {
	case msgFramebufferUpdate:
		c.update()
		return msgFramebufferUpdate, 0, nil, true
	case msgEndOfContUpdates:
		c.read(1)
		return msgEndOfContUpdates, 0, nil, true
	case msgServerFence:
		h := c.read(9)
		return msgServerFence, binary.BigEndian.Uint32(h[4:]), c.read(int(h[8])), true
	}
	c.t.Fatalf("server message type %d", b[0])
	return 0, 0, nil, false
}

func (c *rfbClient) expect(typ byte) (uint32, []byte) {
	c.t.Helper()
	got, flags, payload, ok := c.serverMessage(5 * time.Second)
	if !ok || got != typ {
		c.t.Fatalf("got message %d (ok %v), want %d", got, ok, typ)
	}
	return flags, payload
}

func (c *rfbClient) enableCU(enable bool) {
	b := []byte{msgEnableContUpdates, 0, 0, 0, 0, 0}
	if enable {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint16(b, uint16(c.w))
	c.write(binary.BigEndian.AppendUint16(b, uint16(c.h)))
}

func (c *rfbClient) clientFence(flags uint32, payload []byte) {
	b := binary.BigEndian.AppendUint32([]byte{msgFence, 0, 0, 0}, flags)
	c.write(append(append(b, byte(len(payload))), payload...))
}

func TestContinuousUpdatesPacedByFences(t *testing.T) {
	scr := newMemScreen(128, 64)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw, EncContinuousUpdates, EncFence)
	c.expect(msgEndOfContUpdates) // the offer
	c.request(false)
	c.expect(msgFramebufferUpdate)
	c.enableCU(true)

	// Changes are pushed without requests, each followed by a fence.
	var fences [][]byte
	for i, colour := range []uint32{0xff0000, 0x00ff00} {
		scr.paint(Rect{0, 0, 64, 64}, colour)
		c.expect(msgFramebufferUpdate)
		flags, payload := c.expect(msgServerFence)
		if flags&fenceRequest == 0 || binary.BigEndian.Uint32(payload) != uint32(i+1) {
			t.Fatalf("fence %d: flags %#x payload %x", i, flags, payload)
		}
		fences = append(fences, payload)
	}
	// A full window: a third change waits, until answers free it.
	onlyViewer(s, func(v *client) { v.cong.window = 1 })
	scr.paint(Rect{64, 0, 64, 64}, 0x0000ff)
	if typ, _, _, ok := c.serverMessage(300 * time.Millisecond); ok {
		t.Fatalf("message %d sent with the window full", typ)
	}
	c.clientFence(fenceBlockBefore, fences[0])
	c.clientFence(fenceBlockBefore, fences[1]) // nothing in flight: room
	c.expect(msgFramebufferUpdate)
	c.expect(msgServerFence)
	if !c.matches(scr) {
		t.Fatal("pushed updates do not add up to the screen")
	}

	// The viewer's own fence request is answered, unknown flags dropped.
	c.clientFence(fenceRequest|fenceBlockBefore|1<<5, []byte("ab"))
	flags, payload := c.expect(msgServerFence)
	if flags != fenceBlockBefore || string(payload) != "ab" {
		t.Fatalf("fence answer flags %#x payload %q", flags, payload)
	}
	// Disabling ends with EndOfContinuousUpdates; then requests rule again.
	c.enableCU(false)
	c.expect(msgEndOfContUpdates)
	scr.paint(Rect{0, 0, 32, 32}, 0xffffff)
	if typ, _, _, ok := c.serverMessage(300 * time.Millisecond); ok {
		t.Fatalf("message %d pushed after continuous updates ended", typ)
	}
	c.request(true)
	c.expect(msgFramebufferUpdate)
}

func TestContinuousUpdatesNeedTheOffer(t *testing.T) {
	scr := newMemScreen(64, 64)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw) // neither pseudo-encoding
	c.enableCU(true)
	select {
	case err := <-c.closed:
		if !errors.Is(err, ErrProtocol) {
			t.Fatalf("Serve ended with %v, want a protocol error", err)
		}
		c.closed <- err
	case <-time.After(5 * time.Second):
		t.Fatal("EnableContinuousUpdates without the offer was accepted")
	}
}

func TestFenceDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type push struct {
		bytes int
		at    time.Duration // after t0
		full  bool          // the window is full after it
		fence bool
	}
	for _, tc := range []struct {
		name   string
		pushes []push
	}{
		{"the first is fenced", []push{{100, 0, false, true}}},
		{"small ones wait for the bytes", []push{
			{100, 0, false, true},
			{6 << 10, time.Millisecond, false, false},
			{6 << 10, 2 * time.Millisecond, false, false},
			{4<<10 - 1, 3 * time.Millisecond, false, false},
			{1, 4 * time.Millisecond, false, true},
			{10, 5 * time.Millisecond, false, false},
		}},
		{"or for the gap", []push{
			{100, 0, false, true},
			{200, fenceMaxGap - 1, false, false},
			{300, fenceMaxGap, false, true},
			{10, fenceMaxGap + 1, false, false},
		}},
		{"or for a full window", []push{
			{100, 0, false, true},
			{200, time.Millisecond, false, false},
			{300, 2 * time.Millisecond, true, true},
		}},
		{"a big one is fenced at once", []push{
			{100, 0, false, true},
			{fenceMinBytes, time.Millisecond, false, true},
			{fenceMinBytes + 1, 2 * time.Millisecond, false, true},
		}},
		{"a clock stepping back waits for the bytes", []push{
			{100, time.Hour, false, true},
			{100, 0, false, false},
			{fenceMinBytes, 0, false, true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f flow
			for i, p := range tc.pushes {
				if fence := f.fenceDue(p.bytes, t0.Add(p.at), p.full); fence != p.fence {
					t.Fatalf("push %d: fence %v, want %v", i, fence, p.fence)
				}
			}
		})
	}
}

// TestSmallPushedUpdatesShareAFence: pushed updates under fenceMinBytes
// go without a fence request until the bytes add up or fenceMaxGap has
// passed, and are not counted in flight: the fence that follows
// acknowledges them all.
func TestSmallPushedUpdatesShareAFence(t *testing.T) {
	scr := newMemScreen(128, 64)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw, EncContinuousUpdates, EncFence)
	c.expect(msgEndOfContUpdates)
	c.request(false)
	c.expect(msgFramebufferUpdate)
	c.enableCU(true)
	lastFence := func(at time.Time) { onlyViewer(s, func(v *client) { v.flow.fenced = at }) }
	noFence := func(what string) {
		t.Helper()
		if typ, _, _, ok := c.serverMessage(300 * time.Millisecond); ok {
			t.Fatalf("%s: message %d, want nothing", what, typ)
		}
	}

	// Three 32×32 Raw updates (4 KiB each) within the gap: no fence, and
	// none in flight, so none holds the next back.
	for i, colour := range []uint32{0xff0000, 0x00ff00, 0x0000ff} {
		lastFence(time.Now().Add(time.Hour)) // the gap has not passed
		scr.paint(Rect{32 * i, 0, 32, 32}, colour)
		c.expect(msgFramebufferUpdate)
		noFence("a small update")
	}
	onlyViewer(s, func(v *client) {
		if len(v.cong.pings) != 0 {
			t.Fatalf("%d fences unanswered, want 0", len(v.cong.pings))
		}
	})
	// The fourth makes 16 KiB: a fence follows it.
	scr.paint(Rect{96, 0, 32, 32}, 0xffff00)
	c.expect(msgFramebufferUpdate)
	if flags, _ := c.expect(msgServerFence); flags&fenceRequest == 0 {
		t.Fatalf("fence flags %#x", flags)
	}
	// A small one once the gap has passed is fenced too.
	lastFence(time.Now().Add(-fenceMaxGap))
	scr.paint(Rect{0, 32, 8, 8}, 0xffffff)
	c.expect(msgFramebufferUpdate)
	c.expect(msgServerFence)
	onlyViewer(s, func(v *client) {
		if len(v.cong.pings) != 2 {
			t.Fatalf("%d fences unanswered, want the 2 sent", len(v.cong.pings))
		}
	})
	if !c.matches(scr) {
		t.Fatal("pushed updates do not add up to the screen")
	}
}
