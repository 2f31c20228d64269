package bridge

import (
	"testing"
	"time"
)

func TestChangedBox(t *testing.T) {
	const w, h = 100, 70
	base := testFrame(w, h)
	for _, tc := range []struct {
		name   string
		change func(snap, fb *Frame)
		r      Rect
		want   Rect
		ok     bool
	}{
		{"same", func(snap, fb *Frame) {}, Rect{0, 0, w, h}, Rect{}, false},
		{"only the X byte differs", func(snap, fb *Frame) { fb.Pix[4*(5*w+5)+3] ^= 0x55 }, Rect{0, 0, w, h}, Rect{}, false},
		{"one pixel, even column", func(snap, fb *Frame) { fb.Pix[4*(5*w+6)] ^= 1 }, Rect{0, 0, w, h}, Rect{6, 5, 1, 1}, true},
		{"one pixel, odd column", func(snap, fb *Frame) { fb.Pix[4*(5*w+7)+2] ^= 1 }, Rect{0, 0, w, h}, Rect{7, 5, 1, 1}, true},
		{"two pixels far apart", func(snap, fb *Frame) {
			fb.Pix[4*(3*w+90)+1] ^= 1
			fb.Pix[4*(60*w+4)] ^= 1
		}, Rect{0, 0, w, h}, Rect{4, 3, 87, 58}, true},
		{"a change outside r is not seen", func(snap, fb *Frame) { fb.Pix[4*(5*w+6)] ^= 1 }, Rect{10, 10, 30, 30}, Rect{}, false},
		{"odd width: the last pixel", func(snap, fb *Frame) { fb.Pix[4*(12*w+42)] ^= 1 }, Rect{10, 10, 33, 20}, Rect{42, 12, 1, 1}, true},
		{"unknown pixels count as changed", func(snap, fb *Frame) { forget(snap, Rect{20, 30, 3, 2}) }, Rect{0, 0, w, h}, Rect{20, 30, 3, 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap, fb := newSnap(w, h), testFrame(w, h)
			copyKnown(snap, base, Rect{0, 0, w, h})
			tc.change(snap, fb)
			got, ok := changedBox(snap, fb, tc.r)
			if ok != tc.ok || got != tc.want {
				t.Fatalf("changedBox = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
			if ok {
				copyKnown(snap, fb, got)
				if _, again := changedBox(snap, fb, tc.r); again {
					t.Fatal("after copying the box, something still differs")
				}
			}
		})
	}
	if _, ok := changedBox(newSnap(w, h), base, Rect{0, 0, w, h}); !ok {
		t.Fatal("a new viewer's picture is unknown: everything differs")
	}
}

func TestMoveRows(t *testing.T) {
	const w, h = 64, 50
	for _, sc := range []scroll{
		{dst: Rect{0, 0, w, 40}, dy: 10},    // content moves up
		{dst: Rect{8, 12, 40, 38}, dy: -12}, // down, part of the columns
		{dst: Rect{0, 5, w, 1}, dy: 1},
	} {
		snap := testFrame(w, h)
		want := testFrame(w, h)
		before := testFrame(w, h)
		for y := sc.dst.Y; y < sc.dst.Y+sc.dst.H; y++ {
			for x := sc.dst.X; x < sc.dst.X+sc.dst.W; x++ {
				copy(want.at(x, y), before.at(x, y+sc.dy))
			}
		}
		moveRows(snap, sc)
		if string(snap.Pix) != string(want.Pix) {
			t.Fatalf("move %+v: rows not where a viewer's CopyRect puts them", sc)
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
