package computer

import (
	"context"
	"errors"
	"image"
	"strings"
	"testing"

	"github.com/cubepod/deskd/a11y"
)

// stillElements is an Elements of fixed answers (the real one, AT-SPI
// over a real bus, is tested end to end in cmd/deskd).
type stillElements struct {
	snap *a11y.Snapshot
	at   map[string]image.Rectangle
	got  a11y.Options
}

func (s *stillElements) Snapshot(_ context.Context, o a11y.Options) (*a11y.Snapshot, error) {
	s.got = o
	return s.snap, nil
}

func (s *stillElements) Locate(_ context.Context, id string) (image.Rectangle, error) {
	if r, ok := s.at[id]; ok {
		return r, nil
	}
	return image.Rectangle{}, a11y.ErrUnknownElement
}

func TestElements(t *testing.T) {
	f := newFake(1920, 1080) // screenshots 1429x804
	src := &stillElements{
		snap: &a11y.Snapshot{Visited: 3, Elements: []a11y.Element{
			{ID: "e1", Role: "application", Name: "Chromium"},
			{ID: "e2", Depth: 1, Role: "push button", Name: "OK", Bounds: image.Rect(960, 540, 1060, 580), Interactive: true, States: []string{"focused"}},
			{ID: "e3", Depth: 1, Role: "entry", Name: "Half off", Bounds: image.Rect(1900, 0, 2100, 40), Value: "v", Caret: image.Rect(1910, 4, 1911, 36)},
		}},
		at: map[string]image.Rectangle{"e2": image.Rect(960, 540, 1060, 580), "e9": image.Rect(3000, 0, 3100, 10)},
	}
	c := New(f, Config{Elements: src})
	t.Cleanup(c.Close)
	l, err := c.Elements(t.Context(), ElementOptions{Region: image.Rect(0, 0, 714, 402)})
	if err != nil {
		t.Fatal(err)
	}
	if src.got.Region != image.Rect(0, 0, 960, 540) || src.got.Screen != image.Rect(0, 0, 1920, 1080) {
		t.Fatalf("region %v, screen %v, want the image region in screen pixels", src.got.Region, src.got.Screen)
	}
	ok := l.Elements[1]
	if ok.Center[0] != 751 || ok.Center[1] != 416 || ok.Bounds[2] < 73 || ok.Bounds[2] > 75 {
		t.Fatalf("OK in image space: %+v", ok)
	}
	if half := l.Elements[2]; half.Bounds[0]+half.Bounds[2] > 1429 || len(half.Caret) != 4 || half.Caret[0] != 1421 || half.Caret[2] != 1 {
		t.Fatalf("an element half off the screen, its caret: %+v", half)
	}
	text := l.Text()
	if !strings.Contains(text, `  [e2] push button "OK" (focused) @ 751,416`) || !strings.Contains(text, `value="v"`) {
		t.Fatalf("text:\n%s", text)
	}
	// An action on an element goes to its centre on the screen.
	p, err := c.PlanActions([]Action{{Action: "left_click", Element: "e2"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run(t.Context(), p, ShotOptions{}); err != nil {
		t.Fatal(err)
	}
	if f.pos != image.Pt(1009, 559) {
		t.Fatalf("clicked at %v, want the centre (1009,559)", f.pos)
	}
	for id, want := range map[string]error{"e404": a11y.ErrUnknownElement, "e9": ErrOutOfRange} {
		p, _ := c.PlanActions([]Action{{Action: "left_click", Element: id}})
		if _, err := c.Run(t.Context(), p, ShotOptions{}); !errors.Is(err, want) {
			t.Errorf("click on %s: %v, want %v", id, err, want)
		}
	}
	// Without a source there are no elements.
	bare := New(newFake(100, 100), Config{})
	t.Cleanup(bare.Close)
	if _, err := bare.Elements(t.Context(), ElementOptions{}); !errors.Is(err, ErrNoElements) {
		t.Fatalf("no source: %v", err)
	}
}
