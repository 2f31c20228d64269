package computer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeDisplay is an in-memory Display that records input as text.
type fakeDisplay struct {
	mu      sync.Mutex
	w, h    int
	pix     []byte // BGRX
	pos     image.Point
	buttons uint16
	events  []string
	damage  chan image.Rectangle
	clip    chan string
	failKey uint32 // Key of this keysym fails
}

func newFake(w, h int) *fakeDisplay {
	f := &fakeDisplay{w: w, h: h, pix: make([]byte, w*h*4), damage: make(chan image.Rectangle, 16), clip: make(chan string, 1)}
	for y := range h {
		for x := range w {
			i := (y*w + x) * 4
			f.pix[i], f.pix[i+1], f.pix[i+2] = byte(x), byte(y), byte(x+y) // B, G, R
		}
	}
	return f
}

func (f *fakeDisplay) Size() (int, int) { return f.w, f.h }
func (f *fakeDisplay) Capture(r image.Rectangle, pix []byte, stride int) error {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		copy(pix[y*stride+4*r.Min.X:], f.pix[(y*f.w+r.Min.X)*4:(y*f.w+r.Max.X)*4])
	}
	return nil
}
func (f *fakeDisplay) Damage() <-chan image.Rectangle { return f.damage }
func (f *fakeDisplay) Key(ks uint32, down bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ks == f.failKey && down {
		return errors.New("key failed")
	}
	f.events = append(f.events, fmt.Sprintf("key %#x %v", ks, down))
	return nil
}
func (f *fakeDisplay) Pointer(x, y int, b uint16) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pos != image.Pt(x, y) {
		f.events = append(f.events, fmt.Sprintf("move %d,%d", x, y))
	}
	for i := range 16 {
		bit := uint16(1) << i
		if (f.buttons^b)&bit != 0 {
			f.events = append(f.events, fmt.Sprintf("button %d %v", i+1, b&bit != 0))
		}
	}
	f.pos, f.buttons = image.Pt(x, y), b
	return nil
}
func (f *fakeDisplay) CursorImage() (*image.NRGBA, image.Point, error) {
	img := image.NewNRGBA(image.Rect(0, 0, 4, 4))
	for i := 0; i < len(img.Pix); i += 4 {
		img.Pix[i], img.Pix[i+3] = 255, 255 // opaque red
	}
	return img, image.Pt(1, 1), nil
}
func (f *fakeDisplay) CursorPosition() (image.Point, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pos, nil
}
func (f *fakeDisplay) SetClipboardSync(ctx context.Context, text string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, "clipboard "+text)
	return nil
}
func (f *fakeDisplay) ClipboardChanged() <-chan string { return f.clip }
func (f *fakeDisplay) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.events
	f.events = nil
	return e
}

func newComputer(t *testing.T, f *fakeDisplay) *Computer {
	c := New(f, Config{KeyDelay: time.Microsecond})
	t.Cleanup(c.Close)
	return c
}

func TestGeometry(t *testing.T) {
	tests := []struct {
		w, h, iw, ih int
	}{
		{1280, 800, 1280, 800}, // 1:1, as the issue wants
		{1024, 768, 1024, 768},
		{1920, 1080, 1429, 804},
		{2560, 1600, 1356, 847},
		{800, 3000, 418, 1567},
	}
	for _, tt := range tests {
		g := fit(tt.w, tt.h, DefaultMaxLongEdge, DefaultMaxPixels)
		if g.ImageWidth != tt.iw || g.ImageHeight != tt.ih {
			t.Errorf("%dx%d -> %dx%d, want %dx%d", tt.w, tt.h, g.ImageWidth, g.ImageHeight, tt.iw, tt.ih)
		}
		if max(g.ImageWidth, g.ImageHeight) > DefaultMaxLongEdge || g.ImageWidth*g.ImageHeight > DefaultMaxPixels {
			t.Errorf("%dx%d -> %dx%d exceeds the bounds", tt.w, tt.h, g.ImageWidth, g.ImageHeight)
		}
		// Every image pixel maps to a screen pixel that maps back to it.
		for x := 0; x < g.ImageWidth; x++ {
			for _, y := range []int{0, g.ImageHeight / 2, g.ImageHeight - 1} {
				s, err := g.toScreen(image.Pt(x, y))
				if err != nil {
					t.Fatal(err)
				}
				if back := g.toImage(s); back != image.Pt(x, y) {
					t.Fatalf("%dx%d: image (%d,%d) -> screen %v -> image %v", tt.w, tt.h, x, y, s, back)
				}
			}
		}
	}
}

func TestKeyNames(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint32
		wantErr string
	}{
		{"ctrl+shift+t", []uint32{ksControlL, ksShiftL, 't'}, ""},
		{"CTRL+A", []uint32{ksControlL, 'A'}, ""},
		{"Return", []uint32{ksReturn}, ""},
		{"enter", []uint32{ksReturn}, ""},
		{"super", []uint32{ksSuperL}, ""},
		{"cmd+c", []uint32{ksSuperL, 'c'}, ""},
		{"Page_Up", []uint32{0xff55}, ""},
		{"F24", []uint32{ksF1 + 23}, ""},
		{"ctrl++", []uint32{ksControlL, '+'}, ""},
		{"+", []uint32{'+'}, ""},
		{"€", []uint32{0x010020ac}, ""},
		{"ß", []uint32{0xdf}, ""},
		{"ARROWLEFT", []uint32{0xff51}, ""},
		{"F25", nil, "unknown key"},
		{"F01", nil, "unknown key"},
		{"ctrl+nosuchkey", nil, "unknown key"},
		{"", nil, "empty"},
		{strings.Repeat("a", 100), nil, "max"},
		{strings.Repeat("a+", 100) + "a", nil, "max"},
	}
	for _, tt := range tests {
		got, err := Combo(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Combo(%.30q) = %v, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("Combo(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	if seq, err := Sequence("ctrl+a Delete"); err != nil || len(seq) != 2 || seq[1][0] != ksDelete {
		t.Errorf("Sequence = %v, %v", seq, err)
	}
}

func FuzzCombo(f *testing.F) {
	for _, s := range []string{"ctrl+shift+t", "+", "ctrl++", "F12", "€", "a b c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if c, err := Combo(s); err == nil && (len(c) == 0 || len(c) > MaxKeys) {
			t.Fatalf("Combo(%q) = %v", s, c)
		}
		if q, err := Sequence(s); err == nil && (len(q) == 0 || len(q) > MaxKeys) {
			t.Fatalf("Sequence(%q) = %v", s, q)
		}
	})
}

// Hostile or malformed action lists are refused whole, with a message
// that says what is wrong, before anything runs.
func TestPlanRefusesBadActions(t *testing.T) {
	f := newFake(1280, 800)
	c := newComputer(t, f)
	tests := []struct {
		json, want string
	}{
		{`[]`, "no actions"},
		{`[{}]`, "action is required"},
		{`[{"action":"rm -rf"}]`, "unknown action"},
		{`[{"action":"left_click","coordinate":[1280,10]}]`, "outside the 1280x800 screenshot"},
		{`[{"action":"left_click","coordinate":[-1,10]}]`, "out of range"},
		{`[{"action":"left_click","coordinate":[1]}]`, "want [x, y]"},
		{`[{"action":"mouse_move"}]`, "coordinate or element is required"},
		{`[{"action":"key","text":"a","element":"e1"}]`, "takes no element"},
		{`[{"action":"left_click","element":"e1","coordinate":[1,1]}]`, "not both"},
		{`[{"action":"left_click","element":"../../etc"}]`, "element id"},
		{`[{"action":"left_click","element":"e1234567890123456789012345"}]`, "element id"},
		{`[{"action":"left_click_drag","start_coordinate":[0,0]}]`, "coordinate is required"},
		{`[{"action":"scroll","scroll_direction":"sideways"}]`, "scroll_direction"},
		{`[{"action":"scroll","scroll_direction":"up","scroll_amount":1000}]`, "scroll_amount"},
		{`[{"action":"type"}]`, "text is required"},
		{`[{"action":"type","text":"x","mode":"telepathy"}]`, "mode"},
		{`[{"action":"key","text":"ctrl+nokey"}]`, "unknown key"},
		{`[{"action":"key","text":"a","repeat":1000}]`, "repeat"},
		{`[{"action":"wait","duration":3600}]`, "seconds"},
		{`[{"action":"wait","duration":-1}]`, "seconds"},
		{`[{"action":"hold_key","text":"shift","duration":45}]`, "at most"},
		{`[{"action":"zoom","region":[0,0,0,0]}]`, "region"},
		{`[{"action":"zoom","region":[0,0,2000,10]}]`, "region"},
		{`[{"action":"zoom"}]`, "region"},
		{`[{"action":"left_click","text":"ctrl+bogus"}]`, "modifiers"},
		{`[{"action":"screenshot"},{"action":"left_click","coordinate":[5000,5000]}]`, "action 1"},
		{`[` + strings.Repeat(`{"action":"screenshot"},`, MaxActions) + `{"action":"screenshot"}]`, "max"},
	}
	for _, tt := range tests {
		var as []Action
		if err := json.Unmarshal([]byte(tt.json), &as); err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		_, err := c.PlanActions(as)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%.80s: %v; want %q", tt.json, err, tt.want)
		}
	}
	if ev := f.take(); len(ev) != 0 {
		t.Fatalf("refused plans ran: %v", ev)
	}
}

func FuzzPlanActions(f *testing.F) {
	for _, s := range []string{
		`[{"action":"left_click","coordinate":[10,10],"text":"shift"}]`,
		`[{"action":"type","text":"héllo €"},{"action":"key","text":"ctrl+a Delete","repeat":2}]`,
		`[{"action":"scroll","coordinate":[5,5],"scroll_direction":"down","scroll_amount":3}]`,
		`[{"action":"zoom","region":[0,0,100,100]}]`,
	} {
		f.Add([]byte(s))
	}
	d := newFake(640, 400)
	c := New(d, Config{})
	defer c.Close()
	f.Fuzz(func(t *testing.T, b []byte) {
		var as []Action
		if json.Unmarshal(b, &as) != nil {
			return
		}
		p, err := c.PlanActions(as)
		if err != nil {
			return
		}
		g := c.Geometry()
		for _, o := range p.ops {
			for _, pt := range append(o.path, ptOr(o.at)) {
				if pt.X < 0 || pt.Y < 0 || pt.X >= g.ScreenWidth || pt.Y >= g.ScreenHeight {
					t.Fatalf("planned %v off the %dx%d screen", pt, g.ScreenWidth, g.ScreenHeight)
				}
			}
			if len(o.text) > MaxText || abs(o.dx) > MaxScroll || abs(o.dy) > MaxScroll || o.d > MaxWait {
				t.Fatalf("bounds exceeded: %+v", o)
			}
		}
	})
}

func ptOr(p *image.Point) image.Point {
	if p == nil {
		return image.Point{}
	}
	return *p
}

func run(t *testing.T, c *Computer, js string) ([]Result, error) {
	t.Helper()
	var as []Action
	if err := json.Unmarshal([]byte(js), &as); err != nil {
		t.Fatal(err)
	}
	p, err := c.PlanActions(as)
	if err != nil {
		t.Fatal(err)
	}
	return c.Run(t.Context(), p, ShotOptions{})
}

func TestRunActions(t *testing.T) {
	f := newFake(1920, 1080) // scaled: image 1429x804
	c := newComputer(t, f)
	tests := []struct {
		name, js string
		want     []string
	}{
		{"click with shift", `[{"action":"left_click","coordinate":[714,402],"text":"shift"}]`,
			[]string{"key 0xffe1 true", "move 960,540", "button 1 true", "button 1 false", "key 0xffe1 false"}},
		{"double click here", `[{"action":"double_click"}]`,
			[]string{"button 1 true", "button 1 false", "button 1 true", "button 1 false"}},
		{"right click", `[{"action":"right_click","coordinate":[0,0]}]`,
			[]string{"move 0,0", "button 3 true", "button 3 false"}},
		{"scroll down 2", `[{"action":"scroll","coordinate":[1428,803],"scroll_direction":"down","scroll_amount":2}]`,
			[]string{"move 1919,1079", "button 5 true", "button 5 false", "button 5 true", "button 5 false"}},
		{"scroll left with ctrl", `[{"action":"scroll","scroll_direction":"left","scroll_amount":1,"text":"ctrl"}]`,
			[]string{"key 0xffe3 true", "button 6 true", "button 6 false", "key 0xffe3 false"}},
		{"type", `[{"action":"type","text":"aB€\n"}]`,
			[]string{"key 0x61 true", "key 0x61 false", "key 0x42 true", "key 0x42 false", "key 0x10020ac true", "key 0x10020ac false", "key 0xff0d true", "key 0xff0d false"}},
		{"paste", `[{"action":"type","text":"漢字","mode":"paste"}]`,
			[]string{"clipboard 漢字", "key 0xffe3 true", "key 0x76 true", "key 0x76 false", "key 0xffe3 false"}},
		{"key sequence twice", `[{"action":"key","text":"ctrl+a Delete","repeat":2}]`,
			[]string{"key 0xffe3 true", "key 0x61 true", "key 0x61 false", "key 0xffe3 false", "key 0xffff true", "key 0xffff false",
				"key 0xffe3 true", "key 0x61 true", "key 0x61 false", "key 0xffe3 false", "key 0xffff true", "key 0xffff false"}},
		{"mouse down then up", `[{"action":"left_mouse_down","coordinate":[10,10]},{"action":"mouse_move","coordinate":[20,10]},{"action":"left_mouse_up"}]`,
			[]string{"move 14,14", "button 1 true", "move 27,14", "button 1 false"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.take()
			res, err := run(t, c, tt.js)
			if err != nil {
				t.Fatalf("%v %+v", err, res)
			}
			if got := f.take(); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// The back and forward buttons (8 and 9) press and release: forward's bit
// once overflowed a byte to nothing while the click reported ok.
func TestBackForwardButtons(t *testing.T) {
	f := newFake(1280, 800)
	c := newComputer(t, f)
	for _, tt := range []struct {
		button string
		at     int
		want   string
	}{
		{"back", 5, "move 5,5|button 8 true|button 8 false"},
		{"forward", 6, "move 6,6|button 9 true|button 9 false"},
	} {
		f.take()
		var as []OpenAIAction
		js := fmt.Sprintf(`[{"type":"click","x":%d,"y":%d,"button":%q}]`, tt.at, tt.at, tt.button)
		if err := json.Unmarshal([]byte(js), &as); err != nil {
			t.Fatal(err)
		}
		p, err := c.PlanOpenAI(as)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Run(t.Context(), p, ShotOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(f.take(), "|"); got != tt.want {
			t.Errorf("%s: events %q, want %q", tt.button, got, tt.want)
		}
	}
}

func TestDragMovesInSteps(t *testing.T) {
	f := newFake(1280, 800)
	c := newComputer(t, f)
	if _, err := run(t, c, `[{"action":"left_click_drag","start_coordinate":[100,100],"coordinate":[180,100]}]`); err != nil {
		t.Fatal(err)
	}
	ev := f.take()
	if ev[0] != "move 100,100" || ev[1] != "button 1 true" || ev[len(ev)-1] != "button 1 false" || ev[len(ev)-2] != "move 180,100" {
		t.Fatalf("drag events %q", ev)
	}
	if moves := strings.Count(strings.Join(ev, "|"), "move"); moves < 5 {
		t.Fatalf("a drag of %d moves: toolkits need intermediate motion", moves)
	}
}

// The first failure stops the list, later actions are not executed, and
// every held key and button is let go.
func TestRunStopsAndReleases(t *testing.T) {
	f := newFake(1280, 800)
	f.failKey = 'x'
	c := newComputer(t, f)
	res, err := run(t, c, `[{"action":"left_mouse_down","coordinate":[5,5]},{"action":"hold_key","text":"shift","duration":0.01},{"action":"key","text":"ctrl+x"},{"action":"screenshot"}]`)
	if err == nil {
		t.Fatal("no error from a failing key")
	}
	want := []string{"ok", "ok", "error", "not_executed"}
	for i, r := range res {
		if r.Status != want[i] {
			t.Fatalf("result %d: %+v; want %s", i, r, want[i])
		}
	}
	if res[3].Error != NotExecuted {
		t.Fatalf("not executed says %q", res[3].Error)
	}
	ev := strings.Join(f.take(), "|")
	if !strings.HasSuffix(ev, "key 0xffe3 false|button 1 false") {
		t.Fatalf("held Ctrl and the left button not released: %s", ev)
	}
}

// shrinking reports its full size once, then a smaller one: a viewer
// resized the screen while a screenshot was being taken.
type shrinking struct {
	*fakeDisplay
	calls atomic.Int32
}

func (s *shrinking) Size() (int, int) {
	if s.calls.Add(1) == 1 {
		return s.w, s.h
	}
	return s.w / 2, s.h / 2
}

// A screenshot takes the screen's size once, for its area and its buffer:
// read twice, a resize in between sliced past the buffer (a panic that
// took the daemon down from an MCP tool).
func TestScreenshotDuringResize(t *testing.T) {
	d := &shrinking{fakeDisplay: newFake(2560, 1600)}
	c := New(d, Config{})
	defer c.Close()
	d.calls.Store(0)
	s, err := c.Screenshot(ShotOptions{Format: "jpeg"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ScreenWidth != 2560 || s.Region.Dx() != 2560 {
		t.Fatalf("screen %dx%d region %v", s.ScreenWidth, s.ScreenHeight, s.Region)
	}
}

func TestScreenshot(t *testing.T) {
	f := newFake(1920, 1080)
	c := newComputer(t, f)
	s, err := c.Screenshot(ShotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(s.Data))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1429 || b.Dy() != 804 || s.ImageWidth != 1429 || s.ScreenWidth != 1920 {
		t.Fatalf("image %v, geometry %+v", b, s.Geometry)
	}
	// 1:1 region: exact pixels, red from the X byte order swapped.
	s, err = c.Screenshot(ShotOptions{Region: image.Rect(0, 0, 100, 50), MaxLongEdge: 4000, MaxPixels: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	img, _ = png.Decode(bytes.NewReader(s.Data))
	if r := s.Region; r.Min != (image.Point{}) || r.Dx() < 134 {
		t.Fatalf("region on screen %v", r)
	}
	r, g, b, _ := img.At(7, 3).RGBA()
	if r>>8 != 10 || g>>8 != 3 || b>>8 != 7 {
		t.Fatalf("pixel (7,3) = %d,%d,%d; want R=x+y G=y B=x", r>>8, g>>8, b>>8)
	}
	// The pointer is drawn in where it is.
	f.Pointer(50, 60, 0)
	s, _ = c.Screenshot(ShotOptions{Cursor: true, MaxLongEdge: 4000, MaxPixels: 1 << 30})
	img, _ = png.Decode(bytes.NewReader(s.Data))
	if r, g, _, _ := img.At(50, 60).RGBA(); r>>8 != 255 || g>>8 != 0 {
		t.Fatalf("no pointer at (50,60): %d,%d", r>>8, g>>8)
	}
	if _, err := c.Screenshot(ShotOptions{Format: "gif"}); err == nil {
		t.Fatal("gif accepted")
	}
}

// Area averaging: a checkerboard halved is an even grey; a flat colour
// stays exact.
func TestResample(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 8, 8))
	for y := range 8 {
		for x := range 8 {
			v := uint8(0)
			if (x+y)%2 == 0 {
				v = 200
			}
			i := src.PixOffset(x, y)
			src.Pix[i], src.Pix[i+1], src.Pix[i+2], src.Pix[i+3] = v, v, v, 255
		}
	}
	dst := resample(src, 4, 4)
	for i := 0; i < len(dst.Pix); i += 4 {
		if dst.Pix[i] != 100 {
			t.Fatalf("pixel %d = %d, want 100", i/4, dst.Pix[i])
		}
	}
	if d := resample(src, 3, 5); d.Rect.Dx() != 3 || d.Rect.Dy() != 5 {
		t.Fatalf("size %v", d.Rect)
	}
}

func TestSettle(t *testing.T) {
	f := newFake(64, 64)
	c := New(f, Config{SettleQuiet: 50 * time.Millisecond})
	defer c.Close()
	stop := make(chan struct{})
	go func() { // damage every 10 ms for 200 ms
		for i := 0; i < 20; i++ {
			f.damage <- image.Rect(0, 0, 1, 1)
			time.Sleep(10 * time.Millisecond)
		}
		close(stop)
	}()
	t0 := time.Now()
	if !c.Settle(t.Context(), t0, 0, 2*time.Second) {
		t.Fatal("did not settle")
	}
	<-stop
	if d := time.Since(t0); d < 200*time.Millisecond {
		t.Fatalf("settled after %v while the screen still changed", d)
	}
	if c.Settle(t.Context(), time.Now(), time.Second, 100*time.Millisecond) {
		t.Fatal("settled within a cap shorter than the quiet time")
	}
	// A screen that has been still long enough is settled at once.
	time.Sleep(60 * time.Millisecond)
	t1 := time.Now()
	if !c.Settle(t.Context(), time.Time{}, 50*time.Millisecond, time.Second) || time.Since(t1) > 20*time.Millisecond {
		t.Fatalf("a still screen took %v to settle", time.Since(t1))
	}
}

func FuzzPlanCompat(f *testing.F) {
	f.Add([]byte(`[{"type":"click","x":5,"y":5,"button":"right"},{"type":"drag","path":[{"x":1,"y":1},{"x":9,"y":9}]},{"type":"scroll","scroll_y":-300}]`), true)
	f.Add([]byte(`[{"type":"keypress","keys":["CTRL","A"]},{"type":"wait","ms":10}]`), true)
	f.Add([]byte(`[{"action_type":"MOVE_REL","x_offset":-5,"y_offset":3},{"action_type":"HOTKEY","keys":["ctrl","c"]}]`), false)
	f.Add([]byte(`[{"action_type":"CLICK","x":1,"y":2,"num_clicks":3},{"action_type":"SCROLL","dx":10,"dy":-500}]`), false)
	d := newFake(640, 400)
	c := New(d, Config{})
	defer c.Close()
	f.Fuzz(func(t *testing.T, b []byte, openai bool) {
		var p Plan
		var err error
		if openai {
			var as []OpenAIAction
			if json.Unmarshal(b, &as) != nil {
				return
			}
			p, err = c.PlanOpenAI(as)
		} else {
			as, uerr := UnmarshalAIO(b)
			if uerr != nil {
				return
			}
			p, err = c.PlanAIO(as)
		}
		if err != nil {
			return
		}
		for _, o := range p.ops {
			for _, pt := range append(o.path, ptOr(o.at)) {
				if pt.X < 0 || pt.Y < 0 || pt.X >= 640 || pt.Y >= 400 {
					t.Fatalf("planned %v off the screen", pt)
				}
			}
			if abs(o.dx) > MaxScroll || abs(o.dy) > MaxScroll || o.d > MaxWait || len(o.text) > MaxText || o.count > MaxRepeat {
				t.Fatalf("bounds exceeded: %+v", o)
			}
		}
	})
}
