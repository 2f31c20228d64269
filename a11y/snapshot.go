package a11y

import (
	"context"
	"fmt"
	"image"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/godbus/dbus/v5"
)

// Options select and bound a snapshot.
type Options struct {
	// All lists hidden elements too; by default only those showing on
	// the screen are (three in four of a browser's are not), and a
	// hidden element's subtree is not walked.
	All bool
	// Interactive lists only elements one acts on (buttons, fields,
	// links, tabs, focusable elements), with the depth among them.
	Interactive bool
	// Full lists unnamed containers (panels, sections) too.
	Full bool
	// Screen is the screen's rectangle: elements entirely off it are
	// not listed (empty: no such check). Region, when not empty, lists
	// only elements that overlap it. Both in screen pixels.
	Screen, Region image.Rectangle
	// MaxNodes bounds the elements listed (default DefaultMaxNodes, at
	// most MaxNodes); MaxDepth the tree's depth walked (default and
	// bound MaxDepth); Timeout the walk (default DefaultTimeout, at most
	// MaxTimeout). A snapshot that hits one says so in Truncated.
	MaxNodes int
	MaxDepth int
	Timeout  time.Duration
}

// Bounds of Options.
const (
	DefaultMaxNodes = 1000
	MaxNodes        = 20_000
	MaxDepth        = 256
	DefaultTimeout  = 5 * time.Second
	MaxTimeout      = 30 * time.Second
	// maxVisited bounds the objects asked about in one snapshot, listed
	// or not; maxKids the children taken of one object.
	maxVisited = 100_000
	maxKids    = 10_000
	// MaxName bounds a name or a value, in bytes.
	MaxName = 512
	// bigKids is the most children taken with one GetChildren call.
	bigKids = 500
	// inFlight is how many objects are asked about at once: D-Bus calls
	// cost a round trip through the bus each (40-70 µs), so they are
	// pipelined.
	inFlight = 16
)

// Element is one accessible element.
type Element struct {
	ID     string
	Depth  int // among the elements listed
	Role   string
	Name   string
	Value  string
	States []string
	Bounds image.Rectangle // screen pixels; empty for applications
	// Caret is where the text caret is, for the focused editable element
	// (a 1-pixel-wide rectangle in screen pixels; empty otherwise).
	Caret       image.Rectangle
	Interactive bool
}

// Snapshot is what a walk found.
type Snapshot struct {
	Elements []Element
	// Visited is how many objects were asked about.
	Visited int
	// Truncated says why the listing is incomplete: "" (it is not),
	// "max_nodes", "time", "size" (an object with more children than
	// deskd takes, or more objects in all).
	Truncated string
}

// node is an object during a walk.
type node struct {
	ref    ref
	depth  int
	kids   []*node
	role   string
	name   string
	value  string
	st     stateSet
	rect   image.Rectangle
	ok     bool // its state is known
	full   bool // everything about it is known
	kidRef []ref
	caret  image.Rectangle
	cut    bool // not all its children were taken
	err    error
}

func (o *Options) defaults() {
	if o.MaxNodes <= 0 {
		o.MaxNodes = DefaultMaxNodes
	}
	o.MaxNodes = min(o.MaxNodes, MaxNodes)
	if o.MaxDepth <= 0 || o.MaxDepth > MaxDepth {
		o.MaxDepth = MaxDepth
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	o.Timeout = min(o.Timeout, MaxTimeout)
}

// Snapshot walks the applications' trees and lists their elements.
// It returns what it found by the deadline, with Truncated set, rather
// than an error; an error means the bus itself failed.
func (c *Client) Snapshot(ctx context.Context, o Options) (*Snapshot, error) {
	o.defaults()
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	root := &node{ref: c.root}
	c.fetch(ctx, root, o)
	if root.err != nil {
		return nil, fmt.Errorf("a11y: registry: %w", root.err)
	}
	snap := &Snapshot{Visited: 1}
	seen := map[ref]bool{root.ref: true}
	jobs := make(chan *node)
	done := make(chan *node, inFlight)
	var wg sync.WaitGroup
	for range inFlight {
		wg.Go(func() {
			for n := range jobs {
				c.fetch(ctx, n, o)
				done <- n
			}
		})
	}
	var queue []*node
	expand := func(n *node) {
		if n.depth >= o.MaxDepth && len(n.kidRef) > 0 {
			snap.Truncated = "size"
			return
		}
		if len(n.kidRef) > maxKids {
			n.kidRef = n.kidRef[:maxKids]
			snap.Truncated = "size"
		}
		for _, r := range n.kidRef {
			if seen[r] { // a cycle, or an object listed twice
				continue
			}
			if len(seen) >= maxVisited {
				snap.Truncated = "size"
				break
			}
			seen[r] = true
			k := &node{ref: r, depth: n.depth + 1}
			n.kids = append(n.kids, k)
			queue = append(queue, k)
		}
		n.kidRef = nil
	}
	expand(root)
	inflight := 0
	for {
		// Past the deadline nothing more is asked; what is in flight
		// fails at once (its calls share ctx) and is collected.
		if ctx.Err() != nil && len(queue) > 0 {
			queue = nil
			snap.Truncated = "time"
		}
		if len(queue) == 0 && inflight == 0 {
			break
		}
		var send chan *node
		var next *node
		if len(queue) > 0 {
			send, next = jobs, queue[0]
		}
		select {
		case send <- next:
			queue[0] = nil
			queue = queue[1:]
			inflight++
			snap.Visited++
		case n := <-done:
			inflight--
			if n.err != nil && ctx.Err() != nil {
				snap.Truncated = "time"
			}
			if n.cut && snap.Truncated == "" {
				snap.Truncated = "size"
			}
			expand(n)
		}
	}
	close(jobs)
	wg.Wait()
	snap.Elements = c.list(root, o, snap)
	return snap, nil
}

// fetch asks about one object: its state first, and the rest only when
// it shows (or o.All). Calls go out together; each costs a round trip.
func (c *Client) fetch(ctx context.Context, n *node, o Options) {
	obj := c.conn.Object(n.ref.Bus, n.ref.Path)
	// Only the registry may be started by asking for it.
	flags := dbus.FlagNoAutoStart
	if n.ref == registryRoot {
		flags = 0
	}
	call := func(method string, args ...any) *dbus.Call {
		return obj.GoWithContext(ctx, method, flags, make(chan *dbus.Call, 1), args...)
	}
	top := n.depth < 2 // the desktop and the applications: no place of their own
	if !top && !o.All {
		var st []uint32
		if err := (<-call(getState).Done).Store(&st); err != nil {
			n.err = err
			return
		}
		n.st, n.ok = states(st), true
		if !n.st.has(stateShowing) || n.st.has(stateDefunct) {
			return
		}
	}
	var cs, ce *dbus.Call
	if !n.ok {
		cs = call(getState)
	}
	cr := call(getRoleName)
	cp := call(propsGetAll, ifaceAccessible)
	if !top {
		ce = call(getExtents, uint32(0))
	}
	if cs != nil {
		var st []uint32
		if err := (<-cs.Done).Store(&st); err == nil {
			n.st, n.ok = states(st), true
		}
	}
	if err := (<-cr.Done).Store(&n.role); err != nil {
		n.err = err
	}
	// Name and ChildCount; an object that does not answer GetAll (the
	// registry's root) is asked for its children anyway.
	var props map[string]dbus.Variant
	count := 1
	if err := (<-cp.Done).Store(&props); err == nil {
		s, _ := props["Name"].Value().(string)
		n.name = clean(s)
		if k, ok := props["ChildCount"].Value().(int32); ok {
			count = int(k)
		}
	}
	if ce != nil {
		var e extents
		if err := (<-ce.Done).Store(&e); err == nil {
			n.rect = e.rect()
		}
	}
	switch {
	case count <= 0:
	case count <= bigKids:
		if err := (<-call(getChildren).Done).Store(&n.kidRef); err != nil && n.err == nil {
			n.err = err
		}
	default:
		n.kidRef, n.cut = c.someChildren(ctx, obj, flags, count, o)
	}
	n.role = clean(n.role)
	if valueRoles[n.role] && !top {
		var v string
		if err := (<-call(getText, int32(0), int32(MaxName)).Done).Store(&v); err == nil {
			// U+FFFC stands for an embedded object: a select's text is
			// its popup, whose selected item names the value.
			n.value = strings.TrimSpace(strings.ReplaceAll(clean(v), "\uFFFC", ""))
		}
		if n.value == "" && n.role == "combo box" && len(n.kidRef) > 0 {
			n.value = c.selected(ctx, n.kidRef[0], flags)
		}
	}
	if !top && n.st.has(stateFocused) && n.st.has(stateEditable) {
		n.caret = c.caret(ctx, obj, flags, n.rect)
	}
	n.full = n.err == nil || n.role != ""
}

// someChildren takes children of an object that has more than bigKids
// (Chromium builds GetChildren's answer object by object: 8 s for
// 20,000), by index. For a snapshot of what shows, it finds the first
// child on the screen by bisecting on their extents (children follow
// the layout's order in the long lists this meets: rows, feeds, tables)
// and reads on until a batch lies wholly below the screen; otherwise it
// reads from the start. Either stops at o.MaxNodes children. cut reports
// children left out.
func (c *Client) someChildren(ctx context.Context, obj dbus.BusObject, flags dbus.Flags, count int, o Options) (kids []ref, cut bool) {
	child := func(i int) (ref, image.Rectangle, bool) {
		var r ref
		if err := obj.CallWithContext(ctx, getChildAt, flags, int32(i)).Store(&r); err != nil {
			return r, image.Rectangle{}, false
		}
		var e extents
		if err := c.conn.Object(r.Bus, r.Path).CallWithContext(ctx, getExtents, flags, uint32(0)).Store(&e); err != nil {
			return r, image.Rectangle{}, true
		}
		return r, e.rect(), true
	}
	start, visible := 0, !o.All && !o.Screen.Empty()
	if visible {
		lo, hi := 0, count
		for lo < hi && ctx.Err() == nil {
			mid := int(uint(lo+hi) >> 1)
			_, r, ok := child(mid)
			if ok && r.Max.Y <= o.Screen.Min.Y {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		start = max(lo-inFlight, 0)
	}
	type got struct {
		r    ref
		rect image.Rectangle
		ok   bool
	}
	batch := make([]got, inFlight)
	// An application may claim any number of children: maxKids indices
	// are asked at most.
	for i := start; i < count && i < start+maxKids && len(kids) < o.MaxNodes && ctx.Err() == nil; i += inFlight {
		n := min(inFlight, count-i)
		var wg sync.WaitGroup
		for j := range n {
			wg.Go(func() {
				r, rect, ok := child(i + j)
				batch[j] = got{r, rect, ok}
			})
		}
		wg.Wait()
		below := 0
		for _, g := range batch[:n] {
			if g.ok {
				kids = append(kids, g.r)
			}
			if visible && g.rect.Min.Y >= o.Screen.Max.Y {
				below++
			}
		}
		if below == n {
			return kids, start > 0 || i+n < count
		}
	}
	return kids, start > 0 || len(kids) < count
}

// caret is where the text caret of obj is: before the character at the
// caret offset, after the one before it (at the end of the text), or at
// the start of the field.
func (c *Client) caret(ctx context.Context, obj dbus.BusObject, flags dbus.Flags, field image.Rectangle) image.Rectangle {
	var v dbus.Variant
	if err := obj.CallWithContext(ctx, propsGet, flags, ifaceText, "CaretOffset").Store(&v); err == nil {
		off, _ := v.Value().(int32)
		char := func(i int32) image.Rectangle {
			var e extents
			if i < 0 || obj.CallWithContext(ctx, getCharExtents, flags, i, uint32(0)).Store(&e.X, &e.Y, &e.W, &e.H) != nil {
				return image.Rectangle{}
			}
			return e.rect()
		}
		if r := char(off); !r.Empty() {
			return image.Rect(r.Min.X, r.Min.Y, r.Min.X+1, r.Max.Y)
		}
		if r := char(off - 1); !r.Empty() {
			return image.Rect(r.Max.X, r.Min.Y, r.Max.X+1, r.Max.Y)
		}
	}
	if field.Empty() {
		return image.Rectangle{}
	}
	x := field.Min.X + min(4, field.Dx()/2)
	return image.Rect(x, field.Min.Y, x+1, field.Max.Y)
}

// selected is the name of the item selected in the list r (a combo
// box's popup), or "".
func (c *Client) selected(ctx context.Context, r ref, flags dbus.Flags) string {
	var item ref
	if err := c.conn.Object(r.Bus, r.Path).CallWithContext(ctx, getSelected, flags, int32(0)).Store(&item); err != nil || item.Bus != r.Bus {
		return ""
	}
	var name dbus.Variant
	if err := c.conn.Object(item.Bus, item.Path).CallWithContext(ctx, propsGet, flags, ifaceAccessible, "Name").Store(&name); err != nil {
		return ""
	}
	s, _ := name.Value().(string)
	return clean(s)
}

// clean bounds s and makes it valid UTF-8 without control characters
// (other than newline and tab).
func clean(s string) string {
	if len(s) > MaxName {
		s = s[:MaxName]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && r != '\n' && r != '\t' {
			return -1
		}
		return r
	}, s)
}

// list flattens the walked tree, depth first in the applications' order,
// keeping what o asks for.
func (c *Client) list(root *node, o Options, snap *Snapshot) []Element {
	var out []Element
	var visit func(n *node, depth int)
	visit = func(n *node, depth int) {
		if len(out) >= o.MaxNodes {
			if snap.Truncated == "" {
				snap.Truncated = "max_nodes"
			}
			return
		}
		e, ok := c.element(n, o)
		if ok {
			e.Depth = depth
			out = append(out, e)
			depth++
		}
		for _, k := range n.kids {
			visit(k, depth)
		}
	}
	for _, app := range root.kids {
		visit(app, 0)
	}
	return out
}

// element is n as listed, and whether o lists it.
func (c *Client) element(n *node, o Options) (Element, bool) {
	if !n.full {
		return Element{}, false
	}
	app := n.depth == 1
	showing := n.st.has(stateShowing) && !n.st.has(stateDefunct)
	inter := !app && interactive(n.role, n.st)
	blank := strings.TrimSpace(n.name) == ""
	switch {
	case app && o.Interactive:
		return Element{}, false
	case !app && !o.All && !showing:
		return Element{}, false
	case !app && !o.Screen.Empty() && !n.rect.Overlaps(o.Screen):
		return Element{}, false
	case !app && !o.Region.Empty() && !n.rect.Overlaps(o.Region):
		return Element{}, false
	case o.Interactive && !inter:
		return Element{}, false
	case !o.Full && !inter && blank && (containerRoles[n.role] || n.role == "static"):
		return Element{}, false
	}
	e := Element{ID: c.idOf(n.ref), Role: n.role, Name: n.name, Interactive: inter}
	if !app {
		e.Bounds, e.Caret = n.rect, n.caret
		e.States = n.st.names(inter)
		if n.role != "password text" {
			e.Value = n.value
		}
	}
	return e, true
}
