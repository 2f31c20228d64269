package x11

import (
	"errors"
	"fmt"
	"image"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/randr"
	"github.com/jezek/xgb/xproto"
)

// Resizing an Xvfb screen, as measured on Xvfb 21: RANDR reports the
// size range 1x1 .. the -screen size and refuses anything larger
// (BadValue), so Xvfb starts at the largest size viewers may ask for and
// is shrunk at once. `xrandr --newmode` does not help: a mode is freed
// when the client that made it leaves. One resize from one connection
// (create or reuse a mode, add it to the output, set the CRTC, set the
// screen size) takes about 2 ms.

// initRandR readies RANDR on c (version 1.2 or later is needed for CRTCs).
func initRandR(c *xgb.Conn) error {
	if err := useExtension(c, "RANDR", randr.Init); err != nil {
		return fmt.Errorf("x11: RANDR: %w", err)
	}
	v, err := randr.QueryVersion(c, 1, 5).Reply()
	if err != nil {
		return fmt.Errorf("x11: RANDR version: %w", err)
	}
	if v.MajorVersion < 1 || (v.MajorVersion == 1 && v.MinorVersion < 2) {
		return fmt.Errorf("x11: RANDR %d.%d is too old (need 1.2)", v.MajorVersion, v.MinorVersion)
	}
	return nil
}

// maxSize is the largest screen RANDR allows on root.
func maxSize(c *xgb.Conn, root xproto.Window) (int, int, error) {
	r, err := randr.GetScreenSizeRange(c, root).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("x11: screen size range: %w", err)
	}
	return int(r.MaxWidth), int(r.MaxHeight), nil
}

// resize sets root's screen to w×h, clamped to RANDR's range, and
// returns the size set.
func resize(c *xgb.Conn, root xproto.Window, w, h int) (int, int, error) {
	rng, err := randr.GetScreenSizeRange(c, root).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("x11: screen size range: %w", err)
	}
	w = min(max(w, int(rng.MinWidth), MinDimension), int(rng.MaxWidth))
	h = min(max(h, int(rng.MinHeight), MinDimension), int(rng.MaxHeight))
	res, err := randr.GetScreenResourcesCurrent(c, root).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("x11: screen resources: %w", err)
	}
	if len(res.Crtcs) == 0 || len(res.Outputs) == 0 {
		return 0, 0, errors.New("x11: the screen has no CRTC or output to resize")
	}
	crtc, output := res.Crtcs[0], res.Outputs[0]
	mode := randr.Mode(0)
	for _, m := range res.Modes {
		if int(m.Width) == w && int(m.Height) == h {
			mode = randr.Mode(m.Id)
			break
		}
	}
	if mode == 0 {
		name := fmt.Sprintf("deskd-%dx%d", w, h)
		info := randr.ModeInfo{Width: uint16(w), Height: uint16(h), DotClock: uint32(w * h * 60),
			Htotal: uint16(w), Vtotal: uint16(h), NameLen: uint16(len(name))}
		r, err := randr.CreateMode(c, root, info, name).Reply()
		if err != nil {
			return 0, 0, fmt.Errorf("x11: create mode %s: %w", name, err)
		}
		mode = r.Mode
	}
	out, err := randr.GetOutputInfo(c, output, res.ConfigTimestamp).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("x11: output info: %w", err)
	}
	has := false
	for _, m := range out.Modes {
		has = has || m == mode
	}
	if !has {
		if err := randr.AddOutputModeChecked(c, output, mode).Check(); err != nil {
			return 0, 0, fmt.Errorf("x11: add mode: %w", err)
		}
	}
	// The CRTC must fit the screen at every step: grow the screen to hold
	// both sizes, set the CRTC, then set the screen to its final size.
	g, err := xproto.GetGeometry(c, xproto.Drawable(root)).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("x11: root geometry: %w", err)
	}
	mm := func(px int) uint32 { return uint32(px * 254 / 960) } // 96 dpi
	bw, bh := max(w, int(g.Width)), max(h, int(g.Height))
	if bw != int(g.Width) || bh != int(g.Height) {
		if err := randr.SetScreenSizeChecked(c, root, uint16(bw), uint16(bh), mm(bw), mm(bh)).Check(); err != nil {
			return 0, 0, fmt.Errorf("x11: screen size %dx%d: %w", bw, bh, err)
		}
	}
	r, err := randr.SetCrtcConfig(c, crtc, xproto.TimeCurrentTime, res.ConfigTimestamp, 0, 0, mode, randr.RotationRotate0, []randr.Output{output}).Reply()
	if err != nil {
		return 0, 0, fmt.Errorf("x11: set CRTC: %w", err)
	}
	if r.Status != randr.SetConfigSuccess {
		return 0, 0, fmt.Errorf("x11: set CRTC: status %d", r.Status)
	}
	if bw != w || bh != h {
		if err := randr.SetScreenSizeChecked(c, root, uint16(w), uint16(h), mm(w), mm(h)).Check(); err != nil {
			return 0, 0, fmt.Errorf("x11: screen size %dx%d: %w", w, h, err)
		}
	}
	return w, h, nil
}

// Resize sets the screen to w×h, clamped to what the X server allows, and
// returns the size set. Viewers learn of it through SizeChanged.
func (s *Screen) Resize(w, h int) (int, int, error) {
	if !s.randr {
		return 0, 0, errors.New("x11: no RANDR on this display")
	}
	s.resizeMu.Lock()
	defer s.resizeMu.Unlock()
	return resize(s.c, s.root, w, h)
}

// SizeChanged delivers the screen's new size after any resize, ours or
// another client's (only the newest is kept).
func (s *Screen) SizeChanged() <-chan image.Point { return s.sizeCh }

// setSize records a size change reported by RANDR.
func (s *Screen) setSize(w, h int) {
	s.sizeMu.Lock()
	changed := w != s.w || h != s.h
	s.w, s.h = w, h
	s.sizeMu.Unlock()
	if !changed {
		return
	}
	select {
	case <-s.sizeCh:
	default:
	}
	s.sizeCh <- image.Pt(w, h) // the events goroutine is the only sender
}
