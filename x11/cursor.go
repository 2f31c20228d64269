package x11

import (
	"fmt"
	"image"

	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// CursorImage reads the pointer's shape (XFIXES GetCursorImage) as
// non-premultiplied RGBA, with its hotspot.
func (s *Screen) CursorImage() (*image.NRGBA, image.Point, error) {
	r, err := xfixes.GetCursorImage(s.c).Reply()
	if err != nil {
		return nil, image.Point{}, fmt.Errorf("x11: cursor image: %w", err)
	}
	w, h := int(r.Width), int(r.Height)
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for i := 0; i < w*h && i < len(r.CursorImage); i++ {
		p := r.CursorImage[i] // ARGB, premultiplied
		a := p >> 24
		ch := func(v uint32) uint8 {
			if a == 0 {
				return 0
			}
			return uint8(min(255, (v*255+a/2)/a))
		}
		img.Pix[4*i], img.Pix[4*i+1], img.Pix[4*i+2], img.Pix[4*i+3] = ch(p>>16&0xff), ch(p>>8&0xff), ch(p&0xff), uint8(a)
	}
	return img, image.Pt(int(r.Xhot), int(r.Yhot)), nil
}

// CursorChanged is signalled (without blocking) when the shape changes.
func (s *Screen) CursorChanged() <-chan struct{} { return s.cursorCh }

// CursorPosition is where the pointer is on the screen.
func (s *Screen) CursorPosition() (image.Point, error) {
	r, err := xproto.QueryPointer(s.c, s.root).Reply()
	if err != nil {
		return image.Point{}, fmt.Errorf("x11: query pointer: %w", err)
	}
	return image.Pt(int(r.RootX), int(r.RootY)), nil
}
