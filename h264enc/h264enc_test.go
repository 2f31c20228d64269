package h264enc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
)

// startX264 starts an encoder for w×h frames, skipping the test where x264
// is not installed (CI installs it).
func startX264(t testing.TB, w, h int, tweak func(*Config)) *Encoder {
	t.Helper()
	testenv.LookPath(t, "x264")
	x, sb, err := Find("")
	if err != nil {
		t.Fatal(err)
	}
	sp := proc.NewSpawner()
	t.Cleanup(sp.Close)
	cfg := Config{X264: x, Stdbuf: sb, Width: w, Height: h, Dir: t.TempDir(), Spawner: sp,
		LogPath: filepath.Join(t.TempDir(), "x264.log")}
	if tweak != nil {
		tweak(&cfg)
	}
	e, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// movingFrame is a w×h BGRX picture: a gradient with a square at a place
// that depends on i.
func movingFrame(w, h, stride, i int) []byte {
	pix := make([]byte, stride*h)
	for y := range h {
		for x := range w {
			p := pix[y*stride+4*x:]
			p[0], p[1], p[2] = byte(x+i), byte(y), byte(x+y)
			if x >= 8+3*i%(w-16) && x < 16+3*i%(w-16) && y >= 8 && y < 16 {
				p[0], p[1], p[2] = 255, 255, 255
			}
		}
	}
	return pix
}

// nalTypes lists the NAL unit types of an Annex-B stream with 4-byte
// start codes.
func nalTypes(t *testing.T, b []byte) []int {
	t.Helper()
	var out []int
	for len(b) > 0 {
		if !bytes.HasPrefix(b, startCode) || len(b) < 5 {
			t.Fatalf("no start code at % x", b[:min(8, len(b))])
		}
		out = append(out, int(b[4]&0x1f))
		next := bytes.Index(b[4:], startCode)
		if next < 0 {
			break
		}
		b = b[4+next:]
	}
	return out
}

func TestEncodeFrames(t *testing.T) {
	const w, h = 320, 240
	e := startX264(t, w, h, nil)
	var total int
	for i := range 12 {
		stride := 4*w + 64 // a padded stride, as a capture of part of the screen has
		au, key, err := e.Encode(nil, movingFrame(w, h, stride, i), stride, i == 7)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		types := nalTypes(t, au)
		switch {
		case i == 0 || i == 7:
			if !key || len(types) != 3 || types[0] != nalSPS || types[1] != nalPPS || types[2] != nalSliceIDR {
				t.Fatalf("frame %d: key %v, NAL units %v; want SPS, PPS, IDR", i, key, types)
			}
		default:
			if key || len(types) != 1 || types[0] != nalSlice {
				t.Fatalf("frame %d: key %v, NAL units %v; want one non-IDR slice", i, key, types)
			}
		}
		total += len(au)
	}
	if total > 12*w*h/4 {
		t.Errorf("12 frames in %d bytes: not compressed", total)
	}
}

func TestSizeBounds(t *testing.T) {
	sp := proc.NewSpawner()
	defer sp.Close()
	for _, s := range [][2]int{{1, 1}, {15, 16}, {17, 16}, {16, 33}, {4098, 16}, {16, 1 << 20}, {-2, 16}, {0, 0}} {
		_, err := Start(Config{X264: "x264", Stdbuf: "stdbuf", Width: s[0], Height: s[1], Spawner: sp, Dir: t.TempDir()})
		if !errors.Is(err, ErrSize) {
			t.Errorf("%dx%d: %v, want ErrSize", s[0], s[1], err)
		}
	}
}

func TestEncodeShortFrame(t *testing.T) {
	e := startX264(t, 64, 64, nil)
	if _, _, err := e.Encode(nil, make([]byte, 64*64*4-1), 64*4, false); err == nil {
		t.Fatal("a frame a byte short was taken")
	}
	// The encoder is unharmed: the check came before anything was fed.
	if _, key, err := e.Encode(nil, make([]byte, 64*64*4), 64*4, false); err != nil || !key {
		t.Fatalf("then a whole frame: key %v, %v", key, err)
	}
}

// Load takes a frame once: EncodeLoaded without a frame loaded since the
// last fails and feeds x264 nothing; what is encoded is the frame as it
// was at Load, whatever its pixels became after (the stream loads from
// the framebuffer under its lock and encodes after).
func TestLoadThenEncode(t *testing.T) {
	e := startX264(t, 64, 64, nil)
	if _, _, err := e.EncodeLoaded(nil, false); err == nil {
		t.Fatal("EncodeLoaded with nothing loaded")
	}
	pix := make([]byte, 64*64*4) // black
	if err := e.Load(pix, 256); err != nil {
		t.Fatal(err)
	}
	for i := range pix {
		pix[i] = 0xff
	}
	if y := e.frame[0]; y != 16 {
		t.Fatalf("luma %d after the frame changed, want black's 16", y)
	}
	if _, key, err := e.EncodeLoaded(nil, false); err != nil || !key {
		t.Fatalf("the loaded frame: key %v, %v", key, err)
	}
	if _, _, err := e.EncodeLoaded(nil, false); err == nil {
		t.Fatal("the same frame encoded twice")
	}
	if e.n != 1 {
		t.Fatalf("%d frames fed, want 1", e.n)
	}
	if err := e.Load(pix[:100], 256); err == nil {
		t.Fatal("a short frame loaded")
	}
}

// x264's input pipe holds a whole frame (the default 64 KiB took a
// 960x540 frame in twelve writes, each a wake-up of both processes).
func TestPipeHoldsFrame(t *testing.T) {
	e := startX264(t, 960, 540, nil)
	rc, err := e.in.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	if err := rc.Control(func(fd uintptr) { size, err = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0) }); err != nil || size < len(e.frame) {
		t.Fatalf("pipe of %d bytes (%v), want %d at least", size, err, len(e.frame))
	}
}

// An x264 that dies mid-stream fails the next frame, at once, and every
// one after it.
func TestEncoderDeath(t *testing.T) {
	e := startX264(t, 64, 64, nil)
	pix := make([]byte, 64*64*4)
	if _, _, err := e.Encode(nil, pix, 256, false); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(e.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-e.p.Done()
	start := time.Now()
	if _, _, err := e.Encode(nil, pix, 256, false); err == nil {
		t.Fatal("a frame encoded by a dead x264")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("the failure took %v", d)
	}
	if _, _, err := e.Encode(nil, pix, 256, false); err == nil {
		t.Fatal("a second frame encoded by a dead x264")
	}
}

// An x264 that stops reading (stopped, not dead) fails the frame by the
// timeout.
func TestEncoderStall(t *testing.T) {
	e := startX264(t, 640, 480, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	pix := make([]byte, 640*480*4)
	if _, _, err := e.Encode(nil, pix, 640*4, false); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(e.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err := e.Encode(nil, pix, 640*4, false)
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stalled x264: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the failure took %v", d)
	}
}

// BenchmarkEncode960x540 reports, per frame of a moving picture, the
// time to a picture back and x264's CPU (from /proc).
func BenchmarkEncode960x540(b *testing.B) {
	const w, h = 960, 540
	e := startX264(b, w, h, nil)
	frames := [8][]byte{}
	for i := range frames {
		frames[i] = movingFrame(w, h, 4*w, i)
	}
	cpu0 := procCPU(b, e.Pid())
	var bytes int
	b.ResetTimer()
	for i := range b.N {
		au, _, err := e.Encode(nil, frames[i%len(frames)], 4*w, false)
		if err != nil {
			b.Fatal(err)
		}
		bytes += len(au)
	}
	b.StopTimer()
	b.ReportMetric(float64(procCPU(b, e.Pid())-cpu0)/float64(b.N)/1e6, "x264-cpu-ms/frame")
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/frame")
}

// procCPU is a process's user and system time so far, in nanoseconds.
func procCPU(t testing.TB, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return (u + s) * int64(time.Second) / 100 // USER_HZ
}

// A rate cap holds a hard-to-code picture's bytes down.
func TestMaxKbps(t *testing.T) {
	const w, h = 320, 240
	sizes := map[int]int{}
	for _, kbps := range []int{0, 200} {
		e := startX264(t, w, h, func(c *Config) { c.MaxKbps, c.CRF = kbps, 10 })
		for i := range 20 {
			au, _, err := e.Encode(nil, movingFrame(w, h, 4*w, 7*i), 4*w, false)
			if err != nil {
				t.Fatal(err)
			}
			if i > 0 {
				sizes[kbps] += len(au)
			}
		}
	}
	if sizes[200] >= sizes[0]/2 {
		t.Fatalf("19 P pictures: %d bytes capped at 200 kbit/s, %d uncapped", sizes[200], sizes[0])
	}
}
