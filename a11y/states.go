package a11y

// AT-SPI state bits (AtspiStateType, at-spi2-core's atspi-constants.h):
// GetState answers two uint32 words, bit n of the set in word n/32.
const (
	stateActive        = 1
	stateBusy          = 3
	stateChecked       = 4
	stateCollapsed     = 5
	stateDefunct       = 6
	stateEditable      = 7
	stateEnabled       = 8
	stateExpandable    = 9
	stateExpanded      = 10
	stateFocusable     = 11
	stateFocused       = 12
	stateModal         = 16
	stateMultiLine     = 17
	statePressed       = 20
	stateSelectable    = 22
	stateSelected      = 23
	stateSensitive     = 24
	stateShowing       = 25
	stateVisible       = 30
	stateIndeterminate = 32
	stateRequired      = 33
	stateInvalidEntry  = 36
	stateVisited       = 40
	stateCheckable     = 41
	stateHasPopup      = 42
	stateReadOnly      = 43
)

// stateSet is the two words of GetState.
type stateSet [2]uint32

func states(words []uint32) stateSet {
	var s stateSet
	copy(s[:], words)
	return s
}

func (s stateSet) has(bit int) bool { return s[bit/32]&(1<<(bit%32)) != 0 }

// stateNames are the states an element lists, in this order: what tells
// an agent how to act on it. "disabled" stands for the absence of
// enabled (or sensitive) on an element that could take input.
var stateNames = []struct {
	bit  int
	name string
}{
	{stateFocused, "focused"},
	{stateChecked, "checked"},
	{stateIndeterminate, "mixed"},
	{stateSelected, "selected"},
	{statePressed, "pressed"},
	{stateExpanded, "expanded"},
	{stateCollapsed, "collapsed"},
	{stateEditable, "editable"},
	{stateReadOnly, "readonly"},
	{stateRequired, "required"},
	{stateInvalidEntry, "invalid"},
	{stateMultiLine, "multiline"},
	{stateHasPopup, "haspopup"},
	{stateModal, "modal"},
	{stateBusy, "busy"},
	{stateVisited, "visited"},
}

// names lists s's states for an element of the given interactivity.
func (s stateSet) names(interactive bool) []string {
	var out []string
	if interactive && (!s.has(stateEnabled) || !s.has(stateSensitive)) {
		out = append(out, "disabled")
	}
	for _, n := range stateNames {
		if s.has(n.bit) {
			out = append(out, n.name)
		}
	}
	return out
}

// interactiveRoles are the roles (GetRoleName's names) a person or an
// agent acts on; an element with another role counts as interactive when
// it can take the focus.
var interactiveRoles = map[string]bool{
	"push button": true, "toggle button": true, "check box": true, "radio button": true,
	"entry": true, "password text": true, "combo box": true, "spin button": true, "slider": true,
	"link": true, "menu item": true, "check menu item": true, "radio menu item": true, "menu": true,
	"page tab": true, "list item": true, "tree item": true, "list box": true,
	"switch": true, "scroll bar": true, "text": false, "push button menu": true,
}

func interactive(role string, s stateSet) bool {
	if v, ok := interactiveRoles[role]; ok && v {
		return true
	}
	return s.has(stateFocusable) && role != "document web" && role != "document frame" && role != "frame"
}

// containerRoles carry no meaning of their own when they have no name:
// a compact listing leaves them out (their children stay).
var containerRoles = map[string]bool{
	"panel": true, "section": true, "filler": true, "redundant object": true, "unknown": true,
	"form": true, "paragraph": true, "label": true, "block quote": true, "grouping": true,
	"layered pane": true, "root pane": true, "scroll pane": true, "viewport": true,
	"internal frame": true, "split pane": true, "article": true, "landmark": true,
	"static": true, "image": false,
}

// valueRoles are those whose text is their value (deskd reads it with
// Text.GetText); a password's never is.
var valueRoles = map[string]bool{"entry": true, "spin button": true, "combo box": true, "text": true}
