package bridge

import "time"

// Sampled change detection. Applications repaint far more than changes:
// Chromium puts its whole 1271x708 textarea on the screen at every
// keystroke, 20 times a second for a fast typist, and comparing all of
// it with the framebuffer was 45% of deskd's CPU while typing (x11vnc
// compares one scanline in 32 and never the rest). Here a big damaged
// box is compared first on every sampleStep-th row of each tile, a
// different row each capture: a tile whose sampled rows differ changed,
// and is taken whole at once. The others are suspects: they are compared
// in full once big damage has stopped for verifyQuiet, or verifyMax
// after the first of them at the latest (a change between the sampled
// rows, a one-pixel line, shows up at the next capture whose rows hit it,
// or then). So the viewers always end up with the exact screen, and a
// typed character, many rows of ink, goes at once.
const (
	sampleStep    = 8         // a row in 8 of each tile is compared first
	sampleMinArea = 256 * 256 // smaller boxes are compared in full
	verifyQuiet   = 100 * time.Millisecond
	verifyMax     = time.Second
)

// sampler is the capture loop's (its fields under s.mu where the
// compare runs, which is all the tests need to read them).
type sampler struct {
	phase   int       // the row of each sampleStep compared this capture
	suspect []bool    // per tile: damaged, sampled rows unchanged, not compared in full since
	n       int       // suspects
	first   time.Time // when the oldest suspect was noted
	last    time.Time // the last capture that sampled
}

// reset forgets every suspect, for a framebuffer of tiles tiles (a new
// size: it is captured in full).
func (p *sampler) reset(tiles int) {
	if len(p.suspect) != tiles {
		p.suspect = make([]bool, tiles)
	} else {
		clear(p.suspect)
	}
	p.n = 0
}

func (p *sampler) mark(i int, now time.Time) {
	if p.suspect[i] {
		return
	}
	if p.n == 0 {
		p.first = now
	}
	p.suspect[i] = true
	p.n++
}

func (p *sampler) clear(i int) {
	if p.suspect[i] {
		p.suspect[i] = false
		p.n--
	}
}

// due returns how long until the suspects are to be compared in full
// (0: now); ok is false when there are none.
func (p *sampler) due(now time.Time) (time.Duration, bool) {
	if p.n == 0 {
		return 0, false
	}
	at := p.last.Add(verifyQuiet)
	if latest := p.first.Add(verifyMax); latest.Before(at) {
		at = latest
	}
	return max(at.Sub(now), 0), true
}

// suspects returns the suspect tiles of a w×h framebuffer as rectangles.
func (p *sampler) suspects(w, h int) []Rect {
	cols := (w + tile - 1) / tile
	var out []Rect
	for i, b := range p.suspect {
		if b {
			tx, ty := i%cols*tile, i/cols*tile
			out = append(out, Rect{tx, ty, min(tile, w-tx), min(tile, h-ty)})
		}
	}
	return out
}

// sampledDiffer reports whether tile t differs between a and b on its
// rows t.Y+phase, t.Y+phase+sampleStep, ... (the X byte ignored).
// A tile of fewer rows than phase (the screen's last) is compared on
// row phase mod its height.
func sampledDiffer(a, b *Frame, t Rect, phase int) bool {
	for y := t.Y + phase%t.H; y < t.Y+t.H; y += sampleStep {
		i, j := y*a.Stride+4*t.X, y*b.Stride+4*t.X
		if !rowsEqual(a.Pix[i:i+4*t.W], b.Pix[j:j+4*t.W]) {
			return true
		}
	}
	return false
}

// copyTile copies tile t from src to dst.
func copyTile(dst, src *Frame, t Rect) {
	for y := t.Y; y < t.Y+t.H; y++ {
		i, j := y*dst.Stride+4*t.X, y*src.Stride+4*t.X
		copy(dst.Pix[i:i+4*t.W], src.Pix[j:j+4*t.W])
	}
}
