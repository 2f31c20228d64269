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

// Action is one action in Anthropic's computer-use vocabulary (the
// "computer" tool's input), which is deskd's own:
//
//	screenshot, zoom{region}, cursor_position, mouse_move{coordinate},
//	left_click, right_click, middle_click, double_click, triple_click
//	  {coordinate?, text? = modifiers held, e.g. "shift" or "ctrl+alt"},
//	left_click_drag{start_coordinate?, coordinate}, left_mouse_down,
//	left_mouse_up, scroll{coordinate?, scroll_direction, scroll_amount, text?},
//	type{text, mode? = "keys"|"paste"}, key{text, repeat?}, hold_key{text, duration},
//	wait{duration}
//
// Coordinates are [x, y] in the default screenshot's image space;
// durations are seconds. Instead of a coordinate, mouse_move, the clicks,
// scroll and type may name an element of an accessibility snapshot
// (Elements): the action goes to its centre, as it is when the action
// runs (type clicks it first).
type Action struct {
	Action          string  `json:"action"`
	Coordinate      []int   `json:"coordinate,omitempty"`
	StartCoordinate []int   `json:"start_coordinate,omitempty"`
	Text            string  `json:"text,omitempty"`
	ScrollDirection string  `json:"scroll_direction,omitempty"`
	ScrollAmount    *int    `json:"scroll_amount,omitempty"`
	Duration        float64 `json:"duration,omitempty"`
	Repeat          int     `json:"repeat,omitempty"`
	Region          []int   `json:"region,omitempty"`
	Mode            string  `json:"mode,omitempty"`
	Element         string  `json:"element,omitempty"`
}

// Bounds on a request.
const (
	MaxActions   = 100
	MaxText      = 64 << 10
	MaxWait      = 60 * time.Second
	MaxRepeat    = 100
	MaxScroll    = 100 // wheel steps in one action
	MaxPathLen   = 1000
	maxDuration  = 60.0 // seconds, as floats come
	maxHoldAlone = 30 * time.Second
)

// X pointer buttons.
const (
	btnLeft, btnMiddle, btnRight = 1, 2, 3
	btnWheelUp, btnWheelDown     = 4, 5
	btnWheelLeft, btnWheelRight  = 6, 7
	btnBack, btnForward          = 8, 9
)

type opKind int

const (
	opScreenshot opKind = iota
	opZoom
	opCursor
	opMove
	opClick
	opDown
	opUp
	opDrag
	opScroll
	opType
	opKey
	opKeyDown
	opKeyUp
	opHoldKey
	opWait
)

// op is one parsed action, in screen pixels.
type op struct {
	name    string // as the agent called it
	kind    opKind
	at      *image.Point // where to act first, when given
	path    []image.Point
	button  int
	count   int
	mods    []uint32
	keys    [][]uint32
	text    string
	paste   bool
	dx, dy  int // wheel steps: right and down are positive
	d       time.Duration
	region  image.Rectangle // zoom, image space
	relMove image.Point     // relative move (AIO MOVE_REL, DRAG_REL), screen pixels
	rel     bool
	element string // act at this element's centre (located when the op runs)
}

func point(c []int, what string) (image.Point, error) {
	if len(c) != 2 {
		return image.Point{}, fmt.Errorf("%s: want [x, y], got %d numbers", what, len(c))
	}
	return image.Pt(c[0], c[1]), nil
}

func seconds(s float64, what string, limit time.Duration) (time.Duration, error) {
	if s < 0 || s != s || s > maxDuration {
		return 0, fmt.Errorf("%s %v: want 0-%v seconds", what, s, maxDuration)
	}
	d := time.Duration(s * float64(time.Second))
	if d > limit {
		return 0, fmt.Errorf("%s %v s: at most %v", what, s, limit)
	}
	return d, nil
}

// parse turns an Anthropic action into an op, mapping coordinates with g.
func (a Action) parse(g Geometry) (op, error) {
	o := op{name: a.Action}
	mapPt := func(c []int, what string) (*image.Point, error) {
		if c == nil {
			return nil, nil
		}
		p, err := point(c, what)
		if err != nil {
			return nil, err
		}
		s, err := g.toScreen(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return &s, nil
	}
	mods := func() error {
		if a.Text == "" {
			return nil
		}
		c, err := Combo(a.Text)
		if err != nil {
			return fmt.Errorf("modifiers: %w", err)
		}
		o.mods = c
		return nil
	}
	if a.Element != "" {
		switch a.Action {
		case "mouse_move", "left_click", "right_click", "middle_click", "double_click", "triple_click", "scroll", "type":
		default:
			return o, fmt.Errorf("%s: takes no element", truncate(a.Action, 40))
		}
		if a.Coordinate != nil {
			return o, fmt.Errorf("%s: give element or coordinate, not both", a.Action)
		}
		if err := a11y.CheckID(a.Element); err != nil {
			return o, fmt.Errorf("%s: %w", a.Action, err)
		}
		o.element = a.Element
	}
	var err error
	switch a.Action {
	case "screenshot":
		o.kind = opScreenshot
	case "cursor_position":
		o.kind = opCursor
	case "zoom":
		o.kind = opZoom
		if len(a.Region) != 4 {
			return o, errors.New("zoom: want region [x0, y0, x1, y1]")
		}
		o.region = image.Rect(a.Region[0], a.Region[1], a.Region[2], a.Region[3])
		if _, err := g.regionToScreen(o.region); err != nil {
			return o, fmt.Errorf("zoom: %w", err)
		}
	case "mouse_move":
		o.kind = opMove
		if a.Coordinate == nil && o.element == "" {
			return o, errors.New("mouse_move: coordinate or element is required")
		}
		o.at, err = mapPt(a.Coordinate, "coordinate")
	case "left_click", "right_click", "middle_click", "double_click", "triple_click":
		o.kind, o.button, o.count = opClick, btnLeft, 1
		switch a.Action {
		case "right_click":
			o.button = btnRight
		case "middle_click":
			o.button = btnMiddle
		case "double_click":
			o.count = 2
		case "triple_click":
			o.count = 3
		}
		if o.at, err = mapPt(a.Coordinate, "coordinate"); err == nil {
			err = mods()
		}
	case "left_mouse_down", "left_mouse_up":
		o.kind, o.button = opDown, btnLeft
		if a.Action == "left_mouse_up" {
			o.kind = opUp
		}
		o.at, err = mapPt(a.Coordinate, "coordinate")
	case "left_click_drag":
		o.kind, o.button = opDrag, btnLeft
		if a.Coordinate == nil {
			return o, errors.New("left_click_drag: coordinate is required")
		}
		var from, to *image.Point
		if from, err = mapPt(a.StartCoordinate, "start_coordinate"); err != nil {
			return o, err
		}
		if to, err = mapPt(a.Coordinate, "coordinate"); err != nil {
			return o, err
		}
		o.at = from
		o.path = []image.Point{*to}
		err = mods()
	case "scroll":
		o.kind = opScroll
		n := 3
		if a.ScrollAmount != nil {
			n = *a.ScrollAmount
		}
		if n < 0 || n > MaxScroll {
			return o, fmt.Errorf("scroll_amount %d: want 0-%d", n, MaxScroll)
		}
		switch a.ScrollDirection {
		case "up":
			o.dy = -n
		case "down":
			o.dy = n
		case "left":
			o.dx = -n
		case "right":
			o.dx = n
		default:
			return o, fmt.Errorf("scroll_direction %q: want up, down, left or right", a.ScrollDirection)
		}
		if o.at, err = mapPt(a.Coordinate, "coordinate"); err == nil {
			err = mods()
		}
	case "type":
		o.kind, o.text = opType, a.Text
		if a.Text == "" {
			return o, errors.New("type: text is required")
		}
		if len(a.Text) > MaxText {
			return o, fmt.Errorf("type: text of %d bytes (max %d)", len(a.Text), MaxText)
		}
		switch a.Mode {
		case "", "keys":
		case "paste":
			o.paste = true
		default:
			return o, fmt.Errorf("type: mode %q: want keys or paste", a.Mode)
		}
	case "key":
		o.kind, o.count = opKey, 1
		if a.Repeat != 0 {
			o.count = a.Repeat
		}
		if o.count < 1 || o.count > MaxRepeat {
			return o, fmt.Errorf("key: repeat %d: want 1-%d", a.Repeat, MaxRepeat)
		}
		o.keys, err = Sequence(a.Text)
	case "hold_key":
		o.kind = opHoldKey
		if o.d, err = seconds(a.Duration, "hold_key: duration", maxHoldAlone); err != nil {
			return o, err
		}
		var c []uint32
		if c, err = Combo(a.Text); err == nil {
			o.keys = [][]uint32{c}
		}
	case "wait":
		o.kind = opWait
		d := a.Duration
		if d == 0 {
			d = 1
		}
		o.d, err = seconds(d, "wait: duration", MaxWait)
	case "":
		return o, errors.New("action is required")
	default:
		return o, fmt.Errorf("unknown action %q", truncate(a.Action, 40))
	}
	return o, err
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Result is the outcome of one action.
type Result struct {
	Action string `json:"action"`
	// Status is "ok", "error" or "not_executed".
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Coordinate answers cursor_position, in image space.
	Coordinate []int `json:"coordinate,omitempty"`
	// Shot answers screenshot and zoom.
	Shot *Shot `json:"-"`
}

// NotExecuted is the error text of actions after a failed one.
const NotExecuted = "Not executed: an earlier computer action failed."

// Plan is a parsed, validated list of actions ready to run.
type Plan struct {
	ops []op
}

// Len is the number of actions.
func (p Plan) Len() int { return len(p.ops) }

// ReadOnly reports whether the plan only looks (screenshot, zoom,
// cursor_position, wait): what a view-only caller may run.
func (p Plan) ReadOnly() bool {
	for _, o := range p.ops {
		switch o.kind {
		case opScreenshot, opZoom, opCursor, opWait:
		default:
			return false
		}
	}
	return true
}

// Captures reports whether the plan takes screenshots (screenshot, zoom).
func (p Plan) Captures() bool {
	for _, o := range p.ops {
		if o.kind == opScreenshot || o.kind == opZoom {
			return true
		}
	}
	return false
}

// Waits is the total time the plan's wait actions sleep.
func (p Plan) Waits() time.Duration {
	var d time.Duration
	for _, o := range p.ops {
		if o.kind == opWait {
			d += o.d
		}
	}
	return d
}

// PlanActions validates Anthropic actions against the current geometry.
// An invalid action makes the whole list invalid: nothing runs.
func (c *Computer) PlanActions(as []Action) (Plan, error) {
	return planOf(c.Geometry(), as, func(a Action, g Geometry) (op, error) { return a.parse(g) }, func(a Action) string { return a.Action })
}

// Run runs the plan in order, stopping at the first error; later actions
// are answered NotExecuted. On an error or when ctx ends, every key and
// button deskd holds is released. Screenshots use so.
//
// A plan that only looks (ReadOnly: screenshots, zoom, the cursor, waits)
// runs without the action lock: a view-only watcher never holds up the
// agent's actions, however long it waits.
func (c *Computer) Run(ctx context.Context, p Plan, so ShotOptions) ([]Result, error) {
	readOnly := p.ReadOnly()
	if !readOnly {
		c.run.Lock()
		defer c.run.Unlock()
	}
	res := make([]Result, len(p.ops))
	var failed error
	for i, o := range p.ops {
		res[i].Action = o.name
		if failed != nil {
			res[i].Status, res[i].Error = "not_executed", NotExecuted
			continue
		}
		err := ctx.Err()
		if err == nil {
			err = c.exec(ctx, o, &res[i], so)
		}
		if err != nil {
			failed = fmt.Errorf("action %d (%s): %w", i, o.name, err)
			res[i].Status, res[i].Error = "error", err.Error()
			if !readOnly {
				c.releaseAll()
			}
			continue
		}
		res[i].Status = "ok"
	}
	return res, failed
}

// ReleaseAll lets go of every key and button deskd holds.
func (c *Computer) ReleaseAll() {
	c.run.Lock()
	defer c.run.Unlock()
	c.releaseAll()
}

func (c *Computer) releaseAll() {
	for i := len(c.held) - 1; i >= 0; i-- {
		_ = c.d.Key(c.held[i], false)
	}
	c.held = c.held[:0]
	if c.buttons != 0 {
		if p, err := c.d.CursorPosition(); err == nil {
			_ = c.d.Pointer(p.X, p.Y, 0)
		}
		c.buttons = 0
	}
}

func (c *Computer) keyDown(ks uint32) error {
	if err := c.d.Key(ks, true); err != nil {
		return err
	}
	c.held = append(c.held, ks)
	return nil
}

func (c *Computer) keyUp(ks uint32) error {
	for i := len(c.held) - 1; i >= 0; i-- {
		if c.held[i] == ks {
			c.held = append(c.held[:i], c.held[i+1:]...)
			break
		}
	}
	return c.d.Key(ks, false)
}

// pos is where the pointer is now, in screen pixels.
func (c *Computer) pos(at *image.Point) (image.Point, error) {
	if at != nil {
		return *at, nil
	}
	return c.d.CursorPosition()
}

func (c *Computer) pointer(p image.Point, buttons uint16) error {
	if err := c.d.Pointer(p.X, p.Y, buttons); err != nil {
		return err
	}
	c.buttons = buttons
	return nil
}

// withMods runs fn with the modifier keys mods held.
func (c *Computer) withMods(mods []uint32, fn func() error) error {
	for _, m := range mods {
		if err := c.keyDown(m); err != nil {
			return err
		}
	}
	err := fn()
	for i := len(mods) - 1; i >= 0; i-- {
		if e := c.keyUp(mods[i]); err == nil {
			err = e
		}
	}
	return err
}

// bit is button b's bit in a buttons mask (b 1-16: back and forward are
// 8 and 9, past a byte).
func bit(b int) uint16 { return 1 << (b - 1) }

func (c *Computer) exec(ctx context.Context, o op, r *Result, so ShotOptions) error {
	if o.element != "" {
		at, err := c.locate(ctx, o.element)
		if err != nil {
			return err
		}
		o.at = &at
		if o.kind == opType { // into the element: click it first
			if err := c.exec(ctx, op{name: o.name, kind: opClick, at: &at, button: btnLeft, count: 1}, r, so); err != nil {
				return err
			}
		}
	}
	switch o.kind {
	case opScreenshot:
		shot, err := c.Screenshot(so)
		r.Shot = &shot
		return err
	case opZoom:
		z := so
		z.Region = o.region
		z.MaxLongEdge, z.MaxPixels = 0, 0
		shot, err := c.Screenshot(z)
		r.Shot = &shot
		return err
	case opCursor:
		p, err := c.CursorPosition()
		r.Coordinate = []int{p.X, p.Y}
		return err
	case opMove:
		if o.rel {
			cur, err := c.d.CursorPosition()
			if err != nil {
				return err
			}
			return c.pointer(c.clampScreen(cur.Add(o.relMove)), c.buttons)
		}
		return c.pointer(*o.at, c.buttons)
	case opClick:
		p, err := c.pos(o.at)
		if err != nil {
			return err
		}
		return c.withMods(o.mods, func() error {
			for i := range o.count {
				// Spaced as a hand clicks: toolkits count a double click
				// from X timestamps, and presses within one millisecond
				// of the last release are not counted.
				if i > 0 {
					if err := sleep(ctx, ClickGap); err != nil {
						return err
					}
				}
				if err := c.pointer(p, c.buttons|bit(o.button)); err != nil {
					return err
				}
				if err := sleep(ctx, PressHold); err != nil {
					return err
				}
				if err := c.pointer(p, c.buttons&^bit(o.button)); err != nil {
					return err
				}
			}
			return nil
		})
	case opDown, opUp:
		p, err := c.pos(o.at)
		if err != nil {
			return err
		}
		if o.kind == opDown {
			return c.pointer(p, c.buttons|bit(o.button))
		}
		return c.pointer(p, c.buttons&^bit(o.button))
	case opDrag:
		from, err := c.pos(o.at)
		if err != nil {
			return err
		}
		path := o.path
		if o.rel {
			path = []image.Point{c.clampScreen(from.Add(o.relMove))}
		}
		return c.withMods(o.mods, func() error { return c.drag(ctx, from, path, o.button) })
	case opScroll:
		p, err := c.pos(o.at)
		if err != nil {
			return err
		}
		return c.withMods(o.mods, func() error {
			if err := c.pointer(p, c.buttons); err != nil {
				return err
			}
			for _, s := range []struct{ n, neg, pos int }{{o.dy, btnWheelUp, btnWheelDown}, {o.dx, btnWheelLeft, btnWheelRight}} {
				b := s.pos
				if s.n < 0 {
					b = s.neg
				}
				for range abs(s.n) {
					if err := c.pointer(p, c.buttons|bit(b)); err != nil {
						return err
					}
					if err := c.pointer(p, c.buttons&^bit(b)); err != nil {
						return err
					}
				}
			}
			return nil
		})
	case opType:
		if o.paste {
			if err := c.SetClipboard(ctx, o.text); err != nil {
				return err
			}
			return c.combo(ctx, []uint32{ksControlL, 'v'})
		}
		return c.typeText(ctx, o.text)
	case opKey:
		for range o.count {
			for _, k := range o.keys {
				if err := c.combo(ctx, k); err != nil {
					return err
				}
			}
		}
		return nil
	case opKeyDown:
		for _, ks := range o.keys[0] {
			if err := c.keyDown(ks); err != nil {
				return err
			}
		}
		return nil
	case opKeyUp:
		for i := len(o.keys[0]) - 1; i >= 0; i-- {
			if err := c.keyUp(o.keys[0][i]); err != nil {
				return err
			}
		}
		return nil
	case opHoldKey:
		keys := o.keys[0]
		for _, ks := range keys {
			if err := c.keyDown(ks); err != nil {
				return err
			}
		}
		err := sleep(ctx, o.d)
		for i := len(keys) - 1; i >= 0; i-- {
			if e := c.keyUp(keys[i]); err == nil {
				err = e
			}
		}
		return err
	case opWait:
		return sleep(ctx, o.d)
	}
	return fmt.Errorf("action kind %d not implemented", o.kind)
}

// ClickGap is the pause between the clicks of a double or triple click;
// a toolkit's double-click time is 400-500 ms.
const ClickGap = 20 * time.Millisecond

// PressHold is how long a click holds the button: long enough for the
// press and release to carry different X timestamps (milliseconds), no
// longer (xdotool holds none). It was ClickGap/2, 10 ms added to every
// click's latency.
const PressHold = 2 * time.Millisecond

// KeyPreparer is a Display that can make keysyms typeable ahead of
// typing them (x11.Screen binds spare keycodes for them).
type KeyPreparer interface {
	PrepareKeys(keysyms []uint32) (ready int, changed bool, err error)
}

// MappingSettle is the pause after the keyboard mapping changed before
// keys that need the change are typed: applications apply it when its
// MappingNotify reaches them, and nothing tells when that was.
const MappingSettle = 50 * time.Millisecond

// typeText types text key by key; characters no key produces get keys
// first, a batch at a time, with a pause for applications to follow.
func (c *Computer) typeText(ctx context.Context, text string) error {
	syms := make([]uint32, 0, len(text))
	for _, ch := range text {
		syms = append(syms, runeKeysym(ch))
	}
	prep, canPrep := c.d.(KeyPreparer)
	for len(syms) > 0 {
		batch := syms
		if canPrep {
			n, changed, err := prep.PrepareKeys(syms)
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("no keycode to type %#x with", syms[0])
			}
			batch = syms[:n]
			if changed {
				if err := sleep(ctx, MappingSettle); err != nil {
					return err
				}
			}
		}
		for _, ks := range batch {
			if err := c.d.Key(ks, true); err != nil {
				return err
			}
			if err := c.d.Key(ks, false); err != nil {
				return err
			}
			if err := sleep(ctx, c.cfg.KeyDelay); err != nil {
				return err
			}
		}
		syms = syms[len(batch):]
	}
	return nil
}

// combo presses keys in order and releases them in reverse.
func (c *Computer) combo(ctx context.Context, keys []uint32) error {
	for _, ks := range keys {
		if err := c.keyDown(ks); err != nil {
			return err
		}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		if err := c.keyUp(keys[i]); err != nil {
			return err
		}
	}
	return sleep(ctx, c.cfg.KeyDelay)
}

// drag presses button at from, moves through path in steps applications
// see as a drag, and releases at the end.
func (c *Computer) drag(ctx context.Context, from image.Point, path []image.Point, button int) error {
	if err := c.pointer(from, c.buttons); err != nil {
		return err
	}
	if err := c.pointer(from, c.buttons|bit(button)); err != nil {
		return err
	}
	cur := from
	for _, to := range path {
		// Intermediate moves: toolkits start a drag after a few pixels
		// of motion with the button down, not on a jump.
		const steps = 8
		for s := 1; s <= steps; s++ {
			p := image.Pt(cur.X+(to.X-cur.X)*s/steps, cur.Y+(to.Y-cur.Y)*s/steps)
			if err := c.pointer(p, c.buttons); err != nil {
				return err
			}
			if err := sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
		cur = to
	}
	return c.pointer(cur, c.buttons&^bit(button))
}

// clampScreen keeps a point made by a relative move on the screen.
func (c *Computer) clampScreen(p image.Point) image.Point {
	w, h := c.d.Size()
	return image.Pt(min(max(p.X, 0), w-1), min(max(p.Y, 0), h-1))
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// lower is strings.ToLower bounded to what a name may be.
func lower(s string) string { return strings.ToLower(truncate(s, 64)) }

// Logged is an action as an audit log keeps it: what, where on the
// screen (pixels), which element; typed text by its length only (keys can
// be passwords).
type Logged struct {
	Action    string `json:"action"`
	At        []int  `json:"at,omitempty"`
	Element   string `json:"element,omitempty"`
	TextBytes int    `json:"text_bytes,omitempty"`
}

// Logged describes the plan's actions for an audit log.
func (p Plan) Logged() []Logged {
	out := make([]Logged, len(p.ops))
	for i, o := range p.ops {
		out[i] = Logged{Action: o.name, Element: o.element, TextBytes: len(o.text)}
		if o.at != nil {
			out[i].At = []int{o.at.X, o.at.Y}
		}
	}
	return out
}
