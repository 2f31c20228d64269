package bridge

import (
	"encoding/binary"
	"testing"
)

func TestDamageBoxes(t *testing.T) {
	const w, h = 1280, 800
	for _, tc := range []struct {
		name    string
		damaged []Rect
		want    []Rect
	}{
		{"nothing", nil, nil},
		{"outside the screen", []Rect{{2000, 10, 5, 5}, {-50, -50, 10, 10}}, nil},
		{"one glyph", []Rect{{70, 70, 9, 16}}, []Rect{{64, 64, 64, 64}}},
		{"caret and a typed line far below", []Rect{{4, 4, 24, 24}, {14, 400, 1122, 35}},
			[]Rect{{0, 0, 64, 64}, {0, 384, 1152, 64}}},
		{"a line over two tile rows extends one box", []Rect{{100, 120, 200, 20}},
			[]Rect{{64, 64, 256, 128}}},
		{"two columns apart stay two boxes", []Rect{{0, 0, 10, 300}, {600, 0, 10, 300}},
			[]Rect{{0, 0, 64, 320}, {576, 0, 64, 320}}},
		{"mostly covered: the bounding box", []Rect{{0, 0, 1280, 700}, {0, 760, 10, 10}},
			[]Rect{{0, 0, 1280, 800}}},
		{"the last tile row and column are short", []Rect{{1270, 790, 30, 30}},
			[]Rect{{1216, 768, 64, 32}}},
		{"too many boxes: the bounding box", func() []Rect {
			var rs []Rect
			for i := range 10 {
				rs = append(rs, Rect{i * 128, i * 70, 4, 4})
			}
			return rs
		}(), []Rect{{0, 0, 1216, 640}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sc regionScratch
			got := damageBoxes(tc.damaged, w, h, &sc)
			if len(got) != len(tc.want) {
				t.Fatalf("boxes %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("boxes %v, want %v", got, tc.want)
				}
			}
			checkBoxes(t, tc.damaged, got, w, h)
		})
	}
}

// checkBoxes: disjoint, inside the screen, tile-aligned, at most
// maxCaptureBoxes, covering every damaged pixel on the screen.
func checkBoxes(t *testing.T, damaged, boxes []Rect, w, h int) {
	t.Helper()
	full := Rect{0, 0, w, h}
	if len(boxes) > maxCaptureBoxes {
		t.Fatalf("%d boxes", len(boxes))
	}
	for i, b := range boxes {
		if b.Empty() || b.Intersect(full) != b || b.X%tile != 0 || b.Y%tile != 0 {
			t.Fatalf("box %v: empty, off the screen or not tile-aligned", b)
		}
		for _, o := range boxes[i+1:] {
			if !b.Intersect(o).Empty() {
				t.Fatalf("boxes %v and %v overlap", b, o)
			}
		}
	}
	for _, r := range damaged {
		r = r.Intersect(full)
		for y := r.Y; y < r.Y+r.H; y++ {
			for x := r.X; x < r.X+r.W; x++ {
				in := false
				for _, b := range boxes {
					in = in || (x >= b.X && x < b.X+b.W && y >= b.Y && y < b.Y+b.H)
				}
				if !in {
					t.Fatalf("damaged pixel (%d,%d) of %v in no box of %v", x, y, r, boxes)
				}
			}
		}
	}
}

// FuzzDamageBoxes: whatever the damage (from the X server, which may
// report anything inside or outside the screen), the boxes cover it.
func FuzzDamageBoxes(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 10, 0, 10}, uint16(300), uint16(200))
	f.Add([]byte{1, 0, 0, 0, 0, 64, 0, 64, 0, 5, 0, 100, 0, 1, 0, 1}, uint16(1280), uint16(800))
	f.Fuzz(func(t *testing.T, data []byte, w, h uint16) {
		sw, sh := int(w%2048)+1, int(h%2048)+1
		var damaged []Rect
		for len(data) >= 8 && len(damaged) < 64 {
			v := func(i int) int { return int(int16(binary.BigEndian.Uint16(data[i:]))) }
			damaged = append(damaged, Rect{v(0) % 2100, v(2) % 2100, abs(v(4)) % 600, abs(v(6)) % 600})
			data = data[8:]
		}
		var sc regionScratch
		for range 2 { // the scratch reused gives the same answer
			checkBoxes(t, damaged, damageBoxes(damaged, sw, sh, &sc), sw, sh)
		}
	})
}
