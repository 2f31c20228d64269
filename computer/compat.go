package computer

import (
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"math"
	"time"
)

// WheelPixels is how far one wheel step scrolls a page in Chromium on X11
// (measured by TestComputerUse):
// pixel amounts (OpenAI's scroll_x/scroll_y, AIO's dx/dy) become steps.
const WheelPixels = 120

func wheelSteps(px int) int {
	if px == 0 {
		return 0
	}
	n := int(math.Round(float64(abs(px)) / WheelPixels))
	n = min(max(n, 1), MaxScroll)
	if px < 0 {
		return -n
	}
	return n
}

// OpenAIAction is one item of OpenAI's computer-use `actions[]`:
//
//	click{x, y, button: left|right|wheel|back|forward}, double_click{x, y},
//	drag{path: [{x, y}...]}, move{x, y}, scroll{x, y, scroll_x, scroll_y (px)},
//	type{text}, keypress{keys: [...] pressed together}, wait{ms?}, screenshot
type OpenAIAction struct {
	Type   string `json:"type"`
	X      *int   `json:"x,omitempty"`
	Y      *int   `json:"y,omitempty"`
	Button string `json:"button,omitempty"`
	Path   []struct {
		X int `json:"x"`
		Y int `json:"y"`
	} `json:"path,omitempty"`
	ScrollX int      `json:"scroll_x,omitempty"`
	ScrollY int      `json:"scroll_y,omitempty"`
	Text    string   `json:"text,omitempty"`
	Keys    []string `json:"keys,omitempty"`
	Ms      int      `json:"ms,omitempty"`
}

func xy(x, y *int, g Geometry, what string) (*image.Point, error) {
	if x == nil || y == nil {
		return nil, fmt.Errorf("%s: x and y are required", what)
	}
	p, err := g.toScreen(image.Pt(*x, *y))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &p, nil
}

func buttonNamed(name string) (int, error) {
	switch lower(name) {
	case "", "left":
		return btnLeft, nil
	case "right":
		return btnRight, nil
	case "middle", "wheel":
		return btnMiddle, nil
	case "back":
		return btnBack, nil
	case "forward":
		return btnForward, nil
	}
	return 0, fmt.Errorf("button %q: want left, right, middle (wheel), back or forward", truncate(name, 20))
}

func (a OpenAIAction) parse(g Geometry) (op, error) {
	o := op{name: a.Type}
	var err error
	switch a.Type {
	case "click":
		o.kind, o.count = opClick, 1
		if o.button, err = buttonNamed(a.Button); err != nil {
			return o, err
		}
		o.at, err = xy(a.X, a.Y, g, "click")
	case "double_click":
		o.kind, o.count, o.button = opClick, 2, btnLeft
		o.at, err = xy(a.X, a.Y, g, "double_click")
	case "move":
		o.kind = opMove
		o.at, err = xy(a.X, a.Y, g, "move")
	case "drag":
		o.kind, o.button = opDrag, btnLeft
		if len(a.Path) < 2 || len(a.Path) > MaxPathLen {
			return o, fmt.Errorf("drag: path of %d points: want 2-%d", len(a.Path), MaxPathLen)
		}
		for i, p := range a.Path {
			s, err := g.toScreen(image.Pt(p.X, p.Y))
			if err != nil {
				return o, fmt.Errorf("drag: path[%d]: %w", i, err)
			}
			if i == 0 {
				o.at = &s
			} else {
				o.path = append(o.path, s)
			}
		}
	case "scroll":
		o.kind = opScroll
		o.dx, o.dy = wheelSteps(a.ScrollX), wheelSteps(a.ScrollY)
		if a.X != nil || a.Y != nil {
			o.at, err = xy(a.X, a.Y, g, "scroll")
		}
	case "type":
		o.kind, o.text = opType, a.Text
		if a.Text == "" || len(a.Text) > MaxText {
			return o, fmt.Errorf("type: text of %d bytes: want 1-%d", len(a.Text), MaxText)
		}
	case "keypress":
		o.kind, o.count = opKey, 1
		if len(a.Keys) == 0 || len(a.Keys) > MaxKeys {
			return o, fmt.Errorf("keypress: %d keys: want 1-%d", len(a.Keys), MaxKeys)
		}
		combo := make([]uint32, 0, len(a.Keys))
		for _, k := range a.Keys {
			ks, err := KeyName(k)
			if err != nil {
				return o, fmt.Errorf("keypress: %w", err)
			}
			combo = append(combo, ks)
		}
		o.keys = [][]uint32{combo}
	case "wait":
		o.kind, o.d = opWait, 2*time.Second // OpenAI's reference waits 2 s
		if a.Ms != 0 {
			if o.d, err = seconds(float64(a.Ms)/1000, "wait: ms", MaxWait); err != nil {
				return o, err
			}
		}
	case "screenshot":
		o.kind = opScreenshot
	case "":
		return o, errors.New("type is required")
	default:
		return o, fmt.Errorf("unknown action type %q", truncate(a.Type, 40))
	}
	return o, err
}

// PlanOpenAI validates OpenAI actions.
func (c *Computer) PlanOpenAI(as []OpenAIAction) (Plan, error) {
	return planOf(c.Geometry(), as, func(a OpenAIAction, g Geometry) (op, error) { return a.parse(g) }, func(a OpenAIAction) string { return a.Type })
}

// AIOAction is one action of AIO Sandbox's `/v1/browser/actions`
// (action_type in upper case):
//
//	MOVE_TO{x, y}, MOVE_REL{x_offset, y_offset}, CLICK{x?, y?, button, num_clicks},
//	MOUSE_DOWN{button}, MOUSE_UP{button}, RIGHT_CLICK{x?, y?}, DOUBLE_CLICK{x?, y?},
//	DRAG_TO{x, y}, DRAG_REL{x_offset, y_offset}, SCROLL{dx, dy (px)},
//	TYPING{text}, PRESS{key}, KEY_DOWN{key}, KEY_UP{key}, HOTKEY{keys[]},
//	WAIT{duration (s)}
type AIOAction struct {
	ActionType string   `json:"action_type"`
	X          *int     `json:"x,omitempty"`
	Y          *int     `json:"y,omitempty"`
	XOffset    int      `json:"x_offset,omitempty"`
	YOffset    int      `json:"y_offset,omitempty"`
	Button     string   `json:"button,omitempty"`
	NumClicks  int      `json:"num_clicks,omitempty"`
	DX         int      `json:"dx,omitempty"`
	DY         int      `json:"dy,omitempty"`
	Text       string   `json:"text,omitempty"`
	Key        string   `json:"key,omitempty"`
	Keys       []string `json:"keys,omitempty"`
	Duration   float64  `json:"duration,omitempty"`
}

// relOffset converts an image-space offset to screen pixels.
func relOffset(g Geometry, dx, dy int) image.Point {
	return image.Pt(int(math.Round(float64(dx)/g.Scale)), int(math.Round(float64(dy)/g.Scale)))
}

func (a AIOAction) parse(g Geometry) (op, error) {
	o := op{name: a.ActionType}
	var err error
	optXY := func(what string) error {
		if a.X == nil && a.Y == nil {
			return nil
		}
		o.at, err = xy(a.X, a.Y, g, what)
		return err
	}
	key := func(what string) error {
		c, err := Combo(a.Key)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		o.keys = [][]uint32{c}
		return nil
	}
	if abs(a.XOffset) > 1<<15 || abs(a.YOffset) > 1<<15 {
		return o, fmt.Errorf("%w: offset (%d, %d)", ErrOutOfRange, a.XOffset, a.YOffset)
	}
	switch a.ActionType {
	case "MOVE_TO":
		o.kind = opMove
		o.at, err = xy(a.X, a.Y, g, "MOVE_TO")
	case "MOVE_REL":
		o.kind, o.rel, o.relMove = opMove, true, relOffset(g, a.XOffset, a.YOffset)
	case "CLICK", "RIGHT_CLICK", "DOUBLE_CLICK":
		o.kind, o.count = opClick, 1
		if a.NumClicks != 0 {
			o.count = a.NumClicks
		}
		if o.count < 1 || o.count > 3 {
			return o, fmt.Errorf("%s: num_clicks %d: want 1-3", a.ActionType, a.NumClicks)
		}
		if o.button, err = buttonNamed(a.Button); err != nil {
			return o, err
		}
		switch a.ActionType {
		case "RIGHT_CLICK":
			o.button = btnRight
		case "DOUBLE_CLICK":
			o.count = 2
		}
		err = optXY(a.ActionType)
	case "MOUSE_DOWN", "MOUSE_UP":
		o.kind = opDown
		if a.ActionType == "MOUSE_UP" {
			o.kind = opUp
		}
		o.button, err = buttonNamed(a.Button)
	case "DRAG_TO":
		o.kind, o.button = opDrag, btnLeft
		var to *image.Point
		if to, err = xy(a.X, a.Y, g, "DRAG_TO"); err == nil {
			o.path = []image.Point{*to}
		}
	case "DRAG_REL":
		o.kind, o.button, o.rel, o.relMove = opDrag, btnLeft, true, relOffset(g, a.XOffset, a.YOffset)
	case "SCROLL":
		o.kind = opScroll
		o.dx, o.dy = wheelSteps(a.DX), wheelSteps(a.DY)
		err = optXY("SCROLL")
	case "TYPING":
		o.kind, o.text = opType, a.Text
		if a.Text == "" || len(a.Text) > MaxText {
			return o, fmt.Errorf("TYPING: text of %d bytes: want 1-%d", len(a.Text), MaxText)
		}
	case "PRESS":
		o.kind, o.count = opKey, 1
		err = key("PRESS")
	case "KEY_DOWN":
		o.kind = opKeyDown
		err = key("KEY_DOWN")
	case "KEY_UP":
		o.kind = opKeyUp
		err = key("KEY_UP")
	case "HOTKEY":
		o.kind, o.count = opKey, 1
		if len(a.Keys) == 0 || len(a.Keys) > MaxKeys {
			return o, fmt.Errorf("HOTKEY: %d keys: want 1-%d", len(a.Keys), MaxKeys)
		}
		combo := make([]uint32, 0, len(a.Keys))
		for _, k := range a.Keys {
			ks, err := KeyName(k)
			if err != nil {
				return o, fmt.Errorf("HOTKEY: %w", err)
			}
			combo = append(combo, ks)
		}
		o.keys = [][]uint32{combo}
	case "WAIT":
		o.kind = opWait
		o.d, err = seconds(a.Duration, "WAIT: duration", MaxWait)
	case "":
		return o, errors.New("action_type is required")
	default:
		return o, fmt.Errorf("unknown action_type %q", truncate(a.ActionType, 40))
	}
	return o, err
}

// PlanAIO validates AIO actions.
func (c *Computer) PlanAIO(as []AIOAction) (Plan, error) {
	return planOf(c.Geometry(), as, func(a AIOAction, g Geometry) (op, error) { return a.parse(g) }, func(a AIOAction) string { return a.ActionType })
}

func planOf[A any](g Geometry, as []A, parse func(A, Geometry) (op, error), name func(A) string) (Plan, error) {
	if len(as) == 0 {
		return Plan{}, errors.New("no actions")
	}
	if len(as) > MaxActions {
		return Plan{}, fmt.Errorf("%d actions (max %d)", len(as), MaxActions)
	}
	p := Plan{ops: make([]op, 0, len(as))}
	for i, a := range as {
		o, err := parse(a, g)
		if err != nil {
			return Plan{}, fmt.Errorf("action %d (%s): %w", i, truncate(name(a), 40), err)
		}
		p.ops = append(p.ops, o)
	}
	return p, nil
}

// UnmarshalAIO accepts one AIO action object or {"actions": [...]}.
func UnmarshalAIO(b []byte) ([]AIOAction, error) {
	var many struct {
		Actions []AIOAction `json:"actions"`
	}
	if err := json.Unmarshal(b, &many); err == nil && many.Actions != nil {
		return many.Actions, nil
	}
	var one AIOAction
	if err := json.Unmarshal(b, &one); err != nil {
		return nil, err
	}
	return []AIOAction{one}, nil
}
