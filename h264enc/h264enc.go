// Package h264enc encodes frames of the screen as H.264 in a child
// process: x264 (Debian's `x264`), fed raw BGRX frames on its stdin, its
// FLV output read back on a pipe. The encoder stays in its own process,
// so deskd stays one static binary without cgo and x264's GPL stays in
// x264.
//
// Frames go in as I420 converted here (yuv.go says why).
//
// One Encoder is one x264 process encoding frames of one size, one in,
// one out: Encode writes a frame and waits for its picture (zerolatency:
// no lookahead, no B-frames, one thread, so one slice a picture, which
// is what noVNC decodes as a frame). Key frames come on demand through
// x264's qpfile, a regular file it reads a line of before every frame:
// a line "N I" appended before frame N is fed makes N an IDR.
package h264enc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubepod/deskd/proc"
)

// Bounds of a frame: H.264 4:2:0 needs even sides; x264 and the decoders
// noVNC reaches through WebCodecs take up to 4096 (level 5.1's widest).
const (
	MinSize = 16
	MaxSize = 4096
)

// Config describes an encoder.
type Config struct {
	// X264 is the x264 binary; Stdbuf is coreutils' stdbuf, through which
	// x264 runs with its stdout unbuffered (x264 writes through stdio: a
	// picture would otherwise wait in a 4 KiB buffer for the next).
	X264, Stdbuf  string
	Width, Height int // even, MinSize..MaxSize
	FPS           int // the frame rate rate control assumes (default 30)
	// CRF is x264's constant rate factor (0-51, lower is better; 0 means
	// 26); MaxKbps, when set, caps the rate (VBV, one second of buffer).
	CRF     int
	MaxKbps int
	// Preset is x264's speed/size trade (default ultrafast: live video;
	// an export can take a slower one for smaller files). Profile is
	// baseline unless set (noVNC's decoders want constrained baseline;
	// a file for players can be high: CABAC, 8x8 transforms).
	Preset, Profile string
	// Subme is x264's sub-pixel motion refinement, 0 for the preset's
	// (ultrafast's is full pixels only): live video takes 1, quarter
	// pixels, for pictures that pan by fractions of a pixel (a scaled
	// video, a smooth scroll), which whole pixels predict badly.
	Subme int
	// Dir holds the key-frame file while the encoder runs (the daemon's
	// run dir: only its own user writes there).
	Dir        string
	Spawner    *proc.Spawner
	Credential *syscall.Credential // nil: as the daemon's own user
	LogPath    string              // x264's stderr (empty: kept in memory only)
	// Timeout bounds each frame, in and out (default 2 s): an encoder
	// that stalls is stopped and Encode fails.
	Timeout time.Duration
}

// Find returns the paths of x264 and stdbuf, looked up in PATH unless
// given, or an error saying what is missing.
func Find(x264 string) (x264Path, stdbuf string, err error) {
	if x264 == "" {
		x264 = "x264"
	}
	if x264Path, err = exec.LookPath(x264); err != nil {
		return "", "", fmt.Errorf("h264enc: no x264: %w", err)
	}
	if stdbuf, err = exec.LookPath("stdbuf"); err != nil {
		return "", "", fmt.Errorf("h264enc: no stdbuf (coreutils): %w", err)
	}
	return x264Path, stdbuf, nil
}

// Encoder is one running x264.
type Encoder struct {
	cfg   Config
	p     *proc.Process
	in    *os.File // x264's stdin: frames
	out   *os.File // x264's stdout: FLV
	flv   *flvReader
	keys  *os.File // the qpfile
	n     int      // frames fed
	frame []byte   // the frame in I420
	// loaded: frame holds a frame Load took, not yet encoded
	loaded bool
	dead   error // set once a frame failed: the encoder is stopped
}

// ErrSize is returned by Start for a frame size it cannot encode.
var ErrSize = errors.New("h264enc: frame size out of bounds")

// Start starts x264 for frames of cfg's size.
func Start(cfg Config) (*Encoder, error) {
	w, h := cfg.Width, cfg.Height
	if w < MinSize || h < MinSize || w > MaxSize || h > MaxSize || w%2 != 0 || h%2 != 0 {
		return nil, fmt.Errorf("%w: %dx%d (even, %d to %d a side)", ErrSize, w, h, MinSize, MaxSize)
	}
	if cfg.Spawner == nil || cfg.X264 == "" || cfg.Stdbuf == "" {
		return nil, errors.New("h264enc: Start needs a spawner, x264 and stdbuf")
	}
	if cfg.FPS <= 0 {
		cfg.FPS = 30
	}
	if cfg.CRF <= 0 || cfg.CRF > 51 {
		cfg.CRF = 26
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Preset == "" {
		cfg.Preset = "ultrafast"
	}
	if cfg.Profile == "" {
		cfg.Profile = "baseline"
	}
	keys, err := os.CreateTemp(cfg.Dir, "x264-keys-*")
	if err != nil {
		return nil, fmt.Errorf("h264enc: key-frame file: %w", err)
	}
	if c := cfg.Credential; c != nil && os.Geteuid() == 0 {
		_ = keys.Chown(int(c.Uid), int(c.Gid))
	}
	e := &Encoder{cfg: cfg, keys: keys, frame: make([]byte, w*h*3/2)}
	inR, inW, err := os.Pipe()
	if err != nil {
		e.removeKeys()
		return nil, fmt.Errorf("h264enc: pipe: %w", err)
	}
	growPipe(inW, len(e.frame))
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		e.removeKeys()
		return nil, fmt.Errorf("h264enc: pipe: %w", err)
	}
	args := []string{"-o0", cfg.X264,
		"--demuxer", "raw", "--input-csp", "i420", "--input-res", strconv.Itoa(w) + "x" + strconv.Itoa(h),
		"--fps", strconv.Itoa(cfg.FPS),
		"--preset", cfg.Preset, "--tune", "zerolatency", "--profile", cfg.Profile, "--threads", "1",
		"--keyint", "infinite", "--qpfile", keys.Name(),
		"--crf", strconv.Itoa(cfg.CRF),
		// What toI420 makes (yuv.go).
		"--input-range", "tv", "--range", "tv", "--colorprim", "bt709", "--transfer", "bt709", "--colormatrix", "bt709",
		"--muxer", "flv", "--log-level", "error", "--no-progress"}
	if cfg.Subme > 0 {
		args = append(args, "--subme", strconv.Itoa(min(cfg.Subme, 11)))
	}
	if cfg.MaxKbps > 0 {
		k := strconv.Itoa(cfg.MaxKbps)
		args = append(args, "--vbv-maxrate", k, "--vbv-bufsize", k)
	}
	args = append(args, "-o", "-", "-") // options before the files
	p, err := cfg.Spawner.Start(proc.Spec{Name: "x264", Path: cfg.Stdbuf, Args: args, LogPath: cfg.LogPath,
		Credential: cfg.Credential, Stdin: inR, Stdout: outW})
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		e.removeKeys()
		return nil, fmt.Errorf("h264enc: %w", err)
	}
	e.p, e.in, e.out, e.flv = p, inW, outR, newFLVReader(outR)
	return e, nil
}

// growPipe asks the kernel for a pipe that holds a frame of n bytes (up
// to the system's limit, 1 MiB by default): with the default 64 KiB a
// 960x540 frame went in twelve writes, each waking x264 to read a piece
// and deskd again to write the next. Best effort: a pipe left as it was
// still works. Through the raw descriptor, as Fd would leave the pipe
// blocking and without deadlines.
func growPipe(f *os.File, n int) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		if _, err := unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n); err != nil {
			_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20)
		}
	})
}

// Pid is x264's process id (for CPU accounting).
func (e *Encoder) Pid() int { return e.p.Pid }

// Encode encodes the frame whose pixel (x, y) is at pix[y*stride+4*x]
// (BGRX), a key frame (IDR) when key or when it is the first, and
// appends its picture to dst as Annex-B: SPS and PPS before every key
// frame. An error stops the encoder: every later call fails too.
func (e *Encoder) Encode(dst, pix []byte, stride int, key bool) ([]byte, bool, error) {
	if err := e.Load(pix, stride); err != nil {
		return dst, false, err
	}
	return e.EncodeLoaded(dst, key)
}

// Load takes the frame whose pixel (x, y) is at pix[y*stride+4*x] (BGRX)
// for the next EncodeLoaded, converted: pix may change once it returns.
// A caller whose frame is guarded takes the guard for Load alone, not
// for the round trip through x264.
func (e *Encoder) Load(pix []byte, stride int) error {
	if e.dead != nil {
		return e.dead
	}
	w, h := e.cfg.Width, e.cfg.Height
	if stride < 4*w || len(pix) < (h-1)*stride+4*w {
		return fmt.Errorf("h264enc: %d bytes at stride %d for a %dx%d frame", len(pix), stride, w, h)
	}
	toI420(e.frame, pix, stride, w, h)
	e.loaded = true
	return nil
}

// EncodeLoaded encodes the frame Load took last (see Encode).
func (e *Encoder) EncodeLoaded(dst []byte, key bool) ([]byte, bool, error) {
	if e.dead != nil {
		return dst, false, e.dead
	}
	if !e.loaded {
		return dst, false, errors.New("h264enc: no frame loaded")
	}
	e.loaded = false
	if key && e.n > 0 {
		if _, err := e.keys.WriteString(strconv.Itoa(e.n) + " I\n"); err != nil {
			return dst, false, e.fail(fmt.Errorf("h264enc: key-frame file: %w", err))
		}
	}
	deadline := time.Now().Add(e.cfg.Timeout)
	_ = e.in.SetWriteDeadline(deadline)
	if _, err := e.in.Write(e.frame); err != nil {
		return dst, false, e.fail(fmt.Errorf("h264enc: feeding x264: %w", err))
	}
	e.n++
	_ = e.out.SetReadDeadline(deadline)
	fr, err := e.flv.next()
	if err != nil {
		return dst, false, e.fail(fmt.Errorf("h264enc: reading x264: %w", err))
	}
	return e.flv.appendAnnexB(dst, fr), fr.key, nil
}

func (e *Encoder) fail(err error) error {
	if e.p.Exited() {
		err = fmt.Errorf("%w (%w)", err, e.p.ExitError())
	}
	e.dead = err
	e.stop()
	return err
}

// Close stops x264 and removes its key-frame file.
func (e *Encoder) Close() error {
	if e.dead == nil {
		e.dead = errors.New("h264enc: encoder closed")
	}
	return e.stop()
}

func (e *Encoder) stop() error {
	e.in.Close() // x264 sees the end of its input and exits
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := e.p.Stop(ctx, 200*time.Millisecond)
	e.out.Close()
	e.removeKeys()
	return err
}

func (e *Encoder) removeKeys() {
	if e.keys != nil {
		e.keys.Close()
		_ = os.Remove(e.keys.Name())
		e.keys = nil
	}
}
