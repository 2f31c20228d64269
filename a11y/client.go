package a11y

import (
	"context"
	"errors"
	"fmt"
	"image"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"
)

// ref names an accessible object: its application's bus name and path.
type ref struct {
	Bus  string
	Path dbus.ObjectPath
}

// The registry's root: its children are the applications.
var registryRoot = ref{"org.a11y.atspi.Registry", "/org/a11y/atspi/accessible/root"}

// AT-SPI interfaces and methods deskd calls.
const (
	ifaceAccessible = "org.a11y.atspi.Accessible"
	getState        = ifaceAccessible + ".GetState"               // () -> au (two words of state bits)
	getRoleName     = ifaceAccessible + ".GetRoleName"            // () -> s
	getChildren     = ifaceAccessible + ".GetChildren"            // () -> a(so)
	getChildAt      = ifaceAccessible + ".GetChildAtIndex"        // (i index) -> (so)
	getExtents      = "org.a11y.atspi.Component.GetExtents"       // (u coordType: 0 screen) -> (iiii)
	getText         = "org.a11y.atspi.Text.GetText"               // (i start, i end) -> s
	getCharExtents  = "org.a11y.atspi.Text.GetCharacterExtents"   // (i offset, u coordType) -> i, i, i, i
	ifaceText       = "org.a11y.atspi.Text"                       // its CaretOffset property: i
	getSelected     = "org.a11y.atspi.Selection.GetSelectedChild" // (i index) -> (so)
	propsGet        = "org.freedesktop.DBus.Properties.Get"       // (s iface, s name) -> v
	propsGetAll     = "org.freedesktop.DBus.Properties.GetAll"    // (s iface) -> a{sv}: Name, ChildCount, ...
)

// maxIDs bounds the ids a Client remembers; past it they start over (an
// agent holding an old id is told to take a new snapshot).
const maxIDs = 200_000

// Client asks an accessibility bus about what is on the screen. Its
// methods are safe for concurrent use.
type Client struct {
	conn *dbus.Conn
	root ref

	mu   sync.Mutex
	ids  map[ref]string
	refs map[string]ref
	next uint64
}

// rwc is a connection whose reads go through a frameLimit.
type rwc struct {
	io.Reader
	net.Conn
}

func (c rwc) Read(p []byte) (int, error) { return c.Reader.Read(p) }

// Dial connects to the accessibility bus at addr ("unix:path=...",
// nothing else: deskd never looks for or starts a session bus).
func Dial(ctx context.Context, addr string) (*Client, error) {
	path, ok := strings.CutPrefix(addr, "unix:path=")
	if !ok || path == "" || strings.ContainsAny(path, ",;") {
		return nil, fmt.Errorf("a11y: bus address %.80q: want unix:path=...", addr)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("a11y: dial bus: %w", err)
	}
	// Authentication and Hello under the caller's deadline (else 10 s).
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second)
	}
	_ = nc.SetDeadline(deadline)
	lim := &frameLimit{r: nc}
	conn, err := dbus.NewConn(rwc{lim, nc})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("a11y: %w", err)
	}
	if err := conn.Auth(nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("a11y: authenticate on bus: %w", err)
	}
	lim.armed.Store(true) // binary messages from here on
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("a11y: hello: %w", err)
	}
	_ = nc.SetDeadline(time.Time{})
	return &Client{conn: conn, root: registryRoot, ids: map[ref]string{}, refs: map[string]ref{}}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Alive reports whether the connection still works.
func (c *Client) Alive() bool { return c.conn.Connected() }

// idOf is the stable id of r ("e1", "e2", ...): the same object keeps
// its id from one snapshot to the next.
func (c *Client) idOf(r ref) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id, ok := c.ids[r]; ok {
		return id
	}
	if len(c.ids) >= maxIDs {
		clear(c.ids)
		clear(c.refs)
	}
	c.next++
	id := fmt.Sprintf("e%d", c.next)
	c.ids[r], c.refs[id] = id, r
	return id
}

// ErrUnknownElement is wrapped by Locate's errors about ids it cannot
// place.
var ErrUnknownElement = errors.New("unknown element")

// MaxID bounds an element id.
const MaxID = 24

// CheckID accepts what idOf makes: "e" and 1-20 digits.
func CheckID(id string) error {
	ok := len(id) >= 2 && len(id) <= MaxID && id[0] == 'e'
	for i := 1; ok && i < len(id); i++ {
		ok = id[i] >= '0' && id[i] <= '9'
	}
	if !ok {
		return fmt.Errorf("element id %.40q: want an id from a snapshot, such as e12", id)
	}
	return nil
}

// Locate asks where element id is now, in screen pixels. An element that
// went away, or no longer shows, is an error wrapping ErrUnknownElement.
func (c *Client) Locate(ctx context.Context, id string) (image.Rectangle, error) {
	if err := CheckID(id); err != nil {
		return image.Rectangle{}, fmt.Errorf("%w: %w", ErrUnknownElement, err)
	}
	c.mu.Lock()
	r, ok := c.refs[id]
	c.mu.Unlock()
	if !ok {
		return image.Rectangle{}, fmt.Errorf("%w: %s is not in a recent snapshot: take a new one", ErrUnknownElement, id)
	}
	o := c.conn.Object(r.Bus, r.Path)
	var st []uint32
	if err := o.CallWithContext(ctx, getState, dbus.FlagNoAutoStart).Store(&st); err != nil {
		return image.Rectangle{}, fmt.Errorf("%w: %s is gone (%v): take a new snapshot", ErrUnknownElement, id, err)
	}
	s := states(st)
	if s.has(stateDefunct) || !s.has(stateShowing) {
		return image.Rectangle{}, fmt.Errorf("%w: %s no longer shows: take a new snapshot", ErrUnknownElement, id)
	}
	var e extents
	if err := o.CallWithContext(ctx, getExtents, dbus.FlagNoAutoStart, uint32(0)).Store(&e); err != nil {
		return image.Rectangle{}, fmt.Errorf("%w: %s has no place on the screen (%v)", ErrUnknownElement, id, err)
	}
	rect := e.rect()
	if rect.Empty() {
		return image.Rectangle{}, fmt.Errorf("%w: %s has no size on the screen", ErrUnknownElement, id)
	}
	return rect, nil
}

// extents is Component.GetExtents' answer.
type extents struct{ X, Y, W, H int32 }

// maxCoord bounds a coordinate an application reports.
const maxCoord = 1 << 20

func (e extents) rect() image.Rectangle {
	clampC := func(v int32) int { return int(min(max(v, -maxCoord), maxCoord)) }
	x, y := clampC(e.X), clampC(e.Y)
	return image.Rect(x, y, x+clampC(max(e.W, 0)), y+clampC(max(e.H, 0)))
}
