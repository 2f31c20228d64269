package bench

import (
	"image"
	"testing"
)

// A viewer has shown a page frame when its tag's colour changes to
// another tag colour: repeats, colours that are no tag's (something over
// the tag) and JPEG's small errors do not count.
func TestPageFrames(t *testing.T) {
	v := &viewer{w: 64, h: 64, fb: make([]uint32, 64*64)}
	p := &pageFrames{at: image.Pt(16, 16), last: -1}
	for i, tc := range []struct {
		colour uint32
		want   bool
	}{
		{tagColours[0], true},
		{tagColours[0], false},
		{tagColours[1] ^ 0x0a0b0c, true}, // JPEG-ish: still colour 1
		{0xffffff, false},                // covered: no tag colour
		{tagColours[1], false},
		{tagColours[5], true}, // frames 2-4 skipped: one frame shown
		{tagColours[0], true},
	} {
		v.fb[16*64+16] = tc.colour
		if got := p.saw(v); got != tc.want {
			t.Fatalf("step %d (%06x): saw %v, want %v", i, tc.colour, got, tc.want)
		}
	}
	var none *pageFrames // an untagged page
	if none.saw(v) {
		t.Fatal("a page without a tag showed a frame")
	}
	for i, a := range tagColours { // the colours are told apart under JPEG's error
		for j, b := range tagColours {
			if i != j && near(a, b, 2*tagTolerance) {
				t.Errorf("tag colours %06x and %06x are too close", a, b)
			}
		}
	}
}
