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

// moveSampleRows are the rows of a tile compared to tell whether it
// changed: spaced unevenly, so that lines of text (Chromium's 15 px
// text is 21 px a line) do not fit between them all.
var moveSampleRows = [...]int{11, 30, 53}

// anchorTries are the rows of a tile where an anchor is looked for when
// the row that told it changed has none.
var anchorTries = [...]int{11, 30, 53, 20, 42, 4, 60}

// Move search bounds.
const (
	moveReach    = 64 // farthest a move is looked for, each way (px)
	moveNear     = 8  // how far around the last move it is looked for first
	anchorLen    = 8  // pixels in an anchor
	moveAnchors  = 24 // anchors looked for at most
	anchorStride = 7  // the order they are taken in: k*7 mod 24, spread from the start
	anchorEarly  = 8  // anchors found before a search with no two agreeing gives up
	anchorEnough = 8  // anchors agreeing that end the search
	// anchorHits bounds the places one anchor votes for; one that
	// matches at more than anchorMaxHits is no evidence (a blank, a rule).
	anchorHits    = 6
	anchorMaxHits = 48
)

// moveScratch holds the move search's memory between captures: its
// votes, its tile map and the last move found, which the next search
// tries first (a drag moves by about as much each frame).
type moveScratch struct {
	rowAt  []int    // per tile of the box: a row of it that changed, or -1
	points [][2]int // where anchors are looked for: changed tiles' rows, inner ones first
	inner  int      // how many of points are inside the changed area
	border [][2]int
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
	ms.sample(old, new, box) // once for both searches: the same pictures
	if ms.last {
		if sc, ok := ms.search(old, new, box, ms.dx, ms.dy, moveNear); ok {
			ms.dx, ms.dy = sc.dx, sc.dy // a drag speeding up is followed
			return sc, true
		}
	}
	sc, ok := ms.search(old, new, box, 0, 0, moveReach)
	ms.dx, ms.dy, ms.last = sc.dx, sc.dy, ok
	return sc, ok
}

// sample finds where anchors are looked for: three rows of each tile
// compared where they are tell which tiles changed (a window dragged
// over a big box changes a part of it). Tiles inside the changed area
// come first (ms.inner of them): those at its border hold what goes with
// a moved window without moving with it (its shadow, what it uncovered).
func (ms *moveScratch) sample(old, new *Frame, box Rect) {
	cols, rows := (box.W+tile-1)/tile, (box.H+tile-1)/tile
	ms.rowAt = slices.Grow(ms.rowAt[:0], cols*rows)[:cols*rows]
	for ty := range rows {
		for tx := range cols {
			x, w := box.X+tx*tile, min(tile, box.X+box.W-(box.X+tx*tile))
			ms.rowAt[ty*cols+tx] = -1
			for _, dy := range moveSampleRows {
				y := box.Y + ty*tile + dy
				i, j := y*new.Stride+4*x, y*old.Stride+4*x
				if y < box.Y+box.H && !rowsEqual(new.Pix[i:i+4*w], old.Pix[j:j+4*w]) {
					ms.rowAt[ty*cols+tx] = y
					break
				}
			}
		}
	}
	changed := func(tx, ty int) bool {
		return tx >= 0 && ty >= 0 && tx < cols && ty < rows && ms.rowAt[ty*cols+tx] >= 0
	}
	ms.points, ms.border = ms.points[:0], ms.border[:0]
	for ty := range rows {
		for tx := range cols {
			if !changed(tx, ty) {
				continue
			}
			p := [2]int{box.X + tx*tile, ms.rowAt[ty*cols+tx]}
			if changed(tx-1, ty) && changed(tx+1, ty) && changed(tx, ty-1) && changed(tx, ty+1) {
				ms.points = append(ms.points, p)
			} else {
				ms.border = append(ms.border, p)
			}
		}
	}
	ms.inner = len(ms.points)
	ms.points = append(ms.points, ms.border...)
}

// search votes with anchors, at the places sample found, for a move
// within reach of (cx, cy) and checks the best.
func (ms *moveScratch) search(old, new *Frame, box Rect, cx, cy, reach int) (scroll, bool) {
	ms.votes = ms.votes[:0]
	anchors := 0
	for k := range min(len(ms.points), moveAnchors) {
		// Where the first few agree on nothing the search is left at
		// that (video, an animation: the search costs little where it
		// fails).
		if anchors == anchorEarly && !slices.ContainsFunc(ms.votes, func(v moveVote) bool { return v.n >= 2 }) {
			return scroll{}, false
		}
		p := ms.points[spread(k, ms.inner, len(ms.points))]
		// The row that changed may be blank where it is now (text moved
		// off it): the tile's other rows are tried.
		ax, ay, ok := anchorAt(old, new, box, p[0], p[1])
		for top, r := box.Y+(p[1]-box.Y)/tile*tile, 0; !ok && r < len(anchorTries); r++ {
			if y := top + anchorTries[r]; y != p[1] && y < box.Y+box.H {
				ax, ay, ok = anchorAt(old, new, box, p[0], y)
			}
		}
		if !ok {
			continue
		}
		anchors++
		ms.hits = findAnchor(ms.hits[:0], old, new, ax, ay, cx, cy, reach)
		if len(ms.hits) > anchorMaxHits {
			continue
		}
		if len(ms.hits) > anchorHits {
			// A piece of something repeated (a dithered title bar, a
			// window's edge): it votes for the places nearest to where
			// the move is looked for, as likely as any and as a small
			// move is likelier than a far one.
			slices.SortFunc(ms.hits, func(a, b moveVote) int {
				return abs(a.dx-cx) + abs(a.dy-cy) - abs(b.dx-cx) - abs(b.dy-cy)
			})
			ms.hits = ms.hits[:anchorHits]
		}
		for _, h := range ms.hits {
			i := slices.IndexFunc(ms.votes, func(v moveVote) bool { return v.dx == h.dx && v.dy == h.dy })
			if i < 0 {
				ms.votes = append(ms.votes, moveVote{h.dx, h.dy, 0})
				i = len(ms.votes) - 1
			}
			if ms.votes[i].n++; ms.votes[i].n >= anchorEnough {
				return ms.check(old, new, box, h.dx, h.dy) // as many agree as it takes
			}
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

// spread returns the k-th of the places where anchors are looked for,
// of n, the first inner of them inside the changed area: those first,
// each group taken spread over it (k*7 mod 24 of 24 parts) while it has
// more than needed.
func spread(k, inner, n int) int {
	pick := func(k, n int) int {
		if n <= moveAnchors {
			return k
		}
		return (k * anchorStride) % moveAnchors * n / moveAnchors
	}
	if k < inner {
		return pick(k, inner)
	}
	return inner + pick(k-inner, n-inner)
}

// anchorAt finds, from x on along row y of box, a piece of the new
// picture that changed and is not flat: anchorLen pixels whose first
// differs from the one before it and from the one after it (two pixels
// are what the search compares first: two alike, the page's background,
// would match nearly everywhere).
func anchorAt(old, new *Frame, box Rect, x, y int) (ax, ay int, ok bool) {
	const mask = 0x00ffffff
	end := min(box.X+box.W, x+tile) - anchorLen
	for ; x < end; x++ {
		i := y*new.Stride + 4*x
		p := new.Pix[i : i+4*anchorLen]
		first := binary.LittleEndian.Uint32(p) & mask
		if binary.LittleEndian.Uint32(p[4:])&mask == first ||
			x > box.X && binary.LittleEndian.Uint32(new.Pix[i-4:])&mask == first { // new holds box only
			continue
		}
		j := y*old.Stride + 4*x
		if !rowsEqual(p, old.Pix[j:j+4*anchorLen]) { // unchanged here: not evidence of a move
			return x, y, true
		}
	}
	return 0, 0, false
}

// findAnchor appends the shifts (dx, dy) within reach of (cx, cy) at
// which the old picture holds the anchor at x, y of the new one, up to
// one more than anchorMaxHits.
func findAnchor(hits []moveVote, old, new *Frame, x, y, cx, cy, reach int) []moveVote {
	const mask = 0x00ffffff00ffffff
	i := y*new.Stride + 4*x
	a := new.Pix[i : i+4*anchorLen]
	first := binary.LittleEndian.Uint64(a) & mask // two pixels: one is too common (white)
	x0, x1 := max(0, x+cx-reach), min(old.W-anchorLen, x+cx+reach)
	if x0 > x1 { // around a last move that would take the anchor off the screen
		return hits
	}
	for sy := max(0, y+cy-reach); sy <= min(old.H-1, y+cy+reach); sy++ {
		row := old.Pix[sy*old.Stride+4*x0 : sy*old.Stride+4*(x1+anchorLen)]
		for k := 0; k+len(a) <= len(row); k += 4 {
			if binary.LittleEndian.Uint64(row[k:])&mask != first || !rowsEqual(a, row[k:k+len(a)]) {
				continue
			}
			if hits = append(hits, moveVote{dx: x0 + k/4 - x, dy: sy - y}); len(hits) > anchorMaxHits {
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

// growMove grows d, where the move holds, to the columns beside it
// where the move holds over all of d's rows, then to the rows above and
// below where it holds across (within box, less than a tile each way:
// d is a box of whole tiles that moved).
func growMove(old, new *Frame, box, d Rect, dx, dy int) Rect {
	const mask = 0x00ffffff
	same := func(x, y int) bool {
		return binary.LittleEndian.Uint32(new.Pix[y*new.Stride+4*x:])&mask ==
			binary.LittleEndian.Uint32(old.Pix[(y+dy)*old.Stride+4*(x+dx):])&mask
	}
	// Columns: how far each row's match runs beyond d, the least of them.
	left := min(tile-1, d.X-box.X, d.X+dx)
	right := min(tile-1, box.X+box.W-d.X-d.W, old.W-(d.X+d.W+dx))
	for y := d.Y; y < d.Y+d.H && left+right > 0; y++ {
		for k := 1; k <= left; k++ {
			if !same(d.X-k, y) {
				left = k - 1
			}
		}
		for k := 0; k < right; k++ {
			if !same(d.X+d.W+k, y) {
				right = k
			}
		}
	}
	d.X, d.W = d.X-left, d.W+left+right
	// Rows, across the columns now.
	row := func(y int) bool { return movedFrom(old, new, Rect{d.X, y, d.W, 1}, dx, dy) }
	for k := 0; k < tile-1 && d.Y > box.Y && row(d.Y-1); k++ {
		d.Y, d.H = d.Y-1, d.H+1
	}
	for k := 0; k < tile-1 && d.Y+d.H < box.Y+box.H && row(d.Y+d.H); k++ {
		d.H++
	}
	return d
}
