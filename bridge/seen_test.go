package bridge

import (
	"strings"
	"testing"
	"time"
)

func TestChangedBox(t *testing.T) {
	const w, h = 100, 70
	base := testFrame(w, h)
	for _, tc := range []struct {
		name   string
		change func(snap *seen, fb *Frame)
		r      Rect
		want   Rect
		ok     bool
	}{
		{"same", func(snap *seen, fb *Frame) {}, Rect{0, 0, w, h}, Rect{}, false},
		{"only the X byte differs", func(snap *seen, fb *Frame) { fb.Pix[4*(5*w+5)+3] ^= 0x55 }, Rect{0, 0, w, h}, Rect{}, false},
		{"one pixel, even column", func(snap *seen, fb *Frame) { fb.Pix[4*(5*w+6)] ^= 1 }, Rect{0, 0, w, h}, Rect{6, 5, 1, 1}, true},
		{"one pixel, odd column", func(snap *seen, fb *Frame) { fb.Pix[4*(5*w+7)+2] ^= 1 }, Rect{0, 0, w, h}, Rect{7, 5, 1, 1}, true},
		{"two pixels far apart", func(snap *seen, fb *Frame) {
			fb.Pix[4*(3*w+90)+1] ^= 1
			fb.Pix[4*(60*w+4)] ^= 1
		}, Rect{0, 0, w, h}, Rect{4, 3, 87, 58}, true},
		{"a change outside r is not seen", func(snap *seen, fb *Frame) { fb.Pix[4*(5*w+6)] ^= 1 }, Rect{10, 10, 30, 30}, Rect{}, false},
		{"odd width: the last pixel", func(snap *seen, fb *Frame) { fb.Pix[4*(12*w+42)] ^= 1 }, Rect{10, 10, 33, 20}, Rect{42, 12, 1, 1}, true},
		{"the X byte differs in the picture", func(snap *seen, fb *Frame) { snap.Pix[4*(5*w+5)+3] ^= 0x55 }, Rect{0, 0, w, h}, Rect{}, false},
		{"unknown pixels at a word's edges", func(snap *seen, fb *Frame) { snap.forget(Rect{63, 1, 2, 1}) }, Rect{0, 0, w, h}, Rect{63, 1, 2, 1}, true},
		{"an unknown pixel and a change", func(snap *seen, fb *Frame) {
			snap.forget(Rect{70, 40, 1, 1})
			fb.Pix[4*(50*w+2)] ^= 1
		}, Rect{0, 0, w, h}, Rect{2, 40, 69, 11}, true},
		{"unknown pixels count as changed", func(snap *seen, fb *Frame) { snap.forget(Rect{20, 30, 3, 2}) }, Rect{0, 0, w, h}, Rect{20, 30, 3, 2}, true},
		{"unknown pixels count for a lossy update too", func(snap *seen, fb *Frame) { snap.forget(Rect{20, 30, 3, 2}) }, Rect{0, 0, w, h}, Rect{20, 30, 3, 2}, true},
		{"JPEG of what the screen shows: lossless", func(snap *seen, fb *Frame) { snap.approximate(Rect{62, 10, 5, 4}) }, Rect{0, 0, w, h}, Rect{62, 10, 5, 4}, true},
		{"JPEG of what the screen shows: lossy", func(snap *seen, fb *Frame) { snap.approximate(Rect{62, 10, 5, 4}) }, Rect{0, 0, w, h}, Rect{}, false},
		{"JPEG of what changed since: lossy", func(snap *seen, fb *Frame) {
			snap.approximate(Rect{62, 10, 5, 4})
			fb.Pix[4*(12*w+64)+1] ^= 1
		}, Rect{0, 0, w, h}, Rect{64, 12, 1, 1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lossy := strings.Contains(tc.name, "lossy")
			snap, fb := newSeen(w, h), testFrame(w, h)
			snap.copyKnown(base, Rect{0, 0, w, h})
			tc.change(snap, fb)
			got, ok := snap.changedBox(fb, tc.r, lossy)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("changedBox = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
			if ok {
				snap.copyKnown(fb, got)
				if _, again := snap.changedBox(fb, tc.r, lossy); again {
					t.Fatal("after copying the box, something still differs")
				}
			}
		})
	}
	if _, ok := newSeen(w, h).changedBox(base, Rect{0, 0, w, h}, true); !ok {
		t.Fatal("a new viewer's picture is unknown: everything differs")
	}
}

// TestSeenMove: a move takes pixels and what is known of them where a
// viewer's CopyRect takes its pixels, over columns that straddle words
// of the bitmap.
func TestSeenMove(t *testing.T) {
	const w, h = 150, 50
	unknown := func(p *seen, x, y int) bool { return p.unknown[y*p.words+x/64]>>(x%64)&1 != 0 }
	approx := func(p *seen, x, y int) bool { return p.approx[y*p.words+x/64]>>(x%64)&1 != 0 }
	for _, sc := range []scroll{
		{dst: Rect{0, 0, w, 40}, dy: 10},     // content moves up
		{dst: Rect{8, 12, 120, 38}, dy: -12}, // down, part of the columns
		{dst: Rect{60, 5, 70, 1}, dy: 1},
		{dst: Rect{64, 0, 64, 30}, dy: 20},         // one whole word
		{dst: Rect{10, 5, 70, 30}, dx: 7, dy: 3},   // a window dragged
		{dst: Rect{70, 20, 75, 20}, dx: -9},        // sideways only, within the rows
		{dst: Rect{3, 30, 60, 20}, dx: 65, dy: -2}, // more than a word
		{dst: Rect{66, 2, 80, 40}, dx: -66, dy: 1},
	} {
		fb := testFrame(w, h)
		p := newSeen(w, h)
		p.copyKnown(fb, Rect{0, 0, w, h})
		p.approximate(Rect{50, 20, 40, 9}) // JPEG
		p.forget(Rect{130, 45, 5, 2})
		p.forget(Rect{60, 24, 3, 3})
		before := newSeen(w, h)
		copy(before.Pix, p.Pix)
		copy(before.unknown, p.unknown)
		copy(before.approx, p.approx)
		p.move(sc)
		for y := range h {
			for x := range w {
				sx, sy := x, y
				if sc.dst.Intersect(Rect{x, y, 1, 1}) == (Rect{x, y, 1, 1}) {
					sx, sy = sx+sc.dx, sy+sc.dy
				}
				if string(p.at(x, y)) != string(before.at(sx, sy)) || unknown(p, x, y) != unknown(before, sx, sy) || approx(p, x, y) != approx(before, sx, sy) {
					t.Fatalf("move %+v: pixel %d,%d is not what was at %d,%d", sc, x, y, sx, sy)
				}
			}
		}
	}
}

// A tile that changed and changed back before the viewer asked is not
// sent: the viewer has it already.
func TestChangeRevertedNotSent(t *testing.T) {
	scr := newMemScreen(300, 200)
	s := newTestServer(t, scr, "")
	c := dialRFB(t, s, version38, "", ConnOptions{})
	c.setPixelFormat(noVNCFormat)
	c.setEncodings(EncTight, EncRaw)
	c.tight.pf = c.pf
	c.request(false)
	c.update()
	n := scr.captureCount()
	scr.paint(Rect{10, 10, 5, 5}, 0x123456)
	c.request(true)
	if rects := c.update(); len(rects) != 1 || rects[0] != (Rect{10, 10, 5, 5}) {
		t.Fatalf("update %v, want the painted box", rects)
	}
	scr.settle(t, n)
	n = scr.captureCount()
	scr.paint(Rect{10, 10, 5, 5}, 0xfedcba)
	scr.settle(t, n)
	n = scr.captureCount()
	scr.paint(Rect{10, 10, 5, 5}, 0x123456) // back as the viewer has it
	scr.settle(t, n)
	c.request(true)
	if _, _, _, ok := c.serverMessage(200 * time.Millisecond); ok {
		t.Fatal("an update for a tile the viewer has as it is")
	}
	scr.paint(Rect{200, 150, 3, 3}, 0x00ff00)
	if rects := c.update(); len(rects) != 1 || rects[0] != (Rect{200, 150, 3, 3}) {
		t.Fatalf("update %v, want only the new change", rects)
	}
	if !c.matches(scr) {
		t.Fatal("the viewer's picture does not match the screen")
	}
}

// naiveChangedBox is changedBox by looking at every pixel.
func naiveChangedBox(snap *seen, fb *Frame, r Rect, lossy bool) (Rect, bool) {
	var box Rect
	for y := r.Y; y < r.Y+r.H; y++ {
		for x := r.X; x < r.X+r.W; x++ {
			a, b := snap.at(x, y), fb.at(x, y)
			bit := func(m []uint64) bool { return m[y*snap.words+x/64]>>(x%64)&1 != 0 }
			if a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && !bit(snap.unknown) && (lossy || !bit(snap.approx)) {
				continue
			}
			if p := (Rect{x, y, 1, 1}); box.Empty() {
				box = p
			} else {
				box = union(box, p)
			}
		}
	}
	return box, !box.Empty()
}

// FuzzChangedBox compares changedBox with looking at every pixel, on
// pictures that differ in a few places chosen by the input.
func FuzzChangedBox(f *testing.F) {
	f.Add(uint8(17), uint8(9), uint8(1), uint8(2), uint8(13), uint8(5), []byte{3, 4, 1, 16, 8, 2})
	f.Add(uint8(64), uint8(64), uint8(0), uint8(0), uint8(64), uint8(64), []byte{0, 0, 0, 63, 63, 3})
	f.Add(uint8(5), uint8(3), uint8(0), uint8(0), uint8(5), uint8(3), []byte{})
	f.Fuzz(func(t *testing.T, w, h, rx, ry, rw, rh uint8, changes []byte) {
		lossy := rw&0x80 != 0
		W, H := int(w)%150+1, int(h)%40+1
		r := Rect{int(rx) % W, int(ry) % H, 0, 0}
		r.W, r.H = int(rw)%(W-r.X)+1, int(rh)%(H-r.Y)+1
		fb := testFrame(W, H)
		snap := newSeen(W, H)
		snap.copyKnown(fb, Rect{0, 0, W, H})
		for i := 0; i+2 < len(changes) && i < 60; i += 3 { // x, y, what
			x, y := int(changes[i])%W, int(changes[i+1])%H
			switch k := changes[i+2] % 4; k {
			case 0, 1, 2: // a colour byte
				fb.at(x, y)[k] ^= 0x11
			case 3: // unknown to the viewer, or JPEG: a span of up to 64 pixels
				span := Rect{x, y, min(W-x, 1+int(changes[i+2]>>2)%32), 1}
				if changes[i+2]&0x80 != 0 {
					snap.approximate(span)
				} else {
					snap.forget(span)
				}
			}
			if changes[i+2]&0x80 != 0 {
				fb.at(x, y)[3] ^= 0xff // the X byte never counts
			}
		}
		got, ok := snap.changedBox(fb, r, lossy)
		want, wantOK := naiveChangedBox(snap, fb, r, lossy)
		if got != want || ok != wantOK {
			t.Fatalf("%dx%d in %v (lossy %v): changedBox = %v, %v; every pixel says %v, %v", W, H, r, lossy, got, ok, want, wantOK)
		}
	})
}

// A non-incremental request is answered with the whole area even when
// the viewer has all of it already (RFC 6143 §7.5.3): viewers ask again
// that way to repair their picture, and wait for the answer.
func TestFullRequestAlwaysAnswered(t *testing.T) {
	scr := newMemScreen(200, 130)
	s := newTestServer(t, scr, "")
	c := noVNCViewer(t, s, EncTight, EncCopyRect)
	for i := range 3 {
		c.request(false)
		rects := c.update()
		if area(rects) != 200*130 {
			t.Fatalf("request %d in full: sent %v", i, rects)
		}
		if !c.matches(scr) {
			t.Fatal("the viewer's picture does not match the screen")
		}
	}
	// Incremental again: nothing changed, so nothing comes.
	c.request(true)
	if _, _, _, ok := c.serverMessage(200 * time.Millisecond); ok {
		t.Fatal("an update with nothing changed")
	}
}
