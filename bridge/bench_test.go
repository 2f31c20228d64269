package bridge

import (
	"image"
	"image/png"
	"math/rand/v2"
	"os"
	"testing"
)

// textFrame loads testdata/textpage.png, a capture of Chromium showing a
// page of text on the desktop (1280x800), as a BGRX frame.
func textFrame(tb testing.TB) *Frame {
	tb.Helper()
	f, err := os.Open("testdata/textpage.png")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		tb.Fatal(err)
	}
	b := img.Bounds()
	fr := NewFrame(b.Dx(), b.Dy())
	for y := range b.Dy() {
		for x := range b.Dx() {
			r, g, bl, _ := img.At(x, y).RGBA()
			p := fr.at(x, y)
			p[0], p[1], p[2] = byte(bl>>8), byte(g>>8), byte(r>>8)
		}
	}
	return fr
}

// photoFrame is a 1280x800 frame of gradients under grain, as the
// bench's gallery shows: every tile goes JPEG after its palette fails.
func photoFrame() *Frame {
	rng := rand.New(rand.NewPCG(9, 10))
	f := NewFrame(1280, 800)
	for y := range f.H {
		for x := range f.W {
			n := rng.IntN(41) - 20
			c := func(v int) byte { return byte(min(max(v+n, 0), 255)) }
			p := f.at(x, y)
			p[0], p[1], p[2] = c(200-(x+y)*120/2080), c(90+y*120/800), c(60+x*150/1280)
		}
	}
	return f
}

// BenchmarkEncodeFrame encodes a whole text frame in 64x64 tiles as an
// update to a noVNC-like viewer does.
func BenchmarkEncodeFrame(b *testing.B) {
	text, photo, gradient := textFrame(b), photoFrame(), gradientFrame()
	f := text
	var rects []Rect
	for y := 0; y < f.H; y += tile {
		for x := 0; x < f.W; x += tile {
			rects = append(rects, Rect{x, y, min(tile, f.W-x), min(tile, f.H-y)})
		}
	}
	for _, bc := range []struct {
		name    string
		f       *Frame
		enc     int32
		quality int
	}{
		{"tight-jpeg6", text, EncTight, 6}, {"tight-lossless", text, EncTight, -1}, {"zrle", text, EncZRLE, -1}, {"zlib", text, EncZlib, -1},
		{"photo/tight-jpeg6", photo, EncTight, 6}, {"gradient/tight-jpeg6", gradient, EncTight, 6},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEncoder(noVNCFormat)
			e.quality = bc.quality
			var out []byte
			for b.Loop() {
				out, _ = e.appendRects(out[:0], bc.f, rects, bc.enc, nil)
			}
			b.ReportMetric(float64(len(out))/1000, "KB/frame")
		})
	}
}

// lentScreen lends its frame as x11 lends its shared memory: the
// capture compares it in place.
type lentScreen struct{ *memScreen }

func (l lentScreen) CaptureShared(r image.Rectangle, fn func(pix []byte, stride int)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn(l.f.Pix, l.f.Stride)
	return nil
}

// BenchmarkScrollStep is the server's work for one step of the bench's
// gallery (photo-like pictures scrolled 120 px under a band of 87 rows
// that changes at each step, on a 1280x800 screen) for one viewer that
// takes CopyRect: the capture (compare, scroll search, copy into the
// framebuffer), then the viewer's picture moved and what the move does
// not explain encoded as Tight with JPEG. No I/O, no scheduling: what a
// live A/B measures under the noise of Chromium on the same cores.
func BenchmarkScrollStep(b *testing.B) {
	const w, h, band, step = 1280, 800, 87, 120
	photo := photoFrame() // 1280x800 of grain, repeated down a long page
	page := NewFrame(w, 4*h)
	for y := range page.H {
		copy(page.Pix[y*page.Stride:(y+1)*page.Stride], photo.Pix[(y%h)*photo.Stride:])
		for x := 0; x < w; x += 310 { // the gaps between pictures
			for i := range 6 * 4 {
				page.Pix[y*page.Stride+x*4+i] = 0x22
			}
		}
	}
	scr := lentScreen{newMemScreen(w, h)}
	show := func(off, k int) {
		f := scr.f
		for y := range band {
			for x := range w {
				p := f.at(x, y)
				p[0], p[1], p[2] = byte(k), byte(x/5+k), byte(y*3)
			}
		}
		copy(f.Pix[band*f.Stride:], page.Pix[off*page.Stride:(off+h-band)*page.Stride])
	}
	s, err := NewServer(scr, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	scratch := NewFrame(w, h)
	full := []Rect{{0, 0, w, h}}
	view := newSeen(w, h)
	enc := newEncoder(noVNCFormat)
	enc.quality = 6
	var out []byte
	var rects []Rect
	off, k := 0, 0
	reset := func() {
		off = 0
		show(off, k)
		s.capture(full, scratch, true, true)
		view.copyKnown(s.fb, full[0])
	}
	reset()
	sent, tiles := 0, 0
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if off+step+h-band > page.H {
			reset()
		}
		off, k = off+step, k+1
		show(off, k)
		b.StartTimer()
		_, sc := s.capture(full, scratch, true, false)
		if sc == nil {
			b.Fatalf("step %d: no scroll found", k)
		}
		if sc.dst.W != w || sc.dy != step {
			b.Fatalf("step %d: found %+v dy %d", k, sc.dst, sc.dy)
		}
		view.move(*sc)
		tiles += len(sc.rest)
		rects = rects[:0]
		for _, t := range sc.rest {
			if box, ok := view.changedBox(s.fb, t, true); ok {
				view.copyKnown(s.fb, box)
				rects = append(rects, box)
			}
		}
		out, _ = enc.appendRects(out[:0], view.Frame, rects, EncTight, nil)
		sent += len(out)
	}
	b.ReportMetric(float64(sent)/1000/float64(b.N), "KB/step")
	b.ReportMetric(float64(tiles)/float64(b.N), "tiles/step")
}

// BenchmarkVideoStep is the server's work for one frame of the motion
// bench's video (a 960x540 grainy picture panned a few pixels a frame,
// at 40,40 of a 1280x800 screen) for one viewer taking Tight with JPEG:
// the capture of the damaged box (sampled, copied into the
// framebuffer), the viewer's boxes copied into its picture, and the
// update encoded.
func BenchmarkVideoStep(b *testing.B) {
	const w, h, vw, vh = 1280, 800, 960, 540
	photo := photoFrame()
	scr := lentScreen{newMemScreen(w, h)}
	show := func(k int) {
		f := scr.f
		ox, oy := k*3%(photo.W-vw), k*2%(photo.H-vh)
		for y := range vh {
			copy(f.Pix[(40+y)*f.Stride+4*40:(40+y)*f.Stride+4*(40+vw)], photo.Pix[(oy+y)*photo.Stride+4*ox:])
		}
	}
	s, err := NewServer(scr, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	scratch := NewFrame(w, h)
	damage := []Rect{{40, 40, vw, vh}}
	view := newSeen(w, h)
	enc := newEncoder(noVNCFormat)
	enc.quality = 6
	show(0)
	s.capture([]Rect{{0, 0, w, h}}, scratch, false, true)
	view.copyKnown(s.fb, Rect{0, 0, w, h})
	var out []byte
	var rects []Rect
	sent := 0
	b.ResetTimer()
	for k := range b.N {
		b.StopTimer()
		show(k + 1)
		b.StartTimer()
		changed, _ := s.capture(damage, scratch, false, false)
		rects = rects[:0]
		for _, t := range changed {
			if box, ok := view.changedBox(s.fb, t, true); ok {
				view.copyKnown(s.fb, box)
				rects = append(rects, box)
			}
		}
		out, _ = enc.appendRects(out[:0], view.Frame, rects, EncTight, nil)
		sent += len(out)
	}
	b.ReportMetric(float64(sent)/1000/float64(b.N), "KB/frame")
}
