package bridge

import (
	"encoding/binary"
	"slices"
)

// A window dragged, a dialog slid in, a map panned: a box whose content
// moves sideways as well as up or down, which the row hashes of a scroll
// search cannot see (a row of the box is the moved content in part
// only, and shifted). Pieces of the new picture ("anchors") are looked
// for in the old one nearby; the shift most of them agree on is checked
// tile by tile, and the tiles where it holds, grown to the exact edge of
// what moved, go as one CopyRect. Whatever else changed (the shadow
// around a window, what it uncovered) goes as pixels, cut to the
// changed pixels by each viewer's picture (seen.go).

// Move search bounds.
const (
	moveReach    = 64 // farthest a move is looked for from the last one, each way (px)
	moveNear     = 4  // how far around the last move it is looked for first
	anchorLen    = 8  // pixels in an anchor
	moveAnchors  = 24 // anchors looked for at most
	anchorStride = 7  // the order they are taken in: k*7 mod 24, spread from the start
	anchorEarly  = 8  // anchors found before a search with no two agreeing gives up
	// anchorHits bounds the places one anchor may match: more means it
	// is a piece of something repeated (a blank, a rule), no evidence.
	anchorHits = 6
)

// moveScratch holds the move search's memory between captures: its
// votes, its tile map and the last move found, which the next search
// tries first (a drag moves by about as much each frame).
type moveScratch struct {
	points [][2]int // where anchors are looked for: changed tiles' rows
	votes  []moveVote
	hits   []moveVote
	match  []bool // per tile of the box: the move holds over it
	dx, dy int    // the last move found, if last
	last   bool
}

type moveVote struct{ dx, dy, n int }

// detectMove looks for the content of box moved by some (dx, dy) from
// old to new: first near the last move found, then anywhere within
// moveReach. It returns the move with its destination and the tiles
// inside it where the move does not hold (bad).
func detectMove(old, new *Frame, box Rect, ms *moveScratch) (scroll, bool) {
	if ms.last {
		if sc, ok := ms.search(old, new, box, ms.dx, ms.dy, moveNear); ok {
			return sc, true
		}
	}
	sc, ok := ms.search(old, new, box, 0, 0, moveReach)
	ms.dx, ms.dy, ms.last = sc.dx, sc.dy, ok
	return sc, ok
}

// search votes with anchors for a move within reach of (cx, cy) and
// checks the best.
func (ms *moveScratch) search(old, new *Frame, box Rect, cx, cy, reach int) (scroll, bool) {
	// Anchors are looked for in tiles that changed: two rows of each
	// tile compared where they are tell which (a window dragged over a
	// big box changes a part of it).
	ms.points = ms.points[:0]
	for y0 := box.Y; y0 < box.Y+box.H; y0 += tile {
		for _, y := range []int{y0 + tile/3, y0 + 2*tile/3} {
			if y >= box.Y+box.H {
				continue
			}
			for x := box.X; x < box.X+box.W; x += tile {
				w := min(tile, box.X+box.W-x)
				i, j := y*new.Stride+4*x, y*old.Stride+4*x
				if !rowsEqual(new.Pix[i:i+4*w], old.Pix[j:j+4*w]) {
					ms.points = append(ms.points, [2]int{x, y})
				}
			}
		}
	}
	ms.votes = ms.votes[:0]
	anchors, n := 0, len(ms.points)
	for k := range min(n, moveAnchors) {
		// Spread over the changed tiles, the first few too: where they
		// agree on nothing the search is left at that (video, an
		// animation: the search costs little where it fails).
		if anchors == anchorEarly && !slices.ContainsFunc(ms.votes, func(v moveVote) bool { return v.n >= 2 }) {
			return scroll{}, false
		}
		p := ms.points[(k*anchorStride)%moveAnchors*n/moveAnchors]
		if n < moveAnchors {
			p = ms.points[k]
		}
		ax, ok := anchorAt(old, new, box, p[0], p[1])
		if !ok {
			continue
		}
		anchors++
		ms.hits = findAnchor(ms.hits[:0], old, new, ax, p[1], cx, cy, reach)
		if len(ms.hits) > anchorHits {
			continue
		}
		for _, h := range ms.hits {
			i := slices.IndexFunc(ms.votes, func(v moveVote) bool { return v.dx == h.dx && v.dy == h.dy })
			if i < 0 {
				ms.votes = append(ms.votes, moveVote{h.dx, h.dy, 0})
				i = len(ms.votes) - 1
			}
			ms.votes[i].n++
		}
	}
	// The shift most anchors agree on: at least three, and a quarter of
	// those found (the rest may lie on what did not move).
	best := moveVote{n: max(2, anchors/4-1)}
	for _, v := range ms.votes {
		if v.n > best.n || (v.n == best.n && best.dx|best.dy != 0 && abs(v.dx)+abs(v.dy) < abs(best.dx)+abs(best.dy)) {
			best = v
		}
	}
	if best.dx == 0 && best.dy == 0 {
		return scroll{}, false
	}
	return ms.check(old, new, box, best.dx, best.dy)
}

// anchorAt finds, from x on along row y of box, a piece of the new
// picture that changed and is not flat: anchorLen pixels whose first
// differs from the one before it and which hold two colours at least.
func anchorAt(old, new *Frame, box Rect, x, y int) (int, bool) {
	const mask = 0x00ffffff
	end := min(box.X+box.W, x+tile) - anchorLen
	for ; x < end; x++ {
		i := y*new.Stride + 4*x
		p := new.Pix[i : i+4*anchorLen]
		first := binary.LittleEndian.Uint32(p) & mask
		if x > box.X && binary.LittleEndian.Uint32(new.Pix[i-4:])&mask == first { // new holds box only
			continue
		}
		j := y*old.Stride + 4*x
		if rowsEqual(p, old.Pix[j:j+4*anchorLen]) {
			continue // unchanged here: not evidence of a move
		}
		for k := 4; k < len(p); k += 4 {
			if binary.LittleEndian.Uint32(p[k:])&mask != first {
				return x, true
			}
		}
	}
	return 0, false
}

// findAnchor appends the shifts (dx, dy) within reach of (cx, cy) at
// which the old picture holds the anchor at x, y of the new one, up to
// one more than anchorHits.
func findAnchor(hits []moveVote, old, new *Frame, x, y, cx, cy, reach int) []moveVote {
	const mask = 0x00ffffff00ffffff
	i := y*new.Stride + 4*x
	a := new.Pix[i : i+4*anchorLen]
	first := binary.LittleEndian.Uint64(a) & mask // two pixels: one is too common (white)
	x0, x1 := max(0, x+cx-reach), min(old.W-anchorLen, x+cx+reach)
	for sy := max(0, y+cy-reach); sy <= min(old.H-1, y+cy+reach); sy++ {
		row := old.Pix[sy*old.Stride+4*x0 : sy*old.Stride+4*(x1+anchorLen)]
		for k := 0; k+len(a) <= len(row); k += 4 {
			if binary.LittleEndian.Uint64(row[k:])&mask != first || !rowsEqual(a, row[k:k+len(a)]) {
				continue
			}
			if hits = append(hits, moveVote{dx: x0 + k/4 - x, dy: sy - y}); len(hits) > anchorHits {
				return hits
			}
		}
	}
	return hits
}

// check finds where the move (dx, dy) holds in box: the tiles whose
// pixels all came from (dx, dy) away, their bounding box grown to the
// exact edge of what moved. It fails when the move holds over fewer
// than two tiles, or over less than half of that box (a match in a
// blank stretch, not a move).
func (ms *moveScratch) check(old, new *Frame, box Rect, dx, dy int) (scroll, bool) {
	cols, rows := (box.W+tile-1)/tile, (box.H+tile-1)/tile
	ms.match = slices.Grow(ms.match[:0], cols*rows)[:cols*rows]
	var bound Rect
	n := 0
	for ty := range rows {
		for tx := range cols {
			t := Rect{box.X + tx*tile, box.Y + ty*tile, 0, 0}
			t.W, t.H = min(tile, box.X+box.W-t.X), min(tile, box.Y+box.H-t.Y)
			ok := movedFrom(old, new, t, dx, dy)
			ms.match[ty*cols+tx] = ok
			if !ok {
				continue
			}
			n++
			if bound.Empty() {
				bound = t
			} else {
				bound = union(bound, t)
			}
		}
	}
	if n < 2 {
		return scroll{}, false
	}
	inside := (bound.W + tile - 1) / tile * ((bound.H + tile - 1) / tile)
	if 2*n < inside {
		return scroll{}, false
	}
	sc := scroll{dst: growMove(old, new, box, bound, dx, dy), dx: dx, dy: dy}
	fcols := (new.W + tile - 1) / tile
	for ty := (bound.Y - box.Y) / tile; ty < (bound.Y-box.Y+bound.H+tile-1)/tile; ty++ {
		for tx := (bound.X - box.X) / tile; tx < (bound.X-box.X+bound.W+tile-1)/tile; tx++ {
			if !ms.match[ty*cols+tx] {
				sc.bad = append(sc.bad, (box.Y/tile+ty)*fcols+box.X/tile+tx)
			}
		}
	}
	return sc, true
}

// movedFrom reports whether every pixel of r in new is the one dx, dy
// away in old (which holds all of them).
func movedFrom(old, new *Frame, r Rect, dx, dy int) bool {
	if r.Empty() || r.X+dx < 0 || r.Y+dy < 0 || r.X+r.W+dx > old.W || r.Y+r.H+dy > old.H {
		return false
	}
	for y := r.Y; y < r.Y+r.H; y++ {
		i, j := y*new.Stride+4*r.X, (y+dy)*old.Stride+4*(r.X+dx)
		if !rowsEqual(new.Pix[i:i+4*r.W], old.Pix[j:j+4*r.W]) {
			return false
		}
	}
	return true
}

// growMove grows d, where the move holds, a column or a row at a time
// while the move holds over the whole new edge, within box.
func growMove(old, new *Frame, box, d Rect, dx, dy int) Rect {
	grow := func(e Rect) bool {
		if e.Intersect(box) != e || !movedFrom(old, new, e, dx, dy) {
			return false
		}
		d = union(d, e)
		return true
	}
	for grown := true; grown; {
		// Each edge as d is after the one before: a corner is checked
		// with the row or column it ends.
		left := grow(Rect{d.X - 1, d.Y, 1, d.H})
		right := grow(Rect{d.X + d.W, d.Y, 1, d.H})
		above := grow(Rect{d.X, d.Y - 1, d.W, 1})
		below := grow(Rect{d.X, d.Y + d.H, d.W, 1})
		grown = left || right || above || below
	}
	return d
}
