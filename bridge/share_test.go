package bridge

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestSharedTiles: viewers with equal Tight settings get tiles encoded
// once; a viewer with other settings is not served from them; when the
// pair breaks up, the one left no longer uses the cache and still
// decodes everything, as noVNC does (its streams stay reset a
// rectangle: tightDecoder checks).
func TestSharedTiles(t *testing.T) {
	scr := newMemScreen(256, 192)
	s := newTestServer(t, scr, "")
	dial := func(encs ...int32) *rfbClient {
		c := dialRFB(t, s, version38, "", ConnOptions{})
		c.setPixelFormat(noVNCFormat)
		c.setEncodings(encs...)
		return c
	}
	a, b := dial(EncTight), dial(EncTight)
	other := dial(EncTight, encCompressLevel+9)
	catchUp := func(c *rfbClient, incremental bool) {
		t.Helper()
		for range 10 {
			c.request(incremental)
			c.update()
			if c.matches(scr) {
				return
			}
			incremental = true
		}
		t.Fatal("viewer never matched the screen")
	}
	for _, c := range []*rfbClient{a, b, other} {
		catchUp(c, false)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 6 {
		scr.paint(Rect{rng.IntN(192), rng.IntN(128), 64, 64}, rng.Uint32()&0xffffff)
		scr.paint(Rect{0, 0, 256, 192}, 0x204080+uint32(i)) // every tile changes
		for _, c := range []*rfbClient{a, b, other} {
			catchUp(c, true)
		}
	}
	if hits := s.cache.hits.Load(); hits == 0 {
		t.Fatal("no tile was shared between the two viewers with equal settings")
	}
	t.Logf("shared tiles: %d hits, %d misses", s.cache.hits.Load(), s.cache.misses.Load())

	// b leaves: a is alone with its settings again.
	b.c.Close()
	for deadline := time.Now().Add(5 * time.Second); s.peers(encKey{enc: EncTight, pf: noVNCFormat, quality: -1, level: 1}) > 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b still counted")
		}
	}
	hits := s.cache.hits.Load()
	for range 4 {
		// Blocks of many colours: every tile goes through a zlib stream.
		for y := 0; y < 192; y += 8 {
			for x := 0; x < 256; x += 8 {
				scr.paint(Rect{x, y, 8, 8}, rng.Uint32()&0xffffff)
			}
		}
		catchUp(a, true)
	}
	if s.cache.hits.Load() != hits {
		t.Fatal("a viewer alone with its settings still used the shared cache")
	}
}

// TestSharedJPEGRows: viewers sharing tiles still get a row of photo
// tiles as one JPEG rectangle, encoded once for both; a tile of text
// between photos splits the row.
func TestSharedJPEGRows(t *testing.T) {
	photo := photoFrame()
	scr := newMemScreen(640, 128)
	show := func(dx int, solid bool) {
		scr.mu.Lock()
		for y := range 128 {
			copy(scr.f.Pix[y*scr.f.Stride:(y+1)*scr.f.Stride], photo.Pix[y*photo.Stride+4*dx:])
			if solid && y < 64 { // a solid tile in the top row
				for x := 192; x < 256; x++ {
					copy(scr.f.at(x, y), []byte{0x99, 0x66, 0x33})
				}
			}
		}
		scr.mu.Unlock()
		scr.damage <- toImage(Rect{0, 0, 640, 128})
	}
	show(0, false)
	s := newTestServer(t, scr, "")
	a := noVNCViewer(t, s, EncTight, encJPEGQuality0+6)
	b := noVNCViewer(t, s, EncTight, encJPEGQuality0+6)
	for i := range 3 {
		show(8*(i+1), i == 2)
		var got [2][]Rect
		for j, c := range []*rfbClient{a, b} {
			c.request(true)
			got[j] = c.update()
		}
		want := 2 // a row of ten tiles a rectangle
		if i == 2 {
			want = 4 // the top row in three: photos, the solid tile, photos
		}
		for j := range got {
			if len(got[j]) != want {
				t.Fatalf("change %d, viewer %d: %d rectangles %v, want %d", i, j, len(got[j]), got[j], want)
			}
		}
	}
	if hits := s.cache.hits.Load(); hits < 6 {
		t.Fatalf("%d cache hits, want a row each for the second viewer", hits)
	}
}
