// Package x11 runs the X server (Xvfb) and talks to it over xgb.
package x11

import (
	"fmt"
	"strconv"
	"strings"
)

// Resolution is a screen size and depth such as 1280x800x24.
type Resolution struct {
	Width, Height, Depth int
}

// Bounds on what ParseResolution accepts. 8192 is Xvfb's own ceiling per
// dimension. The depth is 24: capture reads 32-bit BGRX pixels.
const (
	MinDimension = 64
	MaxDimension = 8192
)

// ParseResolution parses "WxH" or "WxHxD" (depth defaults to 24).
func ParseResolution(s string) (Resolution, error) {
	if len(s) > 32 {
		return Resolution{}, fmt.Errorf("resolution %.32q...: too long", s)
	}
	parts := strings.Split(s, "x")
	if len(parts) != 2 && len(parts) != 3 {
		return Resolution{}, fmt.Errorf("resolution %q: want WIDTHxHEIGHT[xDEPTH]", s)
	}
	var n [3]int
	n[2] = 24
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || p == "" || p[0] == '+' || p[0] == '-' {
			return Resolution{}, fmt.Errorf("resolution %q: %q is not a number", s, p)
		}
		n[i] = v
	}
	r := Resolution{Width: n[0], Height: n[1], Depth: n[2]}
	if r.Width < MinDimension || r.Width > MaxDimension || r.Height < MinDimension || r.Height > MaxDimension {
		return Resolution{}, fmt.Errorf("resolution %q: each dimension must be %d..%d", s, MinDimension, MaxDimension)
	}
	if r.Depth != 24 {
		// Capture reads 32-bit BGRX pixels: a 16-bit screen would be
		// garbage to every viewer, so it is refused here, up front.
		return Resolution{}, fmt.Errorf("resolution %q: depth must be 24 (deskd captures 24-bit screens only)", s)
	}
	return r, nil
}

func (r Resolution) String() string {
	return fmt.Sprintf("%dx%dx%d", r.Width, r.Height, r.Depth)
}

// Set implements flag.Value.
func (r *Resolution) Set(s string) error {
	v, err := ParseResolution(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// MarshalText and UnmarshalText make Resolution a JSON string.
func (r Resolution) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r *Resolution) UnmarshalText(b []byte) error { return r.Set(string(b)) }
