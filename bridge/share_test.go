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
