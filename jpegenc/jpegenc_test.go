package jpegenc

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"math/rand/v2"
	"testing"
)

// picture is a test image in both forms: BGRX as deskd holds it, RGBA
// for the standard library's encoder.
type picture struct {
	name string
	w, h int
	bgrx []byte
	rgba *image.RGBA
}

func newPicture(name string, w, h int, px func(x, y int) (r, g, b uint8)) picture {
	p := picture{name: name, w: w, h: h, bgrx: make([]byte, 4*w*h), rgba: image.NewRGBA(image.Rect(0, 0, w, h))}
	for y := range h {
		for x := range w {
			r, g, b := px(x, y)
			i := 4 * (y*w + x)
			p.bgrx[i], p.bgrx[i+1], p.bgrx[i+2], p.bgrx[i+3] = b, g, r, 0
			p.rgba.Pix[i], p.rgba.Pix[i+1], p.rgba.Pix[i+2], p.rgba.Pix[i+3] = r, g, b, 255
		}
	}
	return p
}

// pictures are photo-like content (what Tight sends as JPEG): smooth
// gradients with noise, a scaled "photo" of blobs, and odd sizes that
// end inside an MCU.
func pictures() []picture {
	rng := rand.New(rand.NewPCG(1, 2))
	noise := func(n int) int { return rng.IntN(2*n+1) - n }
	clamp := func(v int) uint8 { return uint8(min(max(v, 0), 255)) }
	return []picture{
		newPicture("gradient+noise 256x160", 256, 160, func(x, y int) (uint8, uint8, uint8) {
			return clamp(x + noise(12)), clamp(y + 40 + noise(12)), clamp((x+y)/2 + noise(12))
		}),
		newPicture("blobs 203x117", 203, 117, func(x, y int) (uint8, uint8, uint8) {
			fx, fy := float64(x)/203, float64(y)/117
			v := math.Sin(fx*9)*math.Cos(fy*7) + math.Sin((fx+fy)*13)
			return clamp(int(128 + 90*v)), clamp(int(100 + 80*math.Cos(fx*5))), clamp(int(140 + 70*math.Sin(fy*11)))
		}),
		newPicture("one pixel", 1, 1, func(int, int) (uint8, uint8, uint8) { return 200, 30, 90 }),
		newPicture("17x9 stripes", 17, 9, func(x, y int) (uint8, uint8, uint8) {
			if (x/3+y/2)%2 == 0 {
				return 250, 250, 250
			}
			return 10, 60, 200
		}),
	}
}

func psnr(a, b image.Image) float64 {
	var se float64
	r := a.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c1 := color.RGBAModel.Convert(a.At(x, y)).(color.RGBA)
			c2 := color.RGBAModel.Convert(b.At(x, y)).(color.RGBA)
			for _, d := range []int{int(c1.R) - int(c2.R), int(c1.G) - int(c2.G), int(c1.B) - int(c2.B)} {
				se += float64(d * d)
			}
		}
	}
	mse := se / float64(3*r.Dx()*r.Dy())
	if mse == 0 {
		return 99
	}
	return 10 * math.Log10(255*255/mse)
}

// qualities are what deskd asks for: Tight's levels 0..9 as TigerVNC maps them.
var qualities = []int{15, 29, 41, 42, 62, 77, 79, 86, 92, 100}

// Every picture at every quality decodes with Go's decoder, at the
// right size, at least as close to the source as Go's own encoder gets
// at the same quality (within 0.1 dB), and not larger than 1.1x its size.
func TestMatchesStandardLibrary(t *testing.T) {
	for _, p := range pictures() {
		for _, q := range qualities {
			out, err := New(q).Encode(nil, p.bgrx, 4*p.w, p.w, p.h)
			if err != nil {
				t.Fatal(err)
			}
			img, err := jpeg.Decode(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("%s q%d: decode: %v", p.name, q, err)
			}
			if img.Bounds().Dx() != p.w || img.Bounds().Dy() != p.h {
				t.Fatalf("%s q%d: decoded %v", p.name, q, img.Bounds())
			}
			var ref bytes.Buffer
			if err := jpeg.Encode(&ref, p.rgba, &jpeg.Options{Quality: q}); err != nil {
				t.Fatal(err)
			}
			refImg, _ := jpeg.Decode(bytes.NewReader(ref.Bytes()))
			ours, theirs := psnr(p.rgba, img), psnr(p.rgba, refImg)
			t.Logf("%s q%d: %d bytes %.2f dB; image/jpeg %d bytes %.2f dB", p.name, q, len(out), ours, ref.Len(), theirs)
			if p.w*p.h < 64 {
				continue // one pixel's rounding is not a measure
			}
			if ours < theirs-0.1 {
				t.Errorf("%s q%d: PSNR %.2f dB, image/jpeg %.2f dB", p.name, q, ours, theirs)
			}
			if float64(len(out)) > 1.1*float64(ref.Len()) {
				t.Errorf("%s q%d: %d bytes, image/jpeg %d", p.name, q, len(out), ref.Len())
			}
		}
	}
}

// A sub-rectangle of a larger framebuffer (stride wider than the rows)
// encodes as the same pixels copied out.
func TestStride(t *testing.T) {
	p := pictures()[0]
	sub := 4 * (10*p.w + 20) // from (20, 10)
	w, h := 100, 70
	a, err := New(80).Encode(nil, p.bgrx[sub:], 4*p.w, w, h)
	if err != nil {
		t.Fatal(err)
	}
	packed := make([]byte, 0, 4*w*h)
	for y := range h {
		packed = append(packed, p.bgrx[sub+y*4*p.w:sub+y*4*p.w+4*w]...)
	}
	b, _ := New(80).Encode(nil, packed, 4*w, w, h)
	if !bytes.Equal(a, b) {
		t.Fatal("the same pixels at another stride encode differently")
	}
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name            string
		n, stride, w, h int
	}{
		{"zero width", 64, 16, 0, 4},
		{"zero height", 64, 16, 4, 0},
		{"too wide", 64, 16, MaxSize + 1, 1},
		{"short buffer", 63, 16, 4, 4},
		{"stride under the row", 64, 12, 4, 4},
	}
	for _, tt := range tests {
		if _, err := New(50).Encode(nil, make([]byte, tt.n), tt.stride, tt.w, tt.h); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

// Extreme content (full-scale checkerboards, at quality 100) stays
// within the baseline's value ranges and decodes.
func TestExtremes(t *testing.T) {
	for _, q := range []int{1, 100} {
		p := newPicture("checker", 64, 64, func(x, y int) (uint8, uint8, uint8) {
			if (x+y)%2 == 0 {
				return 255, 0, 255
			}
			return 0, 255, 0
		})
		out, err := New(q).Encode(nil, p.bgrx, 4*p.w, p.w, p.h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := jpeg.Decode(bytes.NewReader(out)); err != nil {
			t.Fatalf("q%d: %v", q, err)
		}
	}
}

func FuzzEncode(f *testing.F) {
	f.Add(uint8(50), uint16(17), uint16(9), []byte{1, 2, 3, 4, 250, 251, 252, 253})
	f.Add(uint8(100), uint16(1), uint16(1), []byte{255, 255, 255, 0})
	f.Add(uint8(1), uint16(33), uint16(2), []byte{0})
	f.Fuzz(func(t *testing.T, q uint8, w16, h16 uint16, seed []byte) {
		w, h := int(w16%80)+1, int(h16%80)+1
		if len(seed) == 0 {
			seed = []byte{0}
		}
		pix := make([]byte, 4*w*h)
		for i := range pix {
			pix[i] = seed[i%len(seed)] ^ byte(i*7)
		}
		out, err := New(int(q)).Encode(nil, pix, 4*w, w, h)
		if err != nil {
			t.Fatal(err)
		}
		img, err := jpeg.Decode(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("%dx%d q%d: %v", w, h, q, err)
		}
		if img.Bounds().Dx() != w || img.Bounds().Dy() != h {
			t.Fatalf("decoded %v, want %dx%d", img.Bounds(), w, h)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, p := range []picture{
		// smooth shapes with sensor-like noise: what a photo on a page is
		newPicture("photo 1280x800", 1280, 800, func(x, y int) (uint8, uint8, uint8) {
			fx, fy := float64(x)/1280, float64(y)/800
			v := math.Sin(fx*9)*math.Cos(fy*7) + 0.5*math.Sin((fx+fy)*23)
			n := rng.IntN(9) - 4
			return uint8(min(max(int(128+80*v)+n, 0), 255)), uint8(min(max(int(110+70*math.Cos(fx*5))+n, 0), 255)), uint8(min(max(int(140+60*math.Sin(fy*11))+n, 0), 255))
		}),
		// gradients under strong grain (the bench's gallery: ±20 a
		// pixel): nearly every coefficient is coded
		newPicture("grainy 1280x800", 1280, 800, func(x, y int) (uint8, uint8, uint8) {
			n := rng.IntN(41) - 20
			c := func(v int) uint8 { return uint8(min(max(v+n, 0), 255)) }
			return c(60 + x*150/1280), c(90 + y*120/800), c(200 - (x+y)*120/2080)
		}),
		// high-frequency patterns everywhere: many coefficients to code
		newPicture("busy 1280x800", 1280, 800, func(x, y int) (uint8, uint8, uint8) {
			v := math.Sin(float64(x)/37) * math.Cos(float64(y)/23)
			return uint8(128 + 100*v), uint8((x * y) >> 9), uint8(x ^ y)
		}),
	} {
		b.Run(p.name+"/jpegenc", func(b *testing.B) {
			e := New(79)
			var out []byte
			b.SetBytes(int64(4 * p.w * p.h))
			for b.Loop() {
				out, _ = e.Encode(out[:0], p.bgrx, 4*p.w, p.w, p.h)
			}
		})
		b.Run(p.name+"/image-jpeg", func(b *testing.B) {
			var buf bytes.Buffer
			b.SetBytes(int64(4 * p.w * p.h))
			for b.Loop() {
				buf.Reset()
				// as deskd did: copy BGRX into an RGBA image, then encode
				img := image.NewRGBA(image.Rect(0, 0, p.w, p.h))
				for i := 0; i < len(p.bgrx); i += 4 {
					img.Pix[i], img.Pix[i+1], img.Pix[i+2], img.Pix[i+3] = p.bgrx[i+2], p.bgrx[i+1], p.bgrx[i], 255
				}
				jpeg.Encode(&buf, img, &jpeg.Options{Quality: 79})
			}
		})
	}
}

// An MCU past the right or bottom edge holds the picture's pixels with
// the last column and row repeated.
func TestLoadEdge(t *testing.T) {
	p := pictures()[1] // 203x117
	tests := []struct{ w, h, mx, my int }{
		{203, 117, 192, 0},   // right edge: 11 columns
		{203, 117, 0, 112},   // bottom edge: 5 rows
		{203, 117, 192, 112}, // the corner
		{1, 1, 0, 0},         // one pixel
		{17, 9, 16, 0},       // one column
		{200, 100, 192, 96},  // a sub-picture at the full stride
	}
	for _, tt := range tests {
		e := New(50)
		e.loadEdge(p.bgrx, 4*p.w, tt.w, tt.h, tt.mx, tt.my)
		for r := range 16 {
			for c := range 16 {
				x, y := min(tt.mx+c, tt.w-1), min(tt.my+r, tt.h-1)
				want := p.bgrx[4*(y*p.w+x) : 4*(y*p.w+x)+4]
				if got := e.edge[r*64+4*c : r*64+4*c+4]; !bytes.Equal(got, want) {
					t.Fatalf("%+v: pixel (%d, %d) of the MCU is %v, want %v", tt, c, r, got, want)
				}
			}
		}
	}
}

// quant rounds as math.RoundToEven does on the float32 product (and so
// as the assembly's VCVTPS2DQ), ties and signs included, over the range
// the transform produces.
func TestQuantRounds(t *testing.T) {
	for _, c := range []struct {
		x    int32
		r    float32
		want int32
	}{
		{0, 0.5, 0}, {1, 0.5, 0}, {3, 0.5, 2}, {5, 0.5, 2}, {7, 0.5, 4}, // ties to even
		{-1, 0.5, 0}, {-3, 0.5, -2}, {-5, 0.5, -2},
		{1, 0.49, 0}, {1, 0.51, 1}, {-1, 0.51, -1},
		{1 << 20, 1, 1 << 20}, {-1 << 20, 1, -1 << 20}, {1<<21 - 1, 1, 1<<21 - 1},
		{65535, 1.0 / 16, 4096}, {-65535, 1.0 / 16, -4096}, // a DC at quality 100's scale
	} {
		if got := quant(c.x, c.r); got != c.want {
			t.Errorf("quant(%d, %g) = %d, want %d", c.x, c.r, got, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 100000 {
		x := int32(rng.IntN(1<<18)) - 1<<17 // past the transform's ±2^16
		r := float32(rng.Float64())
		if got, want := quant(x, r), int32(math.RoundToEven(float64(float32(x)*r))); got != want {
			t.Fatalf("quant(%d, %g) = %d, want %d", x, r, got, want)
		}
	}
}
