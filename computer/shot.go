package computer

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"strconv"
	"strings"
)

// ShotOptions say what a screenshot shows and how it is encoded.
type ShotOptions struct {
	Format  string // "png" (default) or "jpeg"
	Quality int    // JPEG quality 1-100 (default 80)
	// MaxLongEdge and MaxPixels bound the image (default: the Computer's);
	// an image is never larger than the part of the screen it shows.
	MaxLongEdge int
	MaxPixels   int
	Cursor      bool // draw the pointer in
	// Region, when not empty, is the part to show, in the default
	// screenshot's image space (as action coordinates are).
	Region image.Rectangle
}

// Shot is an encoded screenshot.
type Shot struct {
	Data   []byte
	Format string // "png" or "jpeg"
	Geometry
	Region image.Rectangle // what it shows, in screen pixels
}

// MIME is the shot's media type.
func (s Shot) MIME() string { return "image/" + s.Format }

// ParseRegion parses "x0,y0,x1,y1".
func ParseRegion(s string) (image.Rectangle, error) {
	if len(s) > 64 {
		return image.Rectangle{}, fmt.Errorf("region %.64q...: too long", s)
	}
	f := strings.Split(s, ",")
	if len(f) != 4 {
		return image.Rectangle{}, fmt.Errorf("region %q: want x0,y0,x1,y1", s)
	}
	var v [4]int
	for i, p := range f {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return image.Rectangle{}, fmt.Errorf("region %q: %q is not a number", s, p)
		}
		v[i] = n
	}
	return image.Rect(v[0], v[1], v[2], v[3]), nil
}

// regionToScreen maps a region in image space to screen pixels.
func (g Geometry) regionToScreen(r image.Rectangle) (image.Rectangle, error) {
	if r.Min.X < 0 || r.Min.Y < 0 || r.Max.X > g.ImageWidth || r.Max.Y > g.ImageHeight || r.Dx() <= 0 || r.Dy() <= 0 {
		return image.Rectangle{}, fmt.Errorf("%w: region %v is not a non-empty part of the %dx%d screenshot", ErrOutOfRange, r, g.ImageWidth, g.ImageHeight)
	}
	sx := float64(g.ScreenWidth) / float64(g.ImageWidth)
	sy := float64(g.ScreenHeight) / float64(g.ImageHeight)
	out := image.Rect(int(float64(r.Min.X)*sx), int(float64(r.Min.Y)*sy), int(float64(r.Max.X)*sx+0.999), int(float64(r.Max.Y)*sy+0.999))
	return out.Intersect(image.Rect(0, 0, g.ScreenWidth, g.ScreenHeight)), nil
}

// Screenshot captures the screen (or a region of it) and encodes it.
func (c *Computer) Screenshot(o ShotOptions) (Shot, error) {
	if o.Format == "" {
		o.Format = "png"
	}
	if o.Format != "png" && o.Format != "jpeg" {
		return Shot{}, fmt.Errorf("format %q: want png or jpeg", o.Format)
	}
	if o.Quality == 0 {
		o.Quality = 80
	}
	if o.Quality < 1 || o.Quality > 100 {
		return Shot{}, fmt.Errorf("quality %d: want 1-100", o.Quality)
	}
	if o.MaxLongEdge <= 0 {
		o.MaxLongEdge = c.cfg.MaxLongEdge
	}
	if o.MaxPixels <= 0 {
		o.MaxPixels = c.cfg.MaxPixels
	}
	def := c.Geometry()
	area := image.Rect(0, 0, def.ScreenWidth, def.ScreenHeight)
	if !o.Region.Empty() {
		var err error
		if area, err = def.regionToScreen(o.Region); err != nil {
			return Shot{}, err
		}
	}
	// At most two screenshots are captured and encoded at once (each holds
	// a few copies of the screen: 16 MiB apiece at 2560x1600); the others
	// wait here, holding nothing.
	c.enc <- struct{}{}
	defer func() { <-c.enc }()
	img, err := c.capture(area, def.ScreenWidth, def.ScreenHeight, o.Cursor)
	if err != nil {
		return Shot{}, err
	}
	g := fit(area.Dx(), area.Dy(), o.MaxLongEdge, o.MaxPixels)
	if g.ImageWidth != area.Dx() || g.ImageHeight != area.Dy() {
		img = resample(img, g.ImageWidth, g.ImageHeight)
	}
	var data []byte
	if o.Format == "png" {
		strips := min(c.cfg.Cores.N(), max(1, img.Rect.Dy()/64))
		release := func() {}
		if strips > 1 {
			release = c.cfg.Cores.Widen()
		}
		data = encodePNG(img, strips)
		release()
	} else {
		var buf bytes.Buffer
		if err := jpeg.Encode(&buf, img, &jpeg.Options{Quality: o.Quality}); err != nil {
			return Shot{}, fmt.Errorf("encode jpeg: %w", err)
		}
		data = buf.Bytes()
	}
	return Shot{Data: data, Format: o.Format, Geometry: g, Region: area}, nil
}

// capture grabs area of the screen as RGBA, with the pointer drawn in
// when cursor is set.
//
// w and h are the screen's size as the caller's geometry saw it (read
// once: a resize in between must not make area and buffer disagree);
// area must lie within them. A screen that shrank meanwhile makes the
// capture fail, never read past the buffer.
func (c *Computer) capture(area image.Rectangle, w, h int, cursor bool) (*image.RGBA, error) {
	if !area.In(image.Rect(0, 0, w, h)) || area.Empty() {
		return nil, fmt.Errorf("capture: %v is not within the %dx%d screen", area, w, h)
	}
	c.shot.Lock()
	defer c.shot.Unlock()
	if need := w * h * 4; len(c.pix) < need {
		c.pix = make([]byte, need)
	}
	if err := c.d.Capture(area, c.pix, w*4); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	img := image.NewRGBA(image.Rect(0, 0, area.Dx(), area.Dy()))
	for y := 0; y < area.Dy(); y++ {
		src := c.pix[(area.Min.Y+y)*w*4+area.Min.X*4:]
		dst := img.Pix[y*img.Stride : y*img.Stride+area.Dx()*4]
		for i := 0; i < len(dst); i += 4 { // B,G,R,X -> R,G,B,A
			dst[i], dst[i+1], dst[i+2], dst[i+3] = src[i+2], src[i+1], src[i], 0xff
		}
	}
	if cursor {
		if cur, hot, err := c.d.CursorImage(); err == nil {
			if pos, err := c.d.CursorPosition(); err == nil {
				drawCursor(img, cur, pos.Sub(hot).Sub(area.Min))
			}
		}
	}
	return img, nil
}

// drawCursor blends the pointer image (non-premultiplied) onto dst at at.
func drawCursor(dst *image.RGBA, cur *image.NRGBA, at image.Point) {
	b := cur.Bounds()
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			dx, dy := at.X+x, at.Y+y
			if dx < 0 || dy < 0 || dx >= dst.Rect.Dx() || dy >= dst.Rect.Dy() {
				continue
			}
			s := cur.Pix[y*cur.Stride+4*x:]
			a := uint32(s[3])
			if a == 0 {
				continue
			}
			d := dst.Pix[dy*dst.Stride+4*dx:]
			for i := range 3 {
				d[i] = uint8((uint32(s[i])*a + uint32(d[i])*(255-a) + 127) / 255)
			}
		}
	}
}

// resample scales src to w×h by area averaging (each output pixel is the
// mean of the source area it covers): sharp text stays legible, and
// nothing aliases the way point sampling does.
func resample(src *image.RGBA, w, h int) *image.RGBA {
	sw, sh := src.Rect.Dx(), src.Rect.Dy()
	xs := spans(sw, w)
	ys := spans(sh, h)
	// Horizontal pass into rows of float sums, then vertical.
	tmp := make([]float32, sh*w*3)
	for y := 0; y < sh; y++ {
		row := src.Pix[y*src.Stride:]
		out := tmp[y*w*3:]
		for x, sp := range xs {
			var r, g, b float32
			for _, t := range sp {
				p := row[4*t.i:]
				r += float32(p[0]) * t.w
				g += float32(p[1]) * t.w
				b += float32(p[2]) * t.w
			}
			out[3*x], out[3*x+1], out[3*x+2] = r, g, b
		}
	}
	dst := image.NewRGBA(image.Rect(0, 0, w, h))
	for y, sp := range ys {
		d := dst.Pix[y*dst.Stride:]
		for x := 0; x < w; x++ {
			var r, g, b float32
			for _, t := range sp {
				p := tmp[(t.i*w+x)*3:]
				r += p[0] * t.w
				g += p[1] * t.w
				b += p[2] * t.w
			}
			d[4*x], d[4*x+1], d[4*x+2], d[4*x+3] = clamp8(r), clamp8(g), clamp8(b), 0xff
		}
	}
	return dst
}

type tap struct {
	i int
	w float32
}

// spans lists, for each of n output pixels, the source pixels of an
// m-pixel line it covers and their weights (summing to 1).
func spans(m, n int) [][]tap {
	out := make([][]tap, n)
	step := float64(m) / float64(n)
	for j := range out {
		a, b := float64(j)*step, float64(j+1)*step
		for i := int(a); i < m && float64(i) < b; i++ {
			lo, hi := max(a, float64(i)), min(b, float64(i+1))
			if hi > lo {
				out[j] = append(out[j], tap{i, float32((hi - lo) / step)})
			}
		}
	}
	return out
}

func clamp8(v float32) uint8 {
	v += 0.5
	if v <= 0 {
		return 0
	}
	if v >= 255 {
		return 255
	}
	return uint8(v)
}
