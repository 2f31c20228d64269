// Package computer drives a desktop the way computer-use agents do:
// screenshots scaled for vision models, mouse and keyboard actions in
// Anthropic's, OpenAI's and AIO Sandbox's vocabularies, the clipboard, and
// "settled" screenshots that wait for the screen to stop changing (from
// DAMAGE, not a fixed sleep). It drives any Display; x11.Screen is one.
package computer

import (
	"context"
	"errors"
	"fmt"
	"image"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/cubepod/deskd/cores"
)

// Display is what a Computer drives. x11.Screen implements it.
type Display interface {
	Size() (w, h int)
	// Capture copies r of the screen into pix (BGRX, stride bytes a row)
	// at r's coordinates.
	Capture(r image.Rectangle, pix []byte, stride int) error
	Damage() <-chan image.Rectangle
	Key(keysym uint32, down bool) error
	// Pointer moves the pointer to x, y and sets the buttons held (bit i
	// is button i+1: 1 left, 2 middle, 3 right, 4-7 wheel, 8-9 back/forward).
	Pointer(x, y int, buttons uint16) error
	CursorImage() (*image.NRGBA, image.Point, error)
	CursorPosition() (image.Point, error)
	SetClipboardSync(ctx context.Context, text string) error
	ClipboardChanged() <-chan string
}

// Config configures a Computer.
type Config struct {
	// MaxLongEdge and MaxPixels bound the default screenshot size (what
	// current vision models take: 1568 px and 1.15 megapixels). Action
	// coordinates are in that image's space.
	MaxLongEdge int
	MaxPixels   int
	// SettleQuiet is how long the screen must be free of damage for a
	// screenshot to count as settled (default 300 ms); SettleMax caps the
	// wait (default 5 s).
	SettleQuiet time.Duration
	SettleMax   time.Duration
	// KeyDelay is the pause between the keys of typed text (default
	// 2 ms): applications read X events in batches, and some drop keys
	// that arrive all at once.
	KeyDelay time.Duration
	Logger   *slog.Logger
	// Elements, when set, is where accessibility snapshots come from.
	Elements Elements
	// Cores, when the daemon runs on one P, is widened while a
	// screenshot is encoded in strips (nil: the runtime's own setting).
	Cores *cores.Cores
}

// Defaults of Config.
const (
	DefaultMaxLongEdge = 1568
	DefaultMaxPixels   = 1_150_000
)

// Computer drives one Display. Its methods are safe for concurrent use;
// action lists run one at a time.
type Computer struct {
	d   Display
	cfg Config
	log *slog.Logger

	run sync.Mutex // one action list at a time; guards the input state
	// Input state, as deskd left it: released on error or cancel.
	buttons uint16
	held    []uint32 // keysyms down, in press order

	mu         sync.Mutex // guards the fields below
	lastDamage time.Time
	clipboard  string
	clipKnown  bool

	shot sync.Mutex // one capture at a time: pix is shared
	pix  []byte
	enc  chan struct{} // screenshots in capture and encoding: 2 at most

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Computer for d and starts the goroutine that follows its
// damage and clipboard; Close stops it.
func New(d Display, cfg Config) *Computer {
	if cfg.MaxLongEdge <= 0 {
		cfg.MaxLongEdge = DefaultMaxLongEdge
	}
	if cfg.MaxPixels <= 0 {
		cfg.MaxPixels = DefaultMaxPixels
	}
	if cfg.SettleQuiet <= 0 {
		cfg.SettleQuiet = 300 * time.Millisecond
	}
	if cfg.SettleMax <= 0 {
		cfg.SettleMax = 5 * time.Second
	}
	if cfg.KeyDelay <= 0 {
		cfg.KeyDelay = 2 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Computer{d: d, cfg: cfg, log: cfg.Logger, lastDamage: time.Now(), enc: make(chan struct{}, 2)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.follow()
	return c
}

// Close stops following the display (it does not close it).
func (c *Computer) Close() {
	c.cancel()
	c.wg.Wait()
}

// Done is closed when the display went away or Close was called.
func (c *Computer) Done() <-chan struct{} { return c.ctx.Done() }

// follow records when the screen last changed and what the clipboard
// holds, until the display's damage channel closes or Close.
func (c *Computer) follow() {
	defer c.wg.Done()
	clip := c.d.ClipboardChanged()
	for {
		select {
		case <-c.ctx.Done():
			return
		case _, ok := <-c.d.Damage():
			if !ok {
				c.cancel()
				return
			}
			c.mu.Lock()
			c.lastDamage = time.Now()
			c.mu.Unlock()
		case t, ok := <-clip:
			if !ok {
				clip = nil
				continue
			}
			c.mu.Lock()
			c.clipboard, c.clipKnown = t, true
			c.mu.Unlock()
		}
	}
}

// Geometry is how screenshots relate to the screen.
type Geometry struct {
	ScreenWidth  int     `json:"screen_width"`
	ScreenHeight int     `json:"screen_height"`
	ImageWidth   int     `json:"image_width"`
	ImageHeight  int     `json:"image_height"`
	Scale        float64 `json:"scale"` // image pixels per screen pixel (<= 1)
}

// fit is the geometry of an image of a w×h screen bounded by long edge
// and pixel count.
func fit(w, h, longEdge, pixels int) Geometry {
	s := 1.0
	if l := max(w, h); l > longEdge {
		s = float64(longEdge) / float64(l)
	}
	if p := float64(w) * float64(h) * s * s; p > float64(pixels) {
		s *= math.Sqrt(float64(pixels) / p)
	}
	g := Geometry{ScreenWidth: w, ScreenHeight: h, ImageWidth: max(1, int(float64(w)*s)), ImageHeight: max(1, int(float64(h)*s))}
	g.Scale = float64(g.ImageWidth) / float64(w)
	return g
}

// Geometry is the default screenshot geometry: action coordinates are in
// its image's space.
func (c *Computer) Geometry() Geometry {
	w, h := c.d.Size()
	return fit(w, h, c.cfg.MaxLongEdge, c.cfg.MaxPixels)
}

// ErrOutOfRange is wrapped by errors about coordinates off the image.
var ErrOutOfRange = errors.New("coordinate out of range")

// toScreen maps an image point to the screen pixel at the centre of its
// footprint, so that toImage(toScreen(p)) == p.
func (g Geometry) toScreen(p image.Point) (image.Point, error) {
	if p.X < 0 || p.Y < 0 || p.X >= g.ImageWidth || p.Y >= g.ImageHeight {
		return image.Point{}, fmt.Errorf("%w: (%d, %d) is outside the %dx%d screenshot", ErrOutOfRange, p.X, p.Y, g.ImageWidth, g.ImageHeight)
	}
	x := int((float64(p.X) + 0.5) * float64(g.ScreenWidth) / float64(g.ImageWidth))
	y := int((float64(p.Y) + 0.5) * float64(g.ScreenHeight) / float64(g.ImageHeight))
	return image.Pt(min(x, g.ScreenWidth-1), min(y, g.ScreenHeight-1)), nil
}

// toImage maps a screen pixel to the image pixel that shows it.
func (g Geometry) toImage(p image.Point) image.Point {
	x := int((float64(p.X) + 0.5) * float64(g.ImageWidth) / float64(g.ScreenWidth))
	y := int((float64(p.Y) + 0.5) * float64(g.ImageHeight) / float64(g.ScreenHeight))
	return image.Pt(min(max(x, 0), g.ImageWidth-1), min(max(y, 0), g.ImageHeight-1))
}

// CursorPosition is the pointer's position in image space.
func (c *Computer) CursorPosition() (image.Point, error) {
	p, err := c.d.CursorPosition()
	if err != nil {
		return image.Point{}, err
	}
	return c.Geometry().toImage(p), nil
}

// Clipboard returns the text of the X clipboard as last seen.
func (c *Computer) Clipboard() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clipboard, c.clipKnown
}

// SetClipboard makes text the X clipboard (and PRIMARY selection).
func (c *Computer) SetClipboard(ctx context.Context, text string) error {
	if err := c.d.SetClipboardSync(ctx, text); err != nil {
		return err
	}
	c.mu.Lock()
	c.clipboard, c.clipKnown = text, true
	c.mu.Unlock()
	return nil
}

// Settle waits until the screen has had no damage for quiet (default
// Config.SettleQuiet) since since (a zero since: any time), and at most
// maxWait (default Config.SettleMax). After an action, pass its end: a
// change it causes may still be on its way. It reports whether the
// screen settled.
func (c *Computer) Settle(ctx context.Context, since time.Time, quiet, maxWait time.Duration) bool {
	if quiet <= 0 {
		quiet = c.cfg.SettleQuiet
	}
	if maxWait <= 0 {
		maxWait = c.cfg.SettleMax
	}
	deadline := time.Now().Add(maxWait)
	for {
		c.mu.Lock()
		quietFrom := c.lastDamage
		c.mu.Unlock()
		if since.After(quietFrom) {
			quietFrom = since
		}
		ready := quietFrom.Add(quiet)
		now := time.Now()
		if !now.Before(ready) {
			return true
		}
		if !now.Before(deadline) {
			return false
		}
		t := time.NewTimer(min(ready.Sub(now), deadline.Sub(now)))
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-c.ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}
