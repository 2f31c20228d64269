package bridge

// Damage as a set of tiles. The capture loop used to capture and compare
// the bounding box of everything damaged since the last capture: a caret
// blinking at the top and a glyph typed further down made it compare
// every row in between (typing: 52% of deskd's CPU in memeqbody). It now
// captures the tile-aligned boxes the damage covers, a few of them.

// maxCaptureBoxes bounds the captures (X round trips) per pass; damage
// spread wider than this is captured as fewer, larger boxes.
const maxCaptureBoxes = 8

// regionScratch is damageBoxes' reusable memory (the capture loop's).
type regionScratch struct {
	bits  []bool
	boxes []Rect
	open  []int // indices into boxes of the previous tile row's runs
	next  []int
}

// damageBoxes returns disjoint tile-aligned boxes (clipped to the w×h
// screen) covering every damaged rectangle, at most maxCaptureBoxes.
// Each tile row's runs of damaged tiles become boxes, and a run with
// the same columns as one in the row above extends it. When the boxes
// would be too many, or they cover most of their bounding box anyway,
// the bounding box alone is returned (one capture).
func damageBoxes(damaged []Rect, w, h int, sc *regionScratch) []Rect {
	cols, rows := (w+tile-1)/tile, (h+tile-1)/tile
	if cap(sc.bits) < cols*rows {
		sc.bits = make([]bool, cols*rows)
	}
	bits := sc.bits[:cols*rows]
	clear(bits)
	full := Rect{0, 0, w, h}
	var bound Rect
	marked := 0
	for _, r := range damaged {
		r = r.Intersect(full)
		if r.Empty() {
			continue
		}
		if bound.Empty() {
			bound = r
		} else {
			bound = union(bound, r)
		}
		for ty := r.Y / tile; ty <= (r.Y+r.H-1)/tile; ty++ {
			for tx := r.X / tile; tx <= (r.X+r.W-1)/tile; tx++ {
				if !bits[ty*cols+tx] {
					bits[ty*cols+tx] = true
					marked++
				}
			}
		}
	}
	if bound.Empty() {
		return nil
	}
	aligned := alignToTiles(bound, w, h)
	tilesIn := ((aligned.W + tile - 1) / tile) * ((aligned.H + tile - 1) / tile)
	if 4*marked >= 3*tilesIn { // mostly covered: one capture
		return append(sc.boxes[:0], aligned)
	}
	boxes := sc.boxes[:0]
	sc.open = sc.open[:0]
	for ty := aligned.Y / tile; ty*tile < aligned.Y+aligned.H; ty++ {
		sc.next = sc.next[:0]
		for tx := aligned.X / tile; tx*tile < aligned.X+aligned.W; {
			if !bits[ty*cols+tx] {
				tx++
				continue
			}
			x0 := tx
			for tx < cols && bits[ty*cols+tx] {
				tx++
			}
			run := Rect{x0 * tile, ty * tile, min(w, tx*tile) - x0*tile, min(tile, h-ty*tile)}
			extended := false
			for _, i := range sc.open {
				if b := &boxes[i]; b.X == run.X && b.W == run.W && b.Y+b.H == run.Y {
					b.H += run.H
					sc.next = append(sc.next, i)
					extended = true
					break
				}
			}
			if !extended {
				sc.next = append(sc.next, len(boxes))
				boxes = append(boxes, run)
			}
		}
		sc.open, sc.next = sc.next, sc.open
	}
	sc.boxes = boxes
	if len(boxes) > maxCaptureBoxes {
		return append(boxes[:0], aligned)
	}
	return boxes
}

// alignToTiles grows r to whole tiles of the w×h screen.
func alignToTiles(r Rect, w, h int) Rect {
	x0, y0 := r.X/tile*tile, r.Y/tile*tile
	x1, y1 := min(w, (r.X+r.W+tile-1)/tile*tile), min(h, (r.Y+r.H+tile-1)/tile*tile)
	return Rect{x0, y0, x1 - x0, y1 - y0}
}
