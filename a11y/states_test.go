package a11y

import (
	"image"
	"slices"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
)

func TestCheckModeAndID(t *testing.T) {
	for _, m := range []string{"", "off", "basic", "form-controls", "complete"} {
		if err := CheckMode(m); err != nil {
			t.Errorf("CheckMode(%q): %v", m, err)
		}
	}
	for _, m := range []string{"on", "COMPLETE", "complete ", strings.Repeat("x", 1000), "form-controls\n"} {
		if err := CheckMode(m); err == nil {
			t.Errorf("CheckMode(%.20q) passed", m)
		}
	}
	for _, id := range []string{"e1", "e12345678901234567890"} {
		if err := CheckID(id); err != nil {
			t.Errorf("CheckID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", "e", "1", "e-1", "E1", "e1 ", "e1/../x", "e123456789012345678901234", "e１"} {
		if err := CheckID(id); err == nil {
			t.Errorf("CheckID(%q) passed", id)
		}
	}
}

func TestClean(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Submit", "Submit"},
		{"a\x00b\x1bc\u0085d", "abcd"},
		{"line\nnext\ttab", "line\nnext\ttab"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
	}
	for _, tt := range tests {
		if got := clean(tt.in); got != tt.want {
			t.Errorf("clean(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := clean(strings.Repeat("é", 1000)); len(got) > MaxName+3 {
		t.Errorf("clean of 2000 bytes: %d bytes", len(got))
	}
}

func TestStateNames(t *testing.T) {
	set := func(bits ...int) stateSet {
		var s stateSet
		for _, b := range bits {
			s[b/32] |= 1 << (b % 32)
		}
		return s
	}
	tests := []struct {
		s           stateSet
		interactive bool
		want        []string
	}{
		{set(stateEnabled, stateSensitive, stateShowing, stateFocused, stateChecked), true, []string{"focused", "checked"}},
		{set(stateShowing, stateVisible), true, []string{"disabled"}},
		{set(stateShowing, stateVisible), false, nil},
		{set(stateEnabled, stateSensitive, stateEditable, stateRequired, stateReadOnly, stateHasPopup), true, []string{"editable", "readonly", "required", "haspopup"}},
	}
	for _, tt := range tests {
		if got := tt.s.names(tt.interactive); !slices.Equal(got, tt.want) {
			t.Errorf("names(%v, %v) = %v, want %v", tt.s, tt.interactive, got, tt.want)
		}
	}
	// Words as AT-SPI sends them: a check box of Chromium's.
	if s := states([]uint32{1124075776, 512}); !s.has(stateShowing) || !s.has(stateFocusable) || !s.has(stateCheckable) || s.has(stateChecked) {
		t.Errorf("states of a check box: %v", s)
	}
	if s := states(nil); s.has(stateShowing) {
		t.Error("no words: showing")
	}
}

func TestElementFilter(t *testing.T) {
	c := &Client{ids: map[ref]string{}, refs: map[string]ref{}}
	showing := states([]uint32{1<<stateEnabled | 1<<stateSensitive | 1<<stateShowing | 1<<stateVisible, 0})
	n := func(role, name string, st stateSet, r image.Rectangle) *node {
		return &node{ref: ref{":1.1", dbus.ObjectPath("/x/" + role + name)}, depth: 3, role: role, name: name, st: st, rect: r, full: true}
	}
	screen := image.Rect(0, 0, 1000, 800)
	on, off := image.Rect(10, 10, 50, 30), image.Rect(2000, 10, 2050, 30)
	tests := []struct {
		name string
		n    *node
		o    Options
		want bool
	}{
		{"button", n("push button", "OK", showing, on), Options{Screen: screen}, true},
		{"hidden", n("push button", "OK", stateSet{}, on), Options{Screen: screen}, false},
		{"hidden, all", n("push button", "OK", stateSet{}, on), Options{Screen: screen, All: true}, true},
		{"off the screen", n("push button", "OK", showing, off), Options{Screen: screen}, false},
		{"outside the region", n("push button", "OK", showing, on), Options{Screen: screen, Region: image.Rect(500, 500, 600, 600)}, false},
		{"unnamed panel", n("panel", "", showing, on), Options{Screen: screen}, false},
		{"unnamed panel, full", n("panel", "", showing, on), Options{Screen: screen, Full: true}, true},
		{"whitespace text", n("static", "\n", showing, on), Options{Screen: screen}, false},
		{"text, interactive only", n("static", "Hello", showing, on), Options{Screen: screen, Interactive: true}, false},
		{"link, interactive only", n("link", "Home", showing, on), Options{Screen: screen, Interactive: true}, true},
		{"not fetched", &node{depth: 3}, Options{}, false},
	}
	for _, tt := range tests {
		if _, got := c.element(tt.n, tt.o); got != tt.want {
			t.Errorf("%s: listed %v, want %v", tt.name, got, tt.want)
		}
	}
	pw := n("password text", "Password", showing, on)
	pw.value = "hunter2"
	if e, _ := c.element(pw, Options{Screen: screen}); e.Value != "" {
		t.Errorf("a password's value is listed: %q", e.Value)
	}
	// Ids are stable: the same object keeps its id.
	a, _ := c.element(n("link", "Home", showing, on), Options{})
	b, _ := c.element(n("link", "Home", showing, on), Options{})
	if a.ID != b.ID || CheckID(a.ID) != nil {
		t.Errorf("ids %q and %q", a.ID, b.ID)
	}
}
