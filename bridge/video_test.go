package bridge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cubepod/deskd/h264enc"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
)

// videoRect is an H.264 rectangle as the tests' viewer read it.
type videoRect struct {
	r     Rect
	flags uint32
	data  []byte
}

// nalTypes lists the NAL unit types of Annex-B data (3- or 4-byte start
// codes), failing on anything else, as noVNC's parser does.
func nalTypes(t *testing.T, b []byte) []int {
	t.Helper()
	var out []int
	for i := 0; i < len(b); {
		n := 0
		switch {
		case bytes.HasPrefix(b[i:], []byte{0, 0, 0, 1}):
			n = 4
		case bytes.HasPrefix(b[i:], []byte{0, 0, 1}):
			n = 3
		default:
			t.Fatalf("no start code at %d: % x", i, b[i:min(i+8, len(b))])
		}
		if i+n >= len(b) || b[i+n]&0x80 != 0 {
			t.Fatalf("a NAL unit without a header or with its forbidden bit at %d", i)
		}
		out = append(out, int(b[i+n]&0x1f))
		next := bytes.Index(b[i+n:], []byte{0, 0, 1})
		if next < 0 {
			break
		}
		i += n + next
		if b[i-1] == 0 {
			i-- // a 4-byte start code
		}
	}
	return out
}

// x264Encoders is a Config.Video with real x264 children; it counts
// them and keeps the last one's pid.
type x264Encoders struct {
	t       *testing.T
	sp      *proc.Spawner
	x, sb   string
	started atomic.Int32
	pid     atomic.Int32
	mu      sync.Mutex
	sizes   []Rect
	tiers   []int
}

func newX264Encoders(t *testing.T) *x264Encoders {
	testenv.LookPath(t, "x264")
	x, sb, err := h264enc.Find("")
	if err != nil {
		t.Fatal(err)
	}
	sp := proc.NewSpawner()
	t.Cleanup(sp.Close)
	return &x264Encoders{t: t, sp: sp, x: x, sb: sb}
}

func (e *x264Encoders) start(w, h, quality int) (VideoEncoder, error) {
	enc, err := h264enc.Start(h264enc.Config{X264: e.x, Stdbuf: e.sb, Width: w, Height: h, CRF: 38 - 2*quality,
		Dir: e.t.TempDir(), Spawner: e.sp})
	if err != nil {
		return nil, err
	}
	e.started.Add(1)
	e.pid.Store(int32(enc.Pid()))
	e.mu.Lock()
	e.sizes, e.tiers = append(e.sizes, Rect{W: w, H: h}), append(e.tiers, quality)
	e.mu.Unlock()
	return enc, nil
}

// videoServer serves scr with encoders from video; it is closed at the
// test's end.
func videoServer(t *testing.T, scr Screen, video func(w, h, quality int) (VideoEncoder, error)) *Server {
	t.Helper()
	s, err := NewServer(scr, Config{Video: video})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// animate paints r with a moving pattern at about 60 frames a second:
// rows copied from a pattern at a shifting offset, cheap enough to keep
// 60 a second under the race detector on a loaded machine (a loop over
// the pixels was not: video mode never started). stop ends it and waits;
// it also ends at the test's end (before the server and viewers made
// earlier are closed: it sends the screen's damage).
func animate(t *testing.T, m *memScreen, r Rect) (stop func()) {
	pat := make([]byte, 4*(r.W+512))
	for i := range pat {
		pat[i] = byte(i*7 + i/4*13 + i*i/11)
	}
	quit := make(chan struct{})
	var done sync.WaitGroup
	stop = sync.OnceFunc(func() { close(quit); done.Wait() })
	t.Cleanup(stop)
	done.Go(func() {
		tk := time.NewTicker(16 * time.Millisecond)
		defer tk.Stop()
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-tk.C:
			}
			m.mu.Lock()
			for y := r.Y; y < r.Y+r.H; y++ {
				o := y*m.f.Stride + 4*r.X
				off := 4 * ((y*y*7 + i*37) % 512) // no row is another moved (a scroll is not motion)
				copy(m.f.Pix[o:o+4*r.W], pat[off:])
			}
			m.mu.Unlock()
			m.damage <- toImage(r)
		}
	})
	return stop
}

var videoViewerEncodings = []int32{EncH264, EncTight, EncZRLE, EncCopyRect, encJPEGQuality0 + 6, encCompressLevel + 2}

// firstVideo reads updates until c has had an H.264 rectangle.
func firstVideo(t *testing.T, c *rfbClient) {
	t.Helper()
	readVideo(t, c, "no H.264 rectangle in 10 s of animation", func([]Rect) bool { return len(c.videos) > 0 })
}

// readVideo requests and reads updates until until holds or 10 s pass.
func readVideo(t *testing.T, c *rfbClient, what string, until func(rects []Rect) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		c.request(true)
		if until(c.update()) {
			return
		}
	}
}

// A part of the screen animated at 60 frames a second goes as H.264 to
// a viewer that takes it: the first picture resets its decoder and is a
// key frame with its parameter sets, the next are P pictures; the rest
// of the screen goes as before, and once the animation stops the region
// is sent again as pixels, exactly in the end.
func TestVideoRegion(t *testing.T) {
	encs := newX264Encoders(t)
	scr := newMemScreen(640, 480)
	s := videoServer(t, scr, encs.start)
	c := noVNCViewer(t, s, videoViewerEncodings...)
	other := noVNCViewer(t, s, EncTight, encJPEGQuality0+6) // no H.264

	region := Rect{64, 128, 384, 256} // 24 of 80 tiles
	stop := animate(t, scr, region)
	firstVideo(t, c)
	first := c.videos[0]
	if first.r != region {
		t.Fatalf("H.264 rectangle %+v, want the animated region %+v", first.r, region)
	}
	if first.flags != h264ResetThis {
		t.Errorf("first H.264 rectangle's flags %d, want %d (reset its decoder)", first.flags, h264ResetThis)
	}
	if types := nalTypes(t, first.data); len(types) < 3 || types[0] != 7 || types[1] != 8 || types[2] != 5 {
		t.Fatalf("first picture's NAL units %v, want SPS, PPS, IDR first", types)
	}
	for len(c.videos) < 10 {
		c.request(true)
		for _, r := range c.update() {
			if r.W > 0 && !r.Intersect(region).Empty() && (len(c.videos) == 0 || c.videos[len(c.videos)-1].r != r) {
				t.Fatalf("rectangle %+v in the video region while video is on", r)
			}
		}
	}
	for i, v := range c.videos[1:] {
		if v.flags != 0 || v.r != region {
			t.Fatalf("H.264 rectangle %d: %+v flags %d", i+1, v.r, v.flags)
		}
		for _, typ := range nalTypes(t, v.data) {
			if typ != 1 {
				t.Fatalf("H.264 rectangle %d holds NAL unit type %d, want only P slices", i+1, typ)
			}
		}
	}
	// The viewer without H.264 got pixels all along.
	other.request(true)
	other.update()
	if len(other.videos) > 0 {
		t.Fatal("a viewer that does not take H.264 got it")
	}
	if n := encs.started.Load(); n != 1 {
		t.Errorf("%d encoders started for one viewer", n)
	}

	stop()
	readVideo(t, c, "the region never came back as pixels after the animation stopped", func(rects []Rect) bool {
		return c.matches(scr)
	})
}

// Still content does not go as video however often it changes when it
// is small, and a large area changing ten times a second (a page
// scrolled in steps) does not either.
func TestVideoRuleLeavesStillContent(t *testing.T) {
	var m motion
	const w, h = 1280, 800
	region := func(rs []Rect, fps float64, seconds float64) (Rect, bool) {
		m = motion{}
		var cur Rect
		went := false
		for i := 0; float64(i) < fps*seconds; i++ {
			now := int64(float64(i) / fps * float64(time.Second))
			found := m.heat(rs, w, h, now)
			if next, ok := m.settle(found, cur, now); ok {
				cur, went = next, true
			}
		}
		return cur, went
	}
	tiles := func(r Rect) []Rect {
		var out []Rect
		for y := r.Y; y < r.Y+r.H; y += tile {
			for x := r.X; x < r.X+r.W; x += tile {
				out = append(out, Rect{x, y, min(tile, r.X+r.W-x), min(tile, r.Y+r.H-y)})
			}
		}
		return out
	}
	page := Rect{0, 64, 1280, 704}
	video := Rect{128, 128, 960, 540}
	for _, tt := range []struct {
		name    string
		rs      []Rect
		fps     float64
		want    Rect
		wantWas bool
	}{
		{"a page scrolled 10 times a second", tiles(page), 10, Rect{}, false},
		{"a caret and a clock at 30 fps", tiles(Rect{640, 0, 128, 64}), 30, Rect{}, false},
		{"a spinner at 60 fps", tiles(Rect{0, 0, 192, 192}), 60, Rect{}, false},
		{"a video at 30 fps", tiles(video), 30, Rect{128, 128, 960, 576}, true},
		{"a full-window canvas at 20 fps", tiles(page), 20, page, true},
		{"a video and a clock apart", append(tiles(video), tiles(Rect{1216, 0, 64, 64})...), 30, Rect{128, 128, 960, 576}, true},
		{"two videos side by side: the larger", append(tiles(Rect{0, 0, 320, 256}), tiles(Rect{640, 64, 640, 640})...), 30, Rect{640, 64, 640, 640}, true},
		// A frame tag changing with the video, touching its box at a
		// corner: not part of it (it took two rows of still page in).
		{"a video and a tag at its corner", append(tiles(video), tiles(Rect{64, 704, 32, 32})...), 30, Rect{128, 128, 960, 576}, true},
		{"a video and a tag beside its edge", append(tiles(video), tiles(Rect{1088, 256, 64, 64})...), 30, Rect{128, 128, 960, 576}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, was := region(tt.rs, tt.fps, 3)
			if got != tt.want || was != tt.wantWas {
				t.Fatalf("region %+v (%v), want %+v (%v)", got, was, tt.want, tt.wantWas)
			}
		})
	}
}

// An encoder that dies mid-stream leaves its viewer connected, on Tight,
// with the whole screen right; no encoder is started again at once.
func TestVideoEncoderDeath(t *testing.T) {
	encs := newX264Encoders(t)
	scr := newMemScreen(640, 480)
	s := videoServer(t, scr, encs.start)
	c := noVNCViewer(t, s, videoViewerEncodings...)
	region := Rect{0, 0, 640, 384}
	stop := animate(t, scr, region)
	firstVideo(t, c)
	if err := syscall.Kill(int(encs.pid.Load()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Pixels again in the region while it still moves.
	readVideo(t, c, "the region never went back to pixels after the encoder died", func(rects []Rect) bool {
		for _, r := range rects {
			if r.W > 0 && !r.Intersect(region).Empty() && r != region {
				return true
			}
		}
		return false
	})
	n := len(c.videos)
	for range 20 {
		c.request(true)
		c.update()
	}
	if len(c.videos) != n {
		t.Fatal("H.264 again right after the encoder died")
	}
	if got := encs.started.Load(); got != 1 {
		t.Errorf("%d encoders started, want 1 (none again within %v)", got, videoRetry)
	}
	stop()
	readVideo(t, c, "the screen never came right", func([]Rect) bool { return c.matches(scr) })
	select {
	case err := <-c.closed:
		t.Fatalf("viewer disconnected: %v", err)
	default:
	}
}

// A factory that cannot start an encoder (no x264, a size it refuses)
// leaves viewers on Tight.
func TestVideoEncoderUnavailable(t *testing.T) {
	var tries atomic.Int32
	scr := newMemScreen(640, 480)
	s := videoServer(t, scr, func(w, h, q int) (VideoEncoder, error) {
		tries.Add(1)
		return nil, errors.New("no encoder here")
	})
	c := noVNCViewer(t, s, videoViewerEncodings...)
	stop := animate(t, scr, Rect{0, 0, 640, 384})
	waitUntil(t, "no encoder was asked for", func() bool { return tries.Load() > 0 })
	for range 20 {
		c.request(true)
		c.update()
	}
	stop()
	readVideo(t, c, "the screen never came right", func([]Rect) bool { return c.matches(scr) })
	if len(c.videos) > 0 || tries.Load() != 1 {
		t.Fatalf("%d H.264 rectangles, %d tries", len(c.videos), tries.Load())
	}
}

func TestCutOut(t *testing.T) {
	r := Rect{64, 64, 128, 128}
	for _, tt := range []struct {
		in   Rect
		want []Rect
	}{
		{Rect{0, 0, 64, 64}, []Rect{{0, 0, 64, 64}}},
		{Rect{64, 64, 64, 64}, nil},
		{Rect{0, 0, 256, 256}, []Rect{{0, 0, 256, 64}, {0, 64, 64, 128}, {192, 64, 64, 128}, {0, 192, 256, 64}}},
		{Rect{128, 128, 65, 65}, []Rect{{192, 128, 1, 64}, {128, 192, 65, 1}}},
	} {
		got := cutOut([]Rect{tt.in}, r)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("cutOut(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// A viewer that leaves leaves its stream: the stream stops encoding at
// once and its encoder stops after streamLinger.
func TestVideoViewerLeaves(t *testing.T) {
	encs := newX264Encoders(t)
	scr := newMemScreen(640, 480)
	s := videoServer(t, scr, encs.start)
	c := noVNCViewer(t, s, videoViewerEncodings...)
	noVNCViewer(t, s, EncTight) // keeps the capture going (reading nothing)
	animate(t, scr, Rect{0, 0, 640, 384})
	firstVideo(t, c)
	pid := int(encs.pid.Load())
	c.c.Close()
	deadline := time.Now().Add(streamLinger + 3*time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("x264 still runs %v after its only viewer left", streamLinger+3*time.Second)
		}
		time.Sleep(50 * time.Millisecond) // no event for another process's exit
	}
}

// A viewer that joins a stream others follow gets its decoder reset and a
// key frame from the same encoder; the others go on. A resize ends the
// stream and its encoder; video starts again in the new size with a key
// frame and a reset.
func TestVideoNewViewerAndResize(t *testing.T) {
	encs := newX264Encoders(t)
	scr := &sizedScreen{memScreen: newMemScreen(640, 480), maxW: 800, maxH: 600, sizeCh: make(chan image.Point, 1)}
	s := videoServer(t, scr, encs.start)
	// Quality level 1, the floor congestion control lowers to: a viewer
	// not read for a while (the other is) keeps its tier.
	encodings := []int32{EncH264, EncTight, EncCopyRect, encJPEGQuality0 + 1, EncDesktopSize}
	a := noVNCViewer(t, s, encodings...)
	region := Rect{0, 0, 640, 384}
	animate(t, scr.memScreen, region)
	firstVideo(t, a)

	b := noVNCViewer(t, s, encodings...)
	readVideo(t, b, "the second viewer got no H.264 rectangle", func([]Rect) bool { return len(b.videos) > 0 })
	if v := b.videos[0]; v.flags != h264ResetThis || !slices.Equal(nalTypes(t, v.data)[:3], []int{7, 8, 5}) {
		t.Fatalf("the second viewer's first H.264 rectangle: flags %d, NAL units %v; want a reset and SPS, PPS, IDR", v.flags, nalTypes(t, v.data))
	}
	n := len(a.videos)
	readVideo(t, a, "the first viewer got no more pictures", func([]Rect) bool { return len(a.videos) > n+3 })
	for _, v := range a.videos[1:] {
		if v.flags != 0 {
			t.Fatal("the first viewer's decoder was reset while it followed the stream")
		}
	}
	if got := encs.started.Load(); got != 1 {
		t.Fatalf("%d encoders for two viewers at one quality, want 1", got)
	}
	first := int(encs.pid.Load())

	scr.setSize(800, 600)
	readVideo(t, a, "no size message after the resize", func([]Rect) bool { return len(a.sizes) > 0 && a.w == 800 })
	n = len(a.videos)
	readVideo(t, a, "no video after the resize", func([]Rect) bool { return len(a.videos) > n })
	if v := a.videos[n]; v.flags != h264ResetThis || nalTypes(t, v.data)[2] != 5 {
		t.Fatalf("after the resize: flags %d, NAL units %v; want a reset and a key frame", v.flags, nalTypes(t, v.data))
	}
	if got := encs.started.Load(); got != 2 {
		t.Fatalf("%d encoders started, want a second one for the new size", got)
	}
	waitUntil(t, "the old size's encoder still runs", func() bool { return syscall.Kill(first, 0) != nil })
}

// The region is the part of the moving tiles whose pixels change, not
// the tiles: a video off the tile grid is encoded at its own size.
func TestVideoRegionExact(t *testing.T) {
	encs := newX264Encoders(t)
	scr := newMemScreen(640, 480)
	s := videoServer(t, scr, encs.start)
	c := noVNCViewer(t, s, videoViewerEncodings...)
	region := Rect{70, 130, 380, 250} // in 6x5 tiles from (64, 128)
	animate(t, scr, region)
	firstVideo(t, c)
	if got := c.videos[0].r; got != region {
		t.Fatalf("H.264 rectangle %+v, want the animated pixels %+v", got, region)
	}
}

// watch finds the pixels that change in a candidate, and refined makes
// the region of them: even sides, grown within the tiles or cut.
func TestVideoRefine(t *testing.T) {
	fb := NewFrame(256, 256)
	tiles := Rect{0, 0, 256, 192}
	for _, tt := range []struct {
		name    string
		changes []Rect // changed between captures, in turn
		want    Rect
	}{
		{"one box", []Rect{{10, 20, 100, 60}}, Rect{10, 20, 100, 60}},
		{"boxes that add up", []Rect{{10, 20, 100, 60}, {5, 30, 20, 100}, {200, 10, 6, 2}}, Rect{5, 10, 202, 120}},
		{"odd sides grow", []Rect{{11, 21, 99, 59}}, Rect{11, 21, 100, 60}},
		{"odd sides at the tiles' far edges grow back", []Rect{{157, 133, 99, 59}}, Rect{156, 132, 100, 60}},
		{"a pixel: too small, the tiles", []Rect{{40, 40, 1, 1}}, tiles},
		{"nothing seen: the tiles", nil, tiles},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var m motion
			m.watch(tiles, fb)
			for i, r := range tt.changes {
				for y := r.Y; y < r.Y+r.H; y++ {
					for x := r.X; x < r.X+r.W; x++ {
						fb.Pix[y*fb.Stride+4*x] += byte(i + 1)
					}
				}
				m.watch(tiles, fb)
			}
			if got := m.refined(tiles); got != tt.want {
				t.Fatalf("region %+v, want %+v", got, tt.want)
			}
			if got := m.refined(Rect{0, 0, 128, 128}); got != (Rect{0, 0, 128, 128}) {
				t.Errorf("another candidate's region %+v, want it whole", got)
			}
		})
	}
	// Candidates lower than two tiles: the edge bands overlap.
	for _, h := range []int{16, 64, 100, 128} {
		var m motion
		r := Rect{0, 0, 256, h}
		m.watch(r, fb)
		fb.Pix[(h-1)*fb.Stride+4*200]++
		fb.Pix[4*30]++
		m.watch(r, fb)
		if want := (Rect{30, 0, 171, h}); m.exact != want {
			t.Errorf("%d rows: exact %+v, want %+v", h, m.exact, want)
		}
	}
}

// A viewer's tier steps down only when the window held its pictures
// back for a while (the path does not carry the stream), not for a
// moment's stop, and comes back up on trial, trials spaced out while
// they fail.
func TestVideoTierStep(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	for _, tt := range []struct {
		name   string
		vs     videoState
		paced  bool
		sr, pr float64
		want   int
		level  int
	}{
		{"behind, held back for 1.5 s", videoState{tierState: tierState{level: 6, levelAt: ago(time.Minute), heldAt: now, heldSince: ago(1500 * time.Millisecond)}, backlog: 3}, false, 0, 0, -1, 4},
		{"behind, held back 0.5 s (a stop)", videoState{tierState: tierState{level: 6, levelAt: ago(time.Minute), heldAt: now, heldSince: ago(500 * time.Millisecond)}, backlog: 3}, false, 0, 0, 0, 6},
		{"behind, held back long ago", videoState{tierState: tierState{level: 6, levelAt: ago(time.Minute), heldAt: ago(2 * time.Second), heldSince: ago(5 * time.Second)}, backlog: 3}, false, 0, 0, 0, 6},
		{"behind, asking for each update", videoState{tierState: tierState{level: 6, levelAt: ago(time.Minute)}, backlog: 3}, true, 0, 0, -1, 4},
		{"behind, just stepped", videoState{tierState: tierState{level: 6, levelAt: ago(500 * time.Millisecond)}, backlog: 3}, true, 0, 0, 0, 6},
		{"behind at the floor", videoState{tierState: tierState{level: 1, levelAt: ago(time.Minute)}, backlog: 3}, true, 0, 0, 0, 1},
		{"keeping up at its own level", videoState{tierState: tierState{level: 6, levelAt: ago(time.Minute)}, backlog: 1}, false, 1e6, 1e8, 0, 6},
		{"below its own, the path three times the stream", videoState{tierState: tierState{level: 4, levelAt: ago(videoUp), heldAt: now}, backlog: 1}, false, 1e6, 4e6, 1, 6},
		{"below its own, nothing held: a trial", videoState{tierState: tierState{level: 4, levelAt: ago(videoUp), heldAt: ago(videoUp)}, backlog: 1}, false, 1e6, 1e6, 1, 6},
		{"below its own, held lately", videoState{tierState: tierState{level: 4, levelAt: ago(videoUp), heldAt: ago(time.Second)}, backlog: 1}, false, 1e6, 1e6, 0, 4},
		{"below its own, taking pictures in twos", videoState{tierState: tierState{level: 4, levelAt: ago(videoUp)}, backlog: 2}, false, 1e6, 1e6, 0, 4},
		{"a failed trial's wait", videoState{tierState: tierState{level: 4, levelAt: ago(videoUp), upWait: 2 * videoUp}, backlog: 1}, false, 1e6, 1e6, 0, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vs := tt.vs
			if got := vs.step(now, 6, tt.sr, tt.pr, tt.paced); got != tt.want || vs.level != tt.level {
				t.Fatalf("step %d to level %d, want %d to %d", got, vs.level, tt.want, tt.level)
			}
		})
	}
	// A trial followed by a step down doubles the wait for the next,
	// up to videoUpMax.
	vs := videoState{tierState: tierState{level: 4, levelAt: ago(videoUp)}, backlog: 1}
	if vs.step(now, 6, 1e6, 1e6, false) != 1 {
		t.Fatal("no trial")
	}
	for i, want := range []time.Duration{2 * videoUp, 4 * videoUp, 8 * videoUp, 16 * videoUp, videoUpMax} {
		now = now.Add(videoDown)
		vs.backlog, vs.heldSince, vs.heldAt = 3, now.Add(-heldLong), now
		if vs.step(now, 6, 1e6, 1e6, false) != -1 || vs.upWait != want {
			t.Fatalf("failed trial %d: wait %v, want %v", i+1, vs.upWait, want)
		}
		vs.backlog, vs.heldAt = 1, now.Add(-time.Hour)
		if vs.step(now.Add(want-time.Millisecond), 6, 1e6, 1e6, false) != 0 {
			t.Fatalf("a trial before the wait %v", want)
		}
		now = now.Add(want)
		if vs.step(now, 6, 1e6, 1e6, false) != 1 {
			t.Fatalf("no trial after the wait %v", want)
		}
	}
}

// A step down after which the viewer, still held back, takes no more
// pictures a second than before (its page or machine was what held
// them: a lower tier decodes no faster) is undone, and no step down
// comes again for a while, longer each time; a step down that let more
// pictures through, or after which nothing is held back, stays.
func TestVideoTierDownUndone(t *testing.T) {
	for _, tt := range []struct {
		name     string
		after    float64 // pictures a second, 2 s after the step (50 before it)
		held     bool
		want     int
		wantLvl  int
		waitDown bool // no step down right after
	}{
		{"no more pictures, still held", 52, true, 2, 6, true},
		{"more pictures, still held: further down", 70, true, -1, 1, false},
		{"nothing held back any more", 52, false, 0, 4, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now()
			vs := videoState{tierState: tierState{level: 6, levelAt: now.Add(-time.Minute), heldAt: now, heldSince: now.Add(-heldLong), rate: 50, rateAt: now}, backlog: 3}
			if vs.step(now, 6, 1e6, 1e6, false) != -1 || vs.level != 4 {
				t.Fatalf("no step down: level %d", vs.level)
			}
			now = now.Add(2 * videoDown)
			vs.rate, vs.rateAt = tt.after, now
			if tt.held {
				vs.heldAt = now
			} else {
				vs.heldAt, vs.backlog = now.Add(-time.Second), 1
			}
			if got := vs.step(now, 6, 1e6, 1e6, false); got != tt.want || vs.level != tt.wantLvl {
				t.Fatalf("step %d to level %d, want %d to %d", got, vs.level, tt.want, tt.wantLvl)
			}
			if !tt.waitDown {
				return
			}
			for i, wait := range []time.Duration{videoUp, 2 * videoUp, 4 * videoUp} {
				if i > 0 { // down again, undone again: the wait doubles
					now = now.Add(videoDown)
					vs.heldAt, vs.rate, vs.rateAt = now, 50, now
					if vs.step(now, 6, 1e6, 1e6, false) != -1 {
						t.Fatalf("no step down after the wait %v", wait/2)
					}
					now = now.Add(2 * videoDown)
					vs.heldAt, vs.rate, vs.rateAt = now, 50, now
					if vs.step(now, 6, 1e6, 1e6, false) != 2 {
						t.Fatal("the second step down not undone")
					}
				}
				now = now.Add(wait - videoDown)
				vs.heldAt, vs.rateAt = now, now
				if got := vs.step(now, 6, 1e6, 1e6, false); got != 0 {
					t.Fatalf("step %d within %v of an undone step down", got, wait)
				}
				now = now.Add(videoDown)
				vs.heldAt, vs.rateAt = now, now
			}
		})
	}
}

// A screen too small for a macroblock a side never goes as video.
func TestVideoRuleTinyScreen(t *testing.T) {
	var m motion
	for i := range 120 {
		now := int64(i) * int64(time.Second) / 60
		if r := m.heat([]Rect{{0, 0, 40, 14}}, 40, 14, now); !r.Empty() {
			t.Fatalf("a 40x14 screen's region %+v", r)
		}
	}
}

// The level a viewer's video tier follows steps down the ladder and back
// up to the viewer's own, a tier at a time.
func TestVideoLevelSteps(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		own      int
		down, up []int // levels after each lower from own, then each raise
	}{
		{6, []int{4, 1, 1}, []int{4, 6}},
		{9, []int{7, 4, 1}, []int{4, 7, 9}},
		{4, []int{1, 1}, []int{4}},
		{1, []int{1}, nil},
	} {
		vs := videoState{tierState: tierState{level: tt.own}}
		var down, up []int
		for range tt.down {
			vs.lower(now)
			down = append(down, vs.level)
		}
		for vs.level != tt.own && len(up) < 5 {
			vs.raise(tt.own, now)
			up = append(up, vs.level)
		}
		if !slices.Equal(down, tt.down) || !slices.Equal(up, tt.up) {
			t.Errorf("own %d: down %v up %v, want %v and %v", tt.own, down, up, tt.down, tt.up)
		}
	}
}

// A viewer that follows the video but asks for part of the region only
// gets pixels there: the part is not left to a picture it did not ask for.
func TestVideoPartialRequest(t *testing.T) {
	encs := newX264Encoders(t)
	scr := newMemScreen(640, 480)
	s := videoServer(t, scr, encs.start)
	c := noVNCViewer(t, s, videoViewerEncodings...)
	region := Rect{0, 0, 640, 384}
	animate(t, scr, region)
	firstVideo(t, c)
	part := Rect{64, 64, 128, 128}
	b := []byte{msgFBUpdateRequest, 1}
	for _, v := range []int{part.X, part.Y, part.W, part.H} {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	for range 3 {
		c.write(b)
		for _, r := range c.update() {
			if r.W > 0 && !part.Intersect(r).Empty() && r != region {
				return // pixels in the part asked for
			}
		}
	}
	t.Fatal("three requests for part of the video region brought no pixels there")
}
