package bench

import (
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// Fidelity: how close a viewer's picture of a moving area is to the
// screen's picture of the same page frame. The video page draws its frame
// number as a bar code (barBits cells of barCell pixels, white for a 1,
// low bit first) into the top left of its canvas with every frame; the
// bench captures that area of the X screen as fast as it can, keyed by
// the number it reads there, and meanwhile reads the same area from
// noVNC's canvas: a canvas whose number was captured is compared with
// that capture (SSIM of the luma).

const (
	barBits = 16
	barCell = 12
)

// barScript draws t's bar code on canvas context x (for video60Page).
const barScript = `const bar=(x,t)=>{for(let i=0;i<16;i++){x.fillStyle=(t>>i)&1?'rgb(255,255,255)':'rgb(0,0,0)';x.fillRect(i*12,0,12,12)}};`

// barNumber reads the bar code of a picture's top left, pixel (x, y) at
// pix[(y*w+x)*4+off...] with red at r, green at g, blue at b.
func barNumber(pix []byte, w int, order [3]int) int {
	n := 0
	for i := range barBits {
		p := pix[4*(barCell/2*w+i*barCell+barCell/2):]
		if luma(p[order[0]], p[order[1]], p[order[2]]) > 128 {
			n |= 1 << i
		}
	}
	return n
}

func luma(r, g, b byte) float64 { return 0.299*float64(r) + 0.587*float64(g) + 0.114*float64(b) }

// Channel orders: noVNC's canvas is RGBA, X's capture BGRX.
var (
	orderRGBA = [3]int{0, 1, 2}
	orderBGRX = [3]int{2, 1, 0}
)

// ssim is the mean structural similarity (Wang et al. 2004) of the luma
// of two w×h pictures of 4 bytes a pixel, over 8x8 windows every 4
// pixels.
func ssim(a []byte, ao [3]int, b []byte, bo [3]int, w, h int) float64 {
	ya, yb := make([]float64, w*h), make([]float64, w*h)
	for i := range w * h {
		ya[i] = luma(a[4*i+ao[0]], a[4*i+ao[1]], a[4*i+ao[2]])
		yb[i] = luma(b[4*i+bo[0]], b[4*i+bo[1]], b[4*i+bo[2]])
	}
	const c1, c2 = (0.01 * 255) * (0.01 * 255), (0.03 * 255) * (0.03 * 255)
	var sum float64
	n := 0
	for y := 0; y+8 <= h; y += 4 {
		for x := 0; x+8 <= w; x += 4 {
			var sa, sb, saa, sbb, sab float64
			for j := range 8 {
				for i := range 8 {
					p, q := ya[(y+j)*w+x+i], yb[(y+j)*w+x+i]
					sa, sb, saa, sbb, sab = sa+p, sb+q, saa+p*p, sbb+q*q, sab+p*q
				}
			}
			ma, mb := sa/64, sb/64
			va, vb, cov := saa/64-ma*ma, sbb/64-mb*mb, sab/64-ma*mb
			sum += (2*ma*mb + c1) * (2*cov + c2) / ((ma*ma + mb*mb + c1) * (va + vb + c2))
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// novncArea: noVNC's canvas's pixels in %s (x, y, w, h) as base64 RGBA.
// The page takes a snapshot (createImageBitmap) and a worker of its own
// reads and encodes it: read on noVNC's thread (getImageData and base64
// of 2 MB), each sample stopped noVNC for long enough that, fifteen
// times in a few seconds, the viewer measured was one that stalls (its
// decoding held up, its server's pictures held back), not the one a
// person watches.
const novncArea = `(async () => {
  const c = window.nv.el.querySelector("canvas"), a = %s;
  const bmp = await createImageBitmap(c, a.x, a.y, a.w, a.h);
  if (!window.fidelityWorker) {
    const src = "onmessage = e => { const b = e.data, o = new OffscreenCanvas(b.width, b.height), x = o.getContext('2d');" +
      " x.drawImage(b, 0, 0); const d = x.getImageData(0, 0, b.width, b.height).data; let s = '';" +
      " for (let i = 0; i < d.length; i += 32768) s += String.fromCharCode.apply(null, d.subarray(i, i + 32768)); postMessage(btoa(s)); }";
    window.fidelityWorker = new Worker(URL.createObjectURL(new Blob([src], {type: "text/javascript"})));
  }
  return await new Promise(r => { window.fidelityWorker.onmessage = e => r(e.data); window.fidelityWorker.postMessage(bmp, [bmp]); });
})()`

// fidelity connects noVNC to wsURL and returns the median SSIM of its
// picture of area (on display) against the screen's, over n page frames
// (at most 30 s).
func (v *novncViewer) fidelity(ctx context.Context, wsURL, display string, area image.Rectangle, n int) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	x, err := xgb.NewConnDisplay(display)
	if err != nil {
		return 0, fmt.Errorf("fidelity: %w", err)
	}
	defer x.Close()
	root := xproto.Setup(x).DefaultScreen(x).Root
	if _, err := v.eval(ctx, fmt.Sprintf(novncConnect, wsURL)); err != nil {
		return 0, err
	}
	defer v.eval(context.Background(), `(window.nv.rfb.disconnect(), 0)`)
	w, h := area.Dx(), area.Dy()
	var (
		mu     sync.Mutex
		frames = map[int][]byte{} // the last captures by bar number
		order  []int
	)
	capCtx, stopCapture := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { // ends with capCtx
		for capCtx.Err() == nil {
			rep, err := xproto.GetImage(x, xproto.ImageFormatZPixmap, xproto.Drawable(root), int16(area.Min.X), int16(area.Min.Y), uint16(w), uint16(h), 0xffffffff).Reply()
			if err != nil || len(rep.Data) < 4*w*h {
				return
			}
			k := barNumber(rep.Data, w, orderBGRX)
			mu.Lock()
			if _, ok := frames[k]; !ok {
				order = append(order, k)
			}
			frames[k] = rep.Data
			if len(order) > 120 {
				delete(frames, order[0])
				order = order[1:]
			}
			mu.Unlock()
		}
	})
	defer func() { stopCapture(); wg.Wait() }()
	js := fmt.Sprintf(novncArea, fmt.Sprintf(`{x:%d,y:%d,w:%d,h:%d}`, area.Min.X, area.Min.Y, w, h))
	var scores []float64
	deadline := time.Now().Add(30 * time.Second)
	for len(scores) < n && time.Now().Before(deadline) {
		out, err := v.eval(ctx, js)
		if err != nil {
			return 0, err
		}
		got, err := base64.StdEncoding.DecodeString(strings.Trim(out, `"`))
		if err != nil || len(got) < 4*w*h {
			return 0, fmt.Errorf("fidelity: the canvas's pixels: %v (%d bytes)", err, len(got))
		}
		k := barNumber(got, w, orderRGBA)
		time.Sleep(100 * time.Millisecond) // the capture of that frame may still come
		mu.Lock()
		want := frames[k]
		mu.Unlock()
		if want != nil {
			scores = append(scores, ssim(got, orderRGBA, want, orderBGRX, w, h))
		}
	}
	if len(scores) < n/2 {
		return 0, fmt.Errorf("fidelity: only %d of the viewer's pictures matched a captured frame in 30 s", len(scores))
	}
	slices.Sort(scores)
	return scores[len(scores)/2], nil
}
