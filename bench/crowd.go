package bench

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"
)

// others connects n of the bench's own viewers to wsURL, which read
// every update whole and decode none. Like noVNC, each takes continuous
// updates where the server offers them and answers fences, else asks
// for the next update as the last arrives; stalled, it asks every 20 ms
// and reads nothing (a viewer whose link or tab froze: the server's
// sends to it block). stop disconnects them.
func others(ctx context.Context, wsURL string, n int, stalled bool) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var vs []*viewer
	stop = func() {
		cancel()
		for _, v := range vs {
			v.conn.Close()
		}
		wg.Wait()
	}
	for range n {
		v, err := dialViewer(ctx, wsURL, slices.Concat(viewerEncodings, []int32{encContinuousUpdates, encFence}))
		if err != nil {
			stop()
			return nil, err
		}
		v.skim, v.cu = true, true
		vs = append(vs, v)
		if err := v.request(false); err != nil {
			stop()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if stalled {
				t := time.NewTicker(20 * time.Millisecond)
				defer t.Stop()
				for {
					select {
					case <-ctx.Done():
						return
					case <-t.C:
					}
					if v.request(true) != nil {
						return
					}
				}
			}
			for ctx.Err() == nil {
				if _, err := v.next(); err != nil {
					return
				}
				if v.request(true) != nil {
					return
				}
			}
		}()
	}
	return stop, nil
}

// jpegQuality watches wsURL with one of the bench's viewers for d (it
// takes continuous updates where offered, as noVNC does) and returns the
// median IJG quality of the JPEG rectangles it gets, found
// from their luminance tables (0: it got none).
func jpegQuality(ctx context.Context, wsURL string, d time.Duration) (float64, error) {
	v, err := dialViewer(ctx, wsURL, slices.Concat(viewerEncodings, []int32{encContinuousUpdates, encFence}))
	if err != nil {
		return 0, err
	}
	defer v.conn.Close()
	v.skim, v.cu = true, true // as noVNC
	var qs []float64
	v.onJPEG = func(b []byte) {
		if q, ok := ijgQuality(b); ok {
			qs = append(qs, float64(q))
		}
	}
	if err := v.request(false); err != nil {
		return 0, err
	}
	end := time.Now().Add(d)
	v.conn.SetReadDeadline(end)
	for {
		if _, err := v.next(); err != nil {
			if !time.Now().Before(end) { // the deadline (the WebSocket says so in its own words)
				break
			}
			return 0, err
		}
		if err := v.request(true); err != nil {
			return 0, err
		}
	}
	if len(qs) == 0 {
		return 0, nil
	}
	slices.Sort(qs)
	return qs[len(qs)/2], nil
}

// ijgLuma is the luminance table of T.81 Annex K.1, which libjpeg scales
// by quality (and so do the VNC servers measured).
var ijgLuma = [64]int{
	16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
	14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
	18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
	49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
}

// ijgQuality finds the first 8-bit quantisation table of a JPEG and
// returns the libjpeg quality whose scaled luminance table is nearest to
// it (the sum of its entries, whatever their order).
func ijgQuality(jpg []byte) (int, bool) {
	i := bytes.Index(jpg, []byte{0xff, 0xdb})
	if i < 0 || len(jpg) < i+5+64 || jpg[i+4]>>4 != 0 {
		return 0, false
	}
	sum := 0
	for _, v := range jpg[i+5 : i+5+64] {
		sum += int(v)
	}
	best, bestDiff := 0, -1
	for q := 1; q <= 100; q++ {
		s := ijgLumaSums[q]
		if d := max(s-sum, sum-s); bestDiff < 0 || d < bestDiff {
			best, bestDiff = q, d
		}
	}
	return best, true
}

// ijgLumaSums[q] is the sum of ijgLuma scaled to quality q as libjpeg
// scales it (computed once: every JPEG rectangle a viewer gets is read).
var ijgLumaSums = func() (sums [101]int) {
	for q := 1; q <= 100; q++ {
		scale := 200 - 2*q
		if q < 50 {
			scale = 5000 / q
		}
		for _, b := range ijgLuma {
			sums[q] += min(max((b*scale+50)/100, 1), 255)
		}
	}
	return sums
}()
