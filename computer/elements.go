package computer

import (
	"context"
	"errors"
	"fmt"
	"image"
	"strings"
	"time"

	"github.com/cubepod/deskd/a11y"
)

// Elements is where accessibility snapshots come from (a11y.Client over
// the desktop's accessibility bus).
type Elements interface {
	Snapshot(ctx context.Context, o a11y.Options) (*a11y.Snapshot, error)
	// Locate is where element id is now, in screen pixels.
	Locate(ctx context.Context, id string) (image.Rectangle, error)
}

// ErrNoElements is returned when the desktop exports no accessibility
// tree (no Elements, or the browser runs without accessibility).
var ErrNoElements = errors.New("no accessibility tree")

// ElementOptions select a snapshot; Region is in image space.
type ElementOptions struct {
	a11y.Options
	Region image.Rectangle
}

// Element is an accessible element in the default screenshot's image
// space: actions take Center as a coordinate, or ID as an element.
type Element struct {
	ID     string   `json:"id"`
	Depth  int      `json:"depth"`
	Role   string   `json:"role"`
	Name   string   `json:"name,omitempty"`
	Value  string   `json:"value,omitempty"`
	States []string `json:"states,omitempty"`
	Bounds []int    `json:"bounds,omitempty"` // x, y, width, height
	Center []int    `json:"center,omitempty"`
	// Caret is where the text caret is in the focused field, x, y,
	// width, height (an input method's window goes there).
	Caret       []int `json:"caret,omitempty"`
	Interactive bool  `json:"interactive,omitempty"`
}

// ElementList is a snapshot's answer.
type ElementList struct {
	Elements  []Element `json:"elements"`
	Visited   int       `json:"visited"`
	Truncated string    `json:"truncated,omitempty"`
	TookMS    float64   `json:"took_ms"`
	Geometry  Geometry  `json:"geometry"`
}

// Elements lists the accessible elements on the screen, their bounds
// and centres mapped as screenshots are.
func (c *Computer) Elements(ctx context.Context, o ElementOptions) (*ElementList, error) {
	src := c.cfg.Elements
	if src == nil {
		return nil, ErrNoElements
	}
	g := c.Geometry()
	o.Screen = image.Rect(0, 0, g.ScreenWidth, g.ScreenHeight)
	if !o.Region.Empty() {
		r, err := g.regionToScreen(o.Region)
		if err != nil {
			return nil, fmt.Errorf("region: %w", err)
		}
		o.Options.Region = r
	}
	start := time.Now()
	snap, err := src.Snapshot(ctx, o.Options)
	if err != nil {
		return nil, err
	}
	l := &ElementList{Elements: make([]Element, 0, len(snap.Elements)), Visited: snap.Visited, Truncated: snap.Truncated, Geometry: g}
	for _, e := range snap.Elements {
		out := Element{ID: e.ID, Depth: e.Depth, Role: e.Role, Name: e.Name, Value: e.Value, States: e.States, Interactive: e.Interactive}
		if b := e.Bounds.Intersect(o.Screen); !b.Empty() {
			p0, p1 := g.toImage(b.Min), g.toImage(b.Max.Sub(image.Pt(1, 1)))
			out.Bounds = []int{p0.X, p0.Y, p1.X - p0.X + 1, p1.Y - p0.Y + 1}
			m := g.toImage(center(b))
			out.Center = []int{m.X, m.Y}
		}
		if cr := e.Caret.Intersect(o.Screen); !cr.Empty() {
			p0, p1 := g.toImage(cr.Min), g.toImage(cr.Max.Sub(image.Pt(1, 1)))
			out.Caret = []int{p0.X, p0.Y, p1.X - p0.X + 1, p1.Y - p0.Y + 1}
		}
		l.Elements = append(l.Elements, out)
	}
	l.TookMS = float64(time.Since(start).Microseconds()) / 1000
	return l, nil
}

// center is the middle pixel of r.
func center(r image.Rectangle) image.Point {
	return image.Pt((r.Min.X+r.Max.X-1)/2, (r.Min.Y+r.Max.Y-1)/2)
}

// locate is where an action on element id goes: its centre on the screen
// (of the part that is on the screen).
func (c *Computer) locate(ctx context.Context, id string) (image.Point, error) {
	src := c.cfg.Elements
	if src == nil {
		return image.Point{}, ErrNoElements
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := src.Locate(ctx, id)
	if err != nil {
		return image.Point{}, err
	}
	w, h := c.d.Size()
	on := r.Intersect(image.Rect(0, 0, w, h))
	if on.Empty() {
		return image.Point{}, fmt.Errorf("%w: element %s is off the screen (%v): scroll it into view", ErrOutOfRange, id, r)
	}
	return center(on), nil
}

// Text is the list as an agent reads it: one element a line, indented by
// depth, with its centre.
//
//	[e12] push button "Submit" (focused) @ 33,258
func (l *ElementList) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d elements on a %dx%d screenshot", len(l.Elements), l.Geometry.ImageWidth, l.Geometry.ImageHeight)
	if l.Truncated != "" {
		fmt.Fprintf(&b, " (truncated: %s)", l.Truncated)
	}
	b.WriteString("; act on one with its centre as coordinate, or its id as element\n")
	for _, e := range l.Elements {
		b.WriteString(strings.Repeat("  ", min(e.Depth, 40)))
		fmt.Fprintf(&b, "[%s] %s", e.ID, e.Role)
		if e.Name != "" {
			fmt.Fprintf(&b, " %q", e.Name)
		}
		if e.Value != "" {
			fmt.Fprintf(&b, " value=%q", e.Value)
		}
		if len(e.States) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(e.States, ", "))
		}
		if e.Center != nil {
			fmt.Fprintf(&b, " @ %d,%d", e.Center[0], e.Center[1])
		}
		b.WriteByte('\n')
	}
	return b.String()
}
