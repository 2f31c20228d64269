package bench

import (
	"bufio"
	"bytes"
	"context"
	"image"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/cubepod/deskd/bridge"
)

// stillScreen is a fixed picture: flat areas, text-like stripes, noise.
type stillScreen struct{ f *bridge.Frame }

func (s stillScreen) Size() (int, int) { return s.f.W, s.f.H }
func (s stillScreen) Capture(r image.Rectangle, pix []byte, stride int) error {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		copy(pix[y*stride+4*r.Min.X:], s.f.Pix[y*s.f.Stride+4*r.Min.X:y*s.f.Stride+4*r.Max.X])
	}
	return nil
}
func (stillScreen) Damage() <-chan image.Rectangle { return nil }
func (stillScreen) Key(uint32, bool) error         { return nil }
func (stillScreen) Pointer(int, int, uint16) error { return nil }

func stillFrame(w, h int) *bridge.Frame {
	f := bridge.NewFrame(w, h)
	seed := uint32(7)
	for y := range h {
		for x := range w {
			var c uint32
			switch {
			case x < w/3:
				c = 0x3366cc
			case x < 2*w/3:
				c = []uint32{0xffffff, 0x202020, 0x8899aa}[(x/2+y/3)%3]
			default:
				seed = seed*1664525 + 1013904223
				c = seed >> 8
			}
			i := y*f.Stride + 4*x
			f.Pix[i], f.Pix[i+1], f.Pix[i+2] = byte(c), byte(c>>8), byte(c>>16)
		}
	}
	return f
}

// TestViewerDecodes has the bench's viewer read deskd's RFB server over a
// real WebSocket, with each encoding list, and checks every pixel (JPEG
// within a tolerance).
func TestViewerDecodes(t *testing.T) {
	f := stillFrame(300, 200)
	srv, err := bridge.NewServer(stillScreen{f}, bridge.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
		if err != nil {
			return
		}
		srv.Serve(r.Context(), websocket.NetConn(r.Context(), c, websocket.MessageBinary), bridge.ConnOptions{})
	}))
	defer hs.Close()
	for _, tc := range []struct {
		name   string
		encs   []int32
		checkW int // columns checked exactly: JPEG'd noise is not
	}{
		{"noVNC-like (Tight, JPEG)", viewerEncodings, 192}, // the 64-pixel tile holding x=200 has noise: JPEG
		{"ZRLE", []int32{16}, 300},
		{"Raw", rawEncodings, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			v, err := dialViewer(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), tc.encs)
			if err != nil {
				t.Fatal(err)
			}
			defer v.conn.Close()
			// The first update may only announce the size
			// (ExtendedDesktopSize); the next brings the pixels.
			for range 2 {
				if err := v.request(false); err != nil {
					t.Fatal(err)
				}
				if _, err := v.next(); err != nil {
					t.Fatal(err)
				}
			}
			bad := 0
			for y := range f.H {
				for x := range tc.checkW {
					i := y*f.Stride + 4*x
					want := uint32(f.Pix[i+2])<<16 | uint32(f.Pix[i+1])<<8 | uint32(f.Pix[i])
					if v.at(x, y) != want {
						bad++
					}
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d pixels wrong", bad, f.H*tc.checkW)
			}
		})
	}
}

// FuzzViewerNext feeds arbitrary server messages to the viewer: errors,
// never a panic or an unbounded allocation.
func FuzzViewerNext(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0, 2, 0, 0, 0, 7, 0x80, 1, 2, 3})    // Tight fill
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4})       // Raw
	f.Add([]byte{0, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x20}) // LastRect
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 2, 'h', 'i', 0, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 4, 0, 4, 0, 0, 0, 16, 0, 0, 0, 3, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, server := net.Pipe() // fences and the continuous-updates offer are answered
		defer c.Close()
		go io.Copy(io.Discard, server)
		v := &viewer{conn: c, w: 16, h: 16, fb: make([]uint32, 256), cu: true}
		v.count = &countingReader{r: bytes.NewReader(b)}
		v.br = bufio.NewReader(v.count)
		for range 4 {
			if _, err := v.next(); err != nil {
				return
			}
		}
	})
}
