package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"time"

	"github.com/jezek/xgb/xproto"
)

// Page frames. A server may send a change of the page in several updates
// (x11vnc sends what its scan found so far: about 20 canvas states a
// second of a page that changes 10 times), so counting updates, or
// changes of a viewer's canvas, credits tearing. The content pages carry
// a tag instead: a 32x32 block at the bottom left of the viewport whose
// colour steps through tagColours in the same script turn as each change
// of the page (a wheel step, a keystroke), so Chromium paints both in one
// frame. A viewer has shown a page frame when the tag it shows changes
// colour: frames the server skipped are not counted, torn ones once.
const tagSize = 32

// tagTolerance is how far (per channel) a viewer's pixel may be from a
// tag colour and still be it: JPEG's error.
const tagTolerance = 48

var tagColours = [8]uint32{0xff00ff, 0x00ffff, 0xffff00, 0x00a000, 0xff8000, 0x8000ff, 0x0060c0, 0xc00060}

// tagScript adds the tag and tick(), which steps it: for data: URLs
// (no '#' or '%').
const tagScript = `const F=document.createElement('div');F.style.cssText='position:fixed;left:0;bottom:0;width:32px;height:32px;z-index:99;background:rgb(255,0,255)';` +
	`document.body.appendChild(F);const FC=['rgb(255,0,255)','rgb(0,255,255)','rgb(255,255,0)','rgb(0,160,0)','rgb(255,128,0)','rgb(128,0,255)','rgb(0,96,192)','rgb(192,0,96)'];` +
	`let fn=0;const tick=()=>{fn=(fn+1)&7;F.style.background=FC[fn]};`

// tagClass returns the index of the tag colour c is (within a JPEG's
// tolerance), or -1.
func tagClass(c uint32) int {
	for i, t := range tagColours {
		if near(c, t, tagTolerance) {
			return i
		}
	}
	return -1
}

// pageFrames counts the page frames a viewer shows.
type pageFrames struct {
	at   image.Point // the tag's centre on the screen
	last int
}

// saw notes the tag's colour in a viewer's picture and reports whether
// it shows a new page frame.
func (p *pageFrames) saw(v *viewer) bool {
	if p == nil || p.at.X >= v.w || p.at.Y >= v.h {
		return false
	}
	k := tagClass(v.at(p.at.X, p.at.Y))
	if k < 0 || k == p.last {
		return false
	}
	p.last = k
	return true
}

// findTag returns the centre of the page's tag on the screen: a
// tagSize-square block of one tag colour.
func (m *marker) findTag(ctx context.Context) (image.Point, error) {
	scr := xproto.Setup(m.c).DefaultScreen(m.c)
	w, h := int(scr.WidthInPixels), int(scr.HeightInPixels)
	for {
		data, err := m.grab(w, h)
		if err != nil {
			return image.Point{}, fmt.Errorf("capture to find the page's tag: %w", err)
		}
		px := func(x, y int) uint32 {
			p := data[4*(y*w+x):]
			return uint32(p[2])<<16 | uint32(p[1])<<8 | uint32(p[0])
		}
		for y := 0; y+tagSize <= h; y++ {
			for x := 0; x+tagSize <= w; x++ {
				c := px(x, y)
				if tagClass(c) < 0 || c != px(x+tagSize-1, y) || c != px(x, y+tagSize-1) || c != px(x+tagSize-1, y+tagSize-1) || c != px(x+tagSize/2, y+tagSize/2) {
					continue
				}
				return image.Pt(x+tagSize/2, y+tagSize/2), nil
			}
		}
		select {
		case <-ctx.Done():
			return image.Point{}, errors.New("the page's frame tag is not on the screen")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tagJS is the tag's centre and colours for the noVNC page's sampler.
func tagJS(at *image.Point) string {
	if at == nil {
		return "null"
	}
	b, _ := json.Marshal(map[string]any{"x": at.X, "y": at.Y, "colours": tagColours, "tolerance": tagTolerance})
	return string(b)
}
