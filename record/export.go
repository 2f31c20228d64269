package record

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cubepod/deskd/h264enc"
)

// FrameEncoder encodes pictures as H.264 (an h264enc.Encoder: x264 in a
// child process): Encode takes BGRX rows at stride and appends the
// picture in Annex-B, SPS and PPS before key frames.
type FrameEncoder interface {
	Encode(dst, pix []byte, stride int, key bool) ([]byte, bool, error)
	Close() error
}

// ExportOptions are an MP4 export's settings.
type ExportOptions struct {
	// FPS is how often the picture is looked at (default 10, at most
	// 30): a picture is encoded only when it has changed since the last,
	// and shows until the next.
	FPS int
	// NewEncoder starts an encoder of w×h pictures (even, 16-4096).
	NewEncoder func(w, h, fps int) (FrameEncoder, error)
	// MaxBytes bounds the file (default 4 GiB).
	MaxBytes int64
	// KeyEvery spaces key frames (default 10 s): players seek by decoding
	// from the one before, and each costs much of a picture's worth of
	// bytes (66 s of a scrolled photo gallery: 36.1 MB with one every
	// 2 s, 30.2 MB every 10 s).
	KeyEvery time.Duration
}

// ExportStats says what an export wrote.
type ExportStats struct {
	Width, Height int
	Frames        int
	Duration      time.Duration
	Bytes         int64
	// Undecodable counts segments whose bytes could not all be decoded:
	// their picture stops where the damage is, until the next segment.
	Undecodable int
}

// ErrExportTooLarge: the MP4 outgrew ExportOptions.MaxBytes.
var ErrExportTooLarge = errors.New("record: the exported video outgrew its bound")

// ExportMP4 writes a desktop recording read from r as an MP4 (H.264) on
// w: the picture a viewer of the recording shows, looked at FPS times a
// second and encoded when it changed. The pictures go to scratch first
// (an empty temporary file): the MP4's index goes before them and is
// known only at the end. The video keeps the recording's
// clock (a picture at 12.3 s of the video is the one at 12.3 s of the
// recording) and the first segment's size; a later size is cut or
// padded with black to it. A recording cut short (being written, or by
// a crash) is exported up to its last whole record.
func ExportMP4(ctx context.Context, r io.Reader, w io.Writer, scratch io.ReadWriteSeeker, o ExportOptions) (ExportStats, error) {
	if o.FPS <= 0 {
		o.FPS = 10
	}
	o.FPS = min(o.FPS, 30)
	if o.MaxBytes <= 0 {
		o.MaxBytes = 4 << 30
	}
	if o.KeyEvery <= 0 {
		o.KeyEvery = 10 * time.Second
	}
	if o.NewEncoder == nil {
		return ExportStats{}, errors.New("record: ExportMP4 needs an encoder")
	}
	rd, err := NewDesktopReader(r)
	if err != nil {
		return ExportStats{}, err
	}
	x := &exporter{o: o, w: scratch, step: time.Second / time.Duration(o.FPS)}
	defer x.close()
	var end time.Duration
	for {
		if err := ctx.Err(); err != nil {
			return x.st, err
		}
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return x.st, err
		}
		if err := x.until(rec.At); err != nil {
			return x.st, err
		}
		end = rec.At
		x.apply(rec)
	}
	// The picture after the last record shows for one more look.
	if err := x.until(end + x.step); err != nil {
		return x.st, err
	}
	if x.mp4 == nil {
		return x.st, fmt.Errorf("%w: no picture in it", ErrBadRecording)
	}
	x.st.Duration = max(end, x.last+x.step)
	head, err := x.mp4.Close(x.st.Duration)
	if err != nil {
		return x.st, err
	}
	if _, err := w.Write(head); err != nil {
		return x.st, fmt.Errorf("record: export: %w", err)
	}
	if _, err := scratch.Seek(0, io.SeekStart); err != nil {
		return x.st, fmt.Errorf("record: export: %w", err)
	}
	n, err := io.Copy(w, io.LimitReader(scratch, x.mp4.Samples()))
	if err != nil {
		return x.st, fmt.Errorf("record: export: %w", err)
	}
	x.st.Bytes = int64(len(head)) + n
	return x.st, nil
}

// exporter follows the segments as the replay page does: the shown one
// (cur) and, during an overlap, the next one being decoded (next).
type exporter struct {
	o         ExportOptions
	w         io.Writer // the samples
	step      time.Duration
	cur, next *Screen
	tick      time.Duration // the next look at the picture
	last      time.Duration // the last picture encoded
	lastKey   time.Duration
	enc       FrameEncoder
	mp4       *h264enc.MP4Writer
	st        ExportStats
	frame     []byte // the picture at the video's size, when it differs
	out       []byte
}

func (x *exporter) close() {
	if x.enc != nil {
		x.enc.Close()
	}
}

// feed gives a segment its bytes; a segment that cannot be decoded is
// counted once and keeps its last picture.
func (x *exporter) feed(s *Screen, b []byte) {
	if s == nil || s.err != nil {
		return
	}
	if _, err := s.Write(b); err != nil {
		x.st.Undecodable++
	}
}

func (x *exporter) apply(rec DesktopRecord) {
	switch rec.Type {
	case SegmentStart:
		s := &Screen{}
		switch {
		case x.cur == nil:
			x.cur = s
		case x.next != nil: // a segment that never took over
			x.cur, x.next = x.next, s
			x.cur.Changed = true
		default:
			x.next = s
		}
		x.feed(s, rec.Data)
	case SegmentData:
		if x.next != nil {
			x.feed(x.next, rec.Data)
		} else {
			x.feed(x.cur, rec.Data)
		}
	case PreviousData:
		if x.next != nil {
			x.feed(x.cur, rec.Data)
		}
	case SegmentEnd:
		if x.next != nil {
			x.cur, x.next = x.next, nil
			x.cur.Changed = true
		}
	}
}

// until looks at the picture at every tick before t.
func (x *exporter) until(t time.Duration) error {
	for ; x.tick < t; x.tick += x.step {
		s := x.cur
		if s == nil || !s.Started() || !s.Changed {
			continue
		}
		s.Changed = false
		if err := x.encode(s, x.tick); err != nil {
			return err
		}
	}
	return nil
}

func (x *exporter) encode(s *Screen, at time.Duration) error {
	if x.enc == nil {
		// H.264 4:2:0 wants even sides; h264enc at least MinSize.
		w, h := max((s.W+1)&^1, h264enc.MinSize), max((s.H+1)&^1, h264enc.MinSize)
		enc, err := x.o.NewEncoder(w, h, x.o.FPS)
		if err != nil {
			return fmt.Errorf("record: export: %w", err)
		}
		x.enc = enc
		if x.mp4, err = h264enc.NewMP4Writer(x.w, w, h); err != nil {
			return err
		}
		x.st.Width, x.st.Height = w, h
	}
	pix, stride := s.Pix, 4*s.W
	if s.W != x.st.Width || s.H != x.st.Height {
		pix, stride = x.fit(s), 4*x.st.Width
	}
	key := x.st.Frames == 0 || at-x.lastKey >= x.o.KeyEvery
	var err error
	x.out, key, err = x.enc.Encode(x.out[:0], pix, stride, key)
	if err != nil {
		return fmt.Errorf("record: export: %w", err)
	}
	if key {
		x.lastKey = at
	}
	if err := x.mp4.WriteFrame(x.out, key, at); err != nil {
		return err
	}
	x.st.Frames++
	x.last = at
	if x.mp4.Samples() > x.o.MaxBytes {
		return fmt.Errorf("%w (%d bytes)", ErrExportTooLarge, x.o.MaxBytes)
	}
	return nil
}

// fit is s's picture at the video's size: cut, or padded with black.
func (x *exporter) fit(s *Screen) []byte {
	w, h := x.st.Width, x.st.Height
	if x.frame == nil {
		x.frame = make([]byte, w*h*4)
	}
	clear(x.frame)
	for y := range min(h, s.H) {
		copy(x.frame[y*w*4:(y*w+min(w, s.W))*4], s.Pix[y*s.W*4:])
	}
	return x.frame
}
