package a11y

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
	"github.com/godbus/dbus/v5"
)

// fakeObj is an accessible object of a hostile application: it answers
// what the test makes it answer.
type fakeObj struct {
	name     string
	count    int32 // ChildCount it claims
	kids     []ref
	delay    time.Duration
	showing  bool
	fullName bool // Get/GetAll answer with name (else a short one)
}

func (o *fakeObj) GetState() ([]uint32, *dbus.Error) {
	time.Sleep(o.delay)
	if !o.showing {
		return []uint32{0, 0}, nil
	}
	return []uint32{1<<stateEnabled | 1<<stateSensitive | 1<<stateShowing | 1<<stateVisible | 1<<stateFocusable, 0}, nil
}
func (o *fakeObj) GetRoleName() (string, *dbus.Error) { return "push button", nil }
func (o *fakeObj) GetChildren() ([]ref, *dbus.Error)  { return o.kids, nil }
func (o *fakeObj) GetChildAtIndex(i int32) (ref, *dbus.Error) {
	if int(i) < len(o.kids) {
		return o.kids[i], nil
	}
	return ref{}, dbus.MakeFailedError(errors.New("no such child"))
}
func (o *fakeObj) GetAll(string) (map[string]dbus.Variant, *dbus.Error) {
	return map[string]dbus.Variant{"Name": dbus.MakeVariant(o.name), "ChildCount": dbus.MakeVariant(o.count)}, nil
}
func (o *fakeObj) GetExtents(uint32) (extents, *dbus.Error) {
	return extents{10, 10, 100, 20}, nil
}

// hostileBus starts a real accessibility bus and an application on it
// whose objects are given by path; it returns a client whose walk starts
// at the application's "/root".
func hostileBus(t *testing.T, objs map[string]*fakeObj) *Client {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		if testenv.Required() {
			t.Fatal("dbus-daemon not installed")
		}
		t.Skip("dbus-daemon not installed")
	}
	if _, err := os.Stat(DefaultConfigFile); err != nil {
		if testenv.Required() {
			t.Fatal("at-spi2-core not installed")
		}
		t.Skip("at-spi2-core not installed")
	}
	sp := proc.NewSpawner()
	t.Cleanup(sp.Close)
	bus, err := StartBus(t.Context(), sp, BusConfig{Dir: testenv.TempDir(t) + "/a11y"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus.Stop(context.Background(), 5*time.Second) })
	app, err := dbus.Dial(bus.Address)
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Auth(nil); err != nil {
		t.Fatal(err)
	}
	if err := app.Hello(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { app.Close() })
	me := app.Names()[0]
	for path, o := range objs {
		for i := range o.kids {
			if o.kids[i].Bus == "" {
				o.kids[i].Bus = me
			}
		}
		p := dbus.ObjectPath(path)
		for _, iface := range []string{ifaceAccessible, "org.freedesktop.DBus.Properties", "org.a11y.atspi.Component"} {
			if err := app.Export(o, p, iface); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := Dial(t.Context(), bus.Address)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.root = ref{me, "/root"}
	return c
}

// TestHostileApplication: an application on the bus (the agent's, say)
// answers with cycles, more children than it claims, huge names, slow
// replies and oversized messages; snapshots stay bounded and end.
func TestHostileApplication(t *testing.T) {
	wide := make([]ref, 60_000) // more than maxKids, each a dead object
	for i := range wide {
		wide[i] = ref{Path: dbus.ObjectPath("/dead/x" + strings.Repeat("x", i%7))}
	}
	objs := map[string]*fakeObj{
		"/root":  {name: "root", count: 1, kids: []ref{{Path: "/app"}}, showing: true},
		"/app":   {name: "app", count: 4, kids: []ref{{Path: "/cycle"}, {Path: "/wide"}, {Path: "/long"}, {Path: "/app"}}, showing: true},
		"/cycle": {name: "cycle", count: 2, kids: []ref{{Path: "/cycle"}, {Path: "/root"}}, showing: true},
		"/wide":  {name: "wide", count: 3, kids: wide, showing: true},
		"/long":  {name: strings.Repeat("n", 1<<20), showing: true},
	}
	c := hostileBus(t, objs)
	start := time.Now()
	snap, err := c.Snapshot(t.Context(), Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Truncated != "size" || snap.Visited > maxKids+10 {
		t.Fatalf("wide: truncated %q, visited %d", snap.Truncated, snap.Visited)
	}
	names := map[string]int{}
	for _, e := range snap.Elements {
		names[e.Name[:min(len(e.Name), 10)]]++
		if len(e.Name) > MaxName {
			t.Fatalf("a name of %d bytes", len(e.Name))
		}
	}
	if names["cycle"] != 1 || names["app"] != 1 || names["nnnnnnnnnn"] != 1 {
		t.Fatalf("listed %v", names)
	}
	t.Logf("hostile tree: %d elements, %d visited, %v", len(snap.Elements), snap.Visited, time.Since(start))
}

func TestSlowApplication(t *testing.T) {
	objs := map[string]*fakeObj{
		"/root": {name: "root", count: 1, kids: []ref{{Path: "/app"}}, showing: true},
		"/app":  {name: "app", count: 1, kids: []ref{{Path: "/slow"}}, showing: true},
		"/slow": {name: "slow", delay: 10 * time.Second, showing: true},
	}
	c := hostileBus(t, objs)
	start := time.Now()
	snap, err := c.Snapshot(t.Context(), Options{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second || snap.Truncated != "time" {
		t.Fatalf("a 10 s reply under a 300 ms bound: %v, truncated %q", took, snap.Truncated)
	}
	if _, err := c.Locate(t.Context(), "e999"); !errors.Is(err, ErrUnknownElement) {
		t.Fatalf("Locate of an id never given: %v", err)
	}
}

func TestOversizedMessageCutsTheConnection(t *testing.T) {
	objs := map[string]*fakeObj{
		"/root": {name: "root", count: 1, kids: []ref{{Path: "/app"}}, showing: true},
		"/app":  {name: "app", count: 1, kids: []ref{{Path: "/huge"}}, showing: true},
		"/huge": {name: strings.Repeat("h", MaxMessage+1), showing: true},
	}
	c := hostileBus(t, objs)
	snap, err := c.Snapshot(t.Context(), Options{Timeout: 10 * time.Second})
	if err == nil {
		for _, e := range snap.Elements {
			if strings.HasPrefix(e.Name, "hhh") {
				t.Fatal("a name over the message bound was read")
			}
		}
	}
	for deadline := time.Now().Add(5 * time.Second); c.Alive(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connection that carried an oversized message is still up")
		}
	}
}
