package bridge

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// One viewer past MaxViewers is refused in the handshake with a reason,
// in every protocol version; a place freed is taken again.
func TestMaxViewers(t *testing.T) {
	scr := newMemScreen(64, 64)
	s, err := NewServer(scr, Config{MaxViewers: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	a := dialRFB(t, s, version38, "", ConnOptions{})
	dialRFB(t, s, version38, "", ConnOptions{})
	for _, v := range []string{version33, version37, version38} {
		conn, done := serve(t, s, ConnOptions{})
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(conn)
		io.ReadFull(br, make([]byte, 12))
		conn.Write([]byte(v))
		head := make([]byte, 1)
		if v == version33 {
			head = make([]byte, 4)
		}
		if _, err := io.ReadFull(br, head); err != nil {
			t.Fatal(err)
		}
		if head[len(head)-1] != 0 {
			t.Fatalf("%q: security %v, want 0 (refused)", v[:11], head)
		}
		var n uint32
		binary.Read(br, binary.BigEndian, &n)
		reason := make([]byte, n)
		io.ReadFull(br, reason)
		if !strings.Contains(string(reason), "too many viewers") {
			t.Fatalf("%q: reason %q", v[:11], reason)
		}
		if err := <-done; !errors.Is(err, ErrTooManyViewers) {
			t.Fatalf("Serve = %v, want ErrTooManyViewers", err)
		}
		done <- nil // for the cleanup
	}
	a.c.Close()
	<-a.closed
	a.closed <- nil
	deadline := time.Now().Add(5 * time.Second)
	for s.conns.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the connection count drops as Serve returns
	}
	if dialRFB(t, s, version38, "", ConnOptions{}) == nil {
		t.Fatal("a freed place was not given to the next viewer")
	}
}

// A viewer that stops reading is dropped once a write has waited
// WriteTimeout, instead of holding its update (and memory) for ever.
func TestStalledViewerDropped(t *testing.T) {
	scr := newMemScreen(640, 480)
	s, err := NewServer(scr, Config{WriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw) // 1.2 MB: far more than a pipe holds
	c.request(false)
	select {
	case err := <-c.closed:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Serve ended with %v, want a write deadline", err)
		}
		c.closed <- err
	case <-time.After(10 * time.Second):
		t.Fatal("a viewer that reads nothing was not dropped")
	}
}

// A length field alone claims no memory: 16 MiB announced, 10 bytes sent.
func TestCutTextAllocatesWhatArrives(t *testing.T) {
	for _, ext := range []bool{false, true} {
		n := uint32(MaxCutText)
		if ext {
			n = uint32(-int32(n))
		}
		msg := binary.BigEndian.AppendUint32([]byte{msgClientCutText, 0, 0, 0}, n)
		msg = append(msg, "0123456789"...)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := ReadClientMessage(bytes.NewReader(msg))
		runtime.ReadMemStats(&after)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("err = %v, want unexpected EOF", err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Fatalf("extended=%v: %d bytes allocated for a 10-byte body", ext, got)
		}
	}
	// The extended clipboard's inflated size field likewise.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := parseProvide(clipFormatText, zlibOf(binary.BigEndian.AppendUint32(nil, MaxCutText)))
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("a provide message shorter than its size field was accepted")
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("provide: %d bytes allocated for a 4-byte body", got)
	}
}

func zlibOf(b []byte) []byte {
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(b)
	w.Close()
	return z.Bytes()
}

// A viewer that asks for a part of a tile gets that part once, not the
// same update again for every request while nothing changes.
func TestSubRectangleRequestsSettle(t *testing.T) {
	scr := newMemScreen(256, 256)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw)
	sub := Rect{10, 20, 30, 25} // inside tile (0,0), not all of it
	req := func(incremental bool, r Rect) {
		b := []byte{msgFBUpdateRequest, 0}
		if incremental {
			b[1] = 1
		}
		for _, v := range []int{r.X, r.Y, r.W, r.H} {
			b = binary.BigEndian.AppendUint16(b, uint16(v))
		}
		c.write(b)
	}
	req(false, sub)
	if got := c.update(); len(got) != 1 || got[0] != sub {
		t.Fatalf("first update %v, want %v", got, sub)
	}
	for range 3 { // nothing changed: each request waits
		req(true, sub)
		if typ, _, _, ok := c.serverMessage(300 * time.Millisecond); ok {
			t.Fatalf("message %d in answer to an unchanged sub-rectangle: an endless stream of identical updates", typ)
		}
	}
	scr.paint(Rect{0, 0, 64, 64}, 0x00ff00) // now it changed
	if got := c.update(); len(got) != 1 || got[0] != sub || !c.matchesIn(scr, sub) {
		t.Fatalf("after a change: update %v, want %v with the new pixels", got, sub)
	}
}

// matchesIn compares the viewer's picture with the screen inside r.
func (c *rfbClient) matchesIn(s *memScreen, r Rect) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for y := r.Y; y < r.Y+r.H; y++ {
		for x := r.X; x < r.X+r.W; x++ {
			if diff(c.fb[y*c.w+x], quantise(c.pf, s.f.bgr(x, y))) > 0 {
				return false
			}
		}
	}
	return true
}

// deskd does not use QEMU extended key events' scancodes, so it never
// confirms the pseudo-encoding: viewers then send plain KeyEvents.
func TestQEMUExtKeyNotAdvertised(t *testing.T) {
	scr := newMemScreen(64, 64)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setEncodings(EncRaw, EncQEMUExtKey)
	c.request(false)
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	h := c.read(4)
	for range binary.BigEndian.Uint16(h[2:]) {
		rh := c.read(12)
		r := Rect{int(binary.BigEndian.Uint16(rh)), int(binary.BigEndian.Uint16(rh[2:])), int(binary.BigEndian.Uint16(rh[4:])), int(binary.BigEndian.Uint16(rh[6:]))}
		if enc := int32(binary.BigEndian.Uint32(rh[8:])); enc == EncQEMUExtKey {
			t.Fatal("QEMU extended key event confirmed, but scancodes are not used")
		} else if enc == EncRaw {
			c.read(r.W * r.H * 4)
		}
	}
}

// Clipboard text over the limit is read and dropped, as TigerVNC does:
// the viewer stays connected and its next message is read as usual.
func TestCutTextOverLimitDropped(t *testing.T) {
	for _, ext := range []bool{false, true} {
		n := uint32(MaxCutText + 1)
		if ext {
			n = uint32(-int32(n))
		}
		msg := binary.BigEndian.AppendUint32([]byte{msgClientCutText, 0, 0, 0}, n)
		msg = append(msg, make([]byte, MaxCutText+1)...)
		msg = append(msg, msgKeyEvent, 1, 0, 0, 0, 0, 0, 'x')
		r := bytes.NewReader(msg)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m, err := ReadClientMessage(r)
		runtime.ReadMemStats(&after)
		if err != nil || m.Dropped != MaxCutText+1 || m.Text != nil {
			t.Fatalf("extended=%v: dropped %d, %d bytes kept, err %v", ext, m.Dropped, len(m.Text), err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
			t.Fatalf("extended=%v: %d bytes allocated to drop the text", ext, got)
		}
		if m, err = ReadClientMessage(r); err != nil || m.Type != msgKeyEvent || m.Keysym != 'x' {
			t.Fatalf("extended=%v: next message %+v %v", ext, m, err)
		}
	}
	// Announced but never sent: an error once the stream ends.
	msg := binary.BigEndian.AppendUint32([]byte{msgClientCutText, 0, 0, 0}, MaxCutText+1)
	if _, err := ReadClientMessage(bytes.NewReader(append(msg, "abc"...))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short oversize text: %v", err)
	}
}
