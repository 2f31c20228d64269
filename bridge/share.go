package bridge

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Sharing encoded tiles between viewers. Tight's zlib streams persist per
// viewer, so a rectangle's bytes normally depend on everything sent to
// that viewer before. A viewer whose settings (encoding, pixel format,
// JPEG quality, compression level) equal another's instead gets its
// whole tiles encoded independently (each resets the stream it uses, as
// Tight's control byte allows), and such a tile, at a given content
// version, is encoded once and sent to all of them. The price is the
// dictionary across tiles; it is paid only while viewers share settings.

// encKey is what a tile's encoding depends on besides its pixels.
type encKey struct {
	enc            int32
	pf             PixelFormat
	quality, level int
}

// tileCache keeps the latest independent encoding of each tile.
type tileCache struct {
	mu      sync.Mutex
	entries map[int]cachedTile
	hits    atomic.Int64
	misses  atomic.Int64
}

// cachedTile is the body of one rectangle made of the tile at its index
// and the tiles right of it in the row (JPEG rows are merged, as for a
// viewer alone: appendTightMerged), at their versions.
type cachedTile struct {
	versions []uint64
	key      encKey
	body     []byte
}

// get returns the body cached at idx and how many tiles it covers when
// they are the first of versions (the next rectangles' tile versions, in
// order).
func (tc *tileCache) get(idx int, versions []uint64, key encKey) ([]byte, int, bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	e, ok := tc.entries[idx]
	if !ok || e.key != key || len(e.versions) > len(versions) || !slices.Equal(e.versions, versions[:len(e.versions)]) {
		tc.misses.Add(1)
		return nil, 0, false
	}
	tc.hits.Add(1)
	return e.body, len(e.versions), true
}

func (tc *tileCache) put(idx int, versions []uint64, key encKey, body []byte) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.entries == nil {
		tc.entries = map[int]cachedTile{}
	}
	tc.entries[idx] = cachedTile{slices.Clone(versions), key, body}
}

func (tc *tileCache) clear() {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	clear(tc.entries)
}

// sharing is what appendRects needs to share tiles: the cache, the
// viewer's settings, and each rectangle's tile index and content version
// (version 0: not a whole tile, not shared).
type sharing struct {
	cache    *tileCache
	key      encKey
	idx      []int
	versions []uint64
}

func (sh *sharing) part(from, to int) *sharing {
	if sh == nil {
		return nil
	}
	return &sharing{cache: sh.cache, key: sh.key, idx: sh.idx[from:to], versions: sh.versions[from:to]}
}

// tileIndex returns r's index when r is a whole tile of a w-wide frame.
func tileIndex(r Rect, w, h int) (int, bool) {
	if r.X%tile != 0 || r.Y%tile != 0 || r.W != min(tile, w-r.X) || r.H != min(tile, h-r.Y) {
		return 0, false
	}
	return r.Y/tile*((w+tile-1)/tile) + r.X/tile, true
}

// bumpVersions gives every tile of the frame a new content version (a
// new frame); callers hold s.mu.
func (s *Server) bumpVersions() {
	cols, rows := (s.fb.W+tile-1)/tile, (s.fb.H+tile-1)/tile
	if len(s.versions) != cols*rows {
		s.versions = make([]uint64, cols*rows)
	}
	s.gen++
	for i := range s.versions {
		s.versions[i] = s.gen
	}
	s.cache.clear()
}

// peers counts the viewers whose settings are key (the caller
// included). A recorder's own connection is not one: sharing would make
// the viewers' streams independent for good (encode.go), a cost they
// would keep after the recorder has switched to following one of them
// (tap.go).
func (s *Server) peers(key encKey) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for c := range s.clients {
		c.mu.Lock()
		if c.key == key && !c.recorder {
			n++
		}
		c.mu.Unlock()
	}
	return n
}
