package record

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A desktop recording is what an RFB viewer of the desktop is sent, as
// it is sent, timestamped: the recorder is a viewer of its own (an
// in-process connection to the RFB server, with noVNC's pixel format
// and default settings, so it shares the encoding of live viewers that
// have them). Every Keyframe it connects again: a new connection starts
// from a full picture with fresh compression streams, so playback can
// start there. The file (integers big-endian):
//
//	"DESKREC1", u32 n, n bytes of JSON (DesktopHeader)
//	records: u8 type, u32 milliseconds since the start, u32 n, n bytes
//	  'S' a segment starts: a new connection, the server's bytes from its
//	      ProtocolVersion on (a noVNC RFB fed them connects and draws)
//	  'D' more of the latest segment's bytes
//	  'P' more of the previous segment's bytes: it goes on for a while
//	      after the next has started (overlap), until
//	  'E' the previous segment has ended (no bytes): playback switches to
//	      the latest segment from here, where its picture is exact
//
// Each record is written as it arrives, in one write: a crash leaves a
// file that plays up to its last record.

// DesktopMagic starts a desktop recording.
const DesktopMagic = "DESKREC1"

// Record types.
const (
	SegmentStart = 'S'
	SegmentData  = 'D'
	PreviousData = 'P'
	SegmentEnd   = 'E'
)

// Bounds of the format, for readers.
const (
	MaxDesktopHeader = 64 << 10
	MaxDesktopRecord = 4 << 20
	recordHeaderLen  = 9
	readChunk        = 256 << 10
)

// DesktopHeader is the JSON at the start of a desktop recording.
type DesktopHeader struct {
	Version       int       `json:"version"`
	Start         time.Time `json:"start"`
	KeyframeMS    int64     `json:"keyframe_ms"`
	KeyframeBytes int64     `json:"keyframe_bytes"`
	OverlapMS     int64     `json:"overlap_ms"`
	Quality       int       `json:"quality"`
	Compression   int       `json:"compression"`
}

// DesktopOptions are a desktop recording's settings.
type DesktopOptions struct {
	// Keyframe: a new segment (a full picture) at most this often
	// (default 30 s, at least 100 ms), once KeyframeBytes have been
	// recorded since the last (default 4 MiB; negative: none), and
	// sooner when eight times that has been: seeking replays from the
	// last keyframe, and a screen that holds still has nothing to
	// replay, so it gets no new one (a keyframe costs a viewer that is
	// followed a full update; measured, one every 10 s cost deskd 7% more
	// CPU on a scrolled photo gallery).
	Keyframe      time.Duration
	KeyframeBytes int64
	// Quality and Compression are the JPEG quality and zlib level asked
	// for, 0-9 (default noVNC's: 6 and 2, so live viewers that keep
	// noVNC's defaults share the recorder's encoding).
	Quality, Compression *int
	// MinInterval spaces the updates asked for (default 25 ms: 40 a
	// second at most).
	MinInterval time.Duration
	// Better, if set, is asked every second while a segment is not
	// ExactStart (a connection of the recorder's own): true starts the
	// next segment at once (a viewer appeared that Dial would follow).
	Better func() bool
	Log    *slog.Logger
}

// Dialer connects to the desktop's RFB server, or says why it cannot
// (the desktop is not running: the recording ends). A connection with
// an ExactStart method that says true (a tap of a live viewer,
// bridge.TapConn) starts with what that viewer shows: the segment before
// it ends at once, without the overlap.
type Dialer func(ctx context.Context) (net.Conn, error)

// exact says whether conn starts with exactly the picture the previous
// segment shows (see Dialer).
func exact(conn net.Conn) bool {
	e, ok := conn.(interface{ ExactStart() bool })
	return ok && e.ExactStart()
}

// DesktopRecorder writes a desktop recording until Close or the desktop
// goes away.
type DesktopRecorder struct {
	f      *File
	dial   Dialer
	o      DesktopOptions
	q, z   int
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why it ended, once done is closed

	mu     sync.Mutex // orders the records
	latest int        // the latest segment started
	rec    []byte     // the record being written
}

// ErrDesktopStopped: the desktop went away (its RFB server closed the
// connection and no other could be had).
var ErrDesktopStopped = errors.New("the desktop stopped")

// RecordDesktop starts recording into f (which it closes when done); the
// first connection is made before it returns, and if it fails f is
// closed and removed.
func RecordDesktop(ctx context.Context, f *File, dial Dialer, o DesktopOptions) (*DesktopRecorder, error) {
	if o.Keyframe <= 0 {
		o.Keyframe = 30 * time.Second
	}
	o.Keyframe = max(o.Keyframe, 100*time.Millisecond)
	if o.MinInterval <= 0 {
		o.MinInterval = 25 * time.Millisecond
	}
	if o.KeyframeBytes == 0 {
		o.KeyframeBytes = 4 << 20
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	d := &DesktopRecorder{f: f, dial: dial, o: o, q: 6, z: 2, start: time.Now(), done: make(chan struct{})}
	if o.Quality != nil {
		d.q = min(9, max(0, *o.Quality))
	}
	if o.Compression != nil {
		d.z = min(9, max(0, *o.Compression))
	}
	ctx, d.cancel = context.WithCancel(ctx)
	discard := func(err error) (*DesktopRecorder, error) {
		d.cancel()
		f.Close()
		f.s.Remove(f.ID)
		return nil, err
	}
	conn, err := dial(ctx)
	if err != nil {
		return discard(fmt.Errorf("record: desktop: %w", err))
	}
	hdr, _ := json.Marshal(DesktopHeader{Version: 1, Start: d.start.UTC(), KeyframeMS: o.Keyframe.Milliseconds(), KeyframeBytes: max(0, o.KeyframeBytes), OverlapMS: d.overlap().Milliseconds(), Quality: d.q, Compression: d.z})
	head := binary.BigEndian.AppendUint32([]byte(DesktopMagic), uint32(len(hdr)))
	if _, err := f.Write(append(head, hdr...)); err != nil {
		conn.Close()
		return discard(err)
	}
	go d.run(ctx, conn)
	return d, nil
}

// ID is the recording's id.
func (d *DesktopRecorder) ID() string { return d.f.ID }

// Done is closed when the recording has ended (Close, or by itself).
func (d *DesktopRecorder) Done() <-chan struct{} { return d.done }

// Err says why a recording that ended by itself did (nil after Close).
func (d *DesktopRecorder) Err() error {
	<-d.done
	return d.err
}

// Close ends the recording and waits for its file to be closed.
func (d *DesktopRecorder) Close() error {
	d.cancel()
	<-d.done
	return nil
}

// segment is one connection of a recording.
type segment struct {
	bytes atomic.Int64 // recorded so far
	n     int
	alone bool // the one before had ended: playback uses it at once
	conn  net.Conn
	done  chan struct{}
	err   error // why it ended, once done is closed
}

// overlap is how long a segment goes on after the next has started:
// the next starts from a full picture at the viewer's quality, and the
// screen's still parts become exact only after refineDelay (bridge), so
// playback keeps to the old one until it ends (Player.segmentAt).
func (d *DesktopRecorder) overlap() time.Duration { return min(time.Second, d.o.Keyframe/2) }

func (d *DesktopRecorder) run(ctx context.Context, conn net.Conn) {
	defer close(d.done)
	defer d.f.Close()
	var cur, prev *segment
	n := 0
	start := func(conn net.Conn, alone bool) *segment {
		s := &segment{n: n, alone: alone, conn: conn, done: make(chan struct{})}
		n++
		go func() { // ends when its connection closes
			defer close(s.done)
			s.err = d.segment(s)
		}()
		return s
	}
	stop := func(s *segment) {
		if s != nil {
			s.conn.Close()
			<-s.done
		}
	}
	// endPrev closes the previous segment and notes where it ended.
	endPrev := func() error {
		stop(prev)
		prev = nil
		return d.write(-1, SegmentEnd, nil)
	}
	defer func() { stop(prev); stop(cur) }()
	cur = start(conn, true)
	key := time.NewTimer(d.o.Keyframe)
	defer key.Stop()
	overlap := time.NewTimer(time.Hour)
	overlap.Stop()
	defer overlap.Stop()
	probe := time.NewTicker(time.Second)
	defer probe.Stop()
	failures := 0
	began := time.Now()
	forced := false // the next keyframe is due whatever was recorded
	for {
		var prevDone <-chan struct{}
		if prev != nil {
			prevDone = prev.done
		}
		select {
		case <-ctx.Done():
			return
		case <-prevDone:
			if isWriteError(prev.err) {
				d.fail(prev.err)
				return
			}
			if err := endPrev(); err != nil {
				d.fail(err)
				return
			}
		case <-overlap.C:
			if err := endPrev(); err != nil {
				d.fail(err)
				return
			}
		case <-cur.done:
			if isWriteError(cur.err) {
				d.fail(cur.err)
				return
			}
			// The server ended the connection: a desktop that stops, or
			// one started again (a new server). Connect again, after a
			// pause if connections keep ending at once.
			if time.Since(began) < time.Second {
				if failures++; failures >= 3 {
					d.end(cur.err)
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Second):
				}
			} else {
				failures = 0
			}
			c, err := d.dial(ctx)
			if err != nil {
				d.end(err)
				return
			}
			began, cur = time.Now(), start(c, prev == nil)
			key.Reset(d.o.Keyframe)
		case <-key.C:
			if !forced && cur.bytes.Load() < d.o.KeyframeBytes {
				key.Reset(d.o.Keyframe) // too little to replay yet
				continue
			}
			forced = false
			c, err := d.dial(ctx)
			if err != nil {
				d.end(err)
				return
			}
			if prev != nil { // a keyframe interval shorter than the overlap
				if err := endPrev(); err != nil {
					d.fail(err)
					return
				}
			}
			if exact(c) {
				// Its first picture is what the viewer shows: nothing to
				// overlap.
				stop(cur)
				if isWriteError(cur.err) {
					d.fail(cur.err)
					return
				}
				cur = start(c, true)
			} else {
				prev, cur = cur, start(c, false)
				overlap.Reset(d.overlap())
			}
			began = time.Now()
			key.Reset(d.o.Keyframe)
		case <-probe.C:
			// Connected on its own: a viewer it could follow starts the
			// next segment now; so does much to replay.
			if !exact(cur.conn) && d.o.Better != nil && d.o.Better() ||
				d.o.KeyframeBytes > 0 && cur.bytes.Load() >= 8*d.o.KeyframeBytes {
				forced = true
				key.Reset(0)
			}
		}
	}
}

// fail ends the recording on a failure to write it.
func (d *DesktopRecorder) fail(err error) {
	d.err = err
	d.o.Log.Warn("desktop recording stopped", "id", d.f.ID, "err", err)
}

// end ends the recording when the desktop is gone.
func (d *DesktopRecorder) end(err error) {
	if err != nil && !errors.Is(err, context.Canceled) {
		d.err = fmt.Errorf("%w: %w", ErrDesktopStopped, err)
		d.o.Log.Info("desktop recording ended", "id", d.f.ID, "why", d.err)
	}
}

// writeError is a failure to write the file (as opposed to one of the
// connection).
type writeError struct{ err error }

func (e writeError) Error() string { return "record: " + e.err.Error() }
func (e writeError) Unwrap() error { return e.err }

func isWriteError(err error) bool { var w writeError; return errors.As(err, &w) }

// write appends one record of segment n (-1: none): its start, data of
// the latest segment or of the one before it (the overlap; data of an
// older one is dropped), or the previous segment's end. Records are
// timed and written in one order under d.mu.
func (d *DesktopRecorder) write(n int, typ byte, p []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case typ == SegmentStart:
		d.latest = n
	case typ == SegmentEnd:
	case n == d.latest:
		typ = SegmentData
	case n == d.latest-1:
		typ = PreviousData
	default:
		return nil
	}
	ms := time.Since(d.start).Milliseconds()
	// One write a record (a crash leaves whole ones), through a buffer
	// kept across records rather than one made for each.
	rec := append(d.rec[:0], typ)
	rec = binary.BigEndian.AppendUint32(rec, uint32(ms))
	rec = binary.BigEndian.AppendUint32(rec, uint32(len(p)))
	rec = append(rec, p...)
	d.rec = rec
	if _, err := d.f.Write(rec); err != nil {
		return writeError{err}
	}
	return nil
}

// noVNC's pixel format: 32 bits, depth 24, little-endian, true colour,
// red at bit 0, green 8, blue 16.
var novncPixelFormat = []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 0, 8, 16, 0, 0, 0}

// setEncodings: CopyRect, Tight, Raw, JPEG quality, compression level,
// DesktopSize, LastRect, ExtendedDesktopSize. No cursor shape (a
// recording has no pointer to draw it at), no fences or continuous
// updates (the recorder asks for each update), no H.264 or extended
// clipboard.
func setEncodings(q, z int) []byte {
	encs := []int32{1, 7, 0, -32 + int32(q), -256 + int32(z), -223, -224, -308}
	b := []byte{2, 0}
	b = binary.BigEndian.AppendUint16(b, uint16(len(encs)))
	for _, e := range encs {
		b = binary.BigEndian.AppendUint32(b, uint32(e))
	}
	return b
}

func updateRequest(incremental bool) []byte {
	inc := byte(0)
	if incremental {
		inc = 1
	}
	// The whole screen whatever its size (a resize changes it): the
	// server cuts a request to the screen.
	return []byte{3, inc, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
}

// segment records one connection until it closes (run closes it, or
// the server does).
func (d *DesktopRecorder) segment(s *segment) error {
	conn := s.conn
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(conn, readChunk)
	hs, err := clientHandshake(br, conn)
	if err != nil {
		return fmt.Errorf("record: desktop handshake: %w", err)
	}
	if err := d.write(s.n, SegmentStart, hs); err != nil {
		return err
	}
	if s.alone && s.n > 0 {
		if err := d.write(-1, SegmentEnd, nil); err != nil {
			return err
		}
	}
	setup := append(append(append([]byte{}, novncPixelFormat...), setEncodings(d.q, d.z)...), updateRequest(false)...)
	if _, err := conn.Write(setup); err != nil {
		return fmt.Errorf("record: desktop: %w", err)
	}
	conn.SetDeadline(time.Time{})

	// The requester asks for the next update once some of the last one
	// has come, MinInterval apart: one update in flight, none asked for
	// while the screen is still. It ends with the segment. A tap needs
	// none: it brings what its viewer asks for.
	asks := make(chan struct{}, 1)
	segDone := make(chan struct{})
	var wg sync.WaitGroup
	if !exact(conn) {
		wg.Add(1)
		go d.requester(conn, asks, segDone, &wg)
	}
	defer wg.Wait()
	defer close(segDone)

	buf := make([]byte, readChunk)
	for {
		n, rerr := br.Read(buf)
		if n > 0 {
			if err := d.write(s.n, SegmentData, buf[:n]); err != nil {
				return err
			}
			s.bytes.Add(int64(n))
			select {
			case asks <- struct{}{}: // (nobody takes it from a tap's)
			default:
			}
		}
		if rerr != nil {
			return fmt.Errorf("record: desktop: %w", rerr)
		}
	}
}

// requester writes an update request for each ask, MinInterval apart,
// until done.
func (d *DesktopRecorder) requester(conn net.Conn, asks, done <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-asks:
		}
		if _, err := conn.Write(updateRequest(true)); err != nil {
			return
		}
		tick.Reset(d.o.MinInterval)
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

// clientHandshake runs RFB 3.8's handshake as a client asking for no
// security, and returns the server's bytes of it.
func clientHandshake(br *bufio.Reader, w io.Writer) ([]byte, error) {
	var got bytes.Buffer
	read := func(n int) ([]byte, error) {
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		got.Write(b)
		return b, nil
	}
	v, err := read(12)
	if err != nil {
		return nil, err
	}
	if string(v) != "RFB 003.008\n" {
		return nil, fmt.Errorf("server speaks %q, not RFB 3.8", v)
	}
	if _, err := io.WriteString(w, "RFB 003.008\n"); err != nil {
		return nil, err
	}
	n, err := read(1)
	if err != nil {
		return nil, err
	}
	if n[0] == 0 {
		return nil, errors.New("server refused the connection")
	}
	types, err := read(int(n[0]))
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(types, []byte{1}) {
		return nil, fmt.Errorf("server asks for security types %v, not none", types)
	}
	if _, err := w.Write([]byte{1}); err != nil {
		return nil, err
	}
	res, err := read(4)
	if err != nil {
		return nil, err
	}
	if binary.BigEndian.Uint32(res) != 0 {
		return nil, errors.New("server refused the security handshake")
	}
	if _, err := w.Write([]byte{1}); err != nil { // ClientInit: shared
		return nil, err
	}
	si, err := read(24)
	if err != nil {
		return nil, err
	}
	nameLen := binary.BigEndian.Uint32(si[20:])
	if nameLen > 4096 {
		return nil, fmt.Errorf("server name of %d bytes", nameLen)
	}
	if _, err := read(int(nameLen)); err != nil {
		return nil, err
	}
	return got.Bytes(), nil
}

// DesktopRecord is one record of a desktop recording.
type DesktopRecord struct {
	Type byte
	At   time.Duration // since the recording's start
	Data []byte
}

// DesktopReader reads a desktop recording.
type DesktopReader struct {
	Header   DesktopHeader
	r        *bufio.Reader
	last     uint32
	n        int
	segments int
}

// ErrBadRecording: what is read is not a desktop recording, or is damaged.
var ErrBadRecording = errors.New("not a deskd desktop recording")

// NewDesktopReader reads the header.
func NewDesktopReader(r io.Reader) (*DesktopReader, error) {
	br := bufio.NewReader(r)
	var head [12]byte
	if _, err := io.ReadFull(br, head[:]); err != nil || string(head[:8]) != DesktopMagic {
		return nil, fmt.Errorf("%w: no %s header", ErrBadRecording, DesktopMagic)
	}
	n := binary.BigEndian.Uint32(head[8:])
	if n > MaxDesktopHeader {
		return nil, fmt.Errorf("%w: a header of %d bytes", ErrBadRecording, n)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(br, hdr); err != nil {
		return nil, fmt.Errorf("%w: header cut short", ErrBadRecording)
	}
	d := &DesktopReader{r: br}
	if err := json.Unmarshal(hdr, &d.Header); err != nil || d.Header.Version != 1 {
		return nil, fmt.Errorf("%w: header %.80q", ErrBadRecording, hdr)
	}
	return d, nil
}

// Next returns the next record: io.EOF after the last, and
// io.ErrUnexpectedEOF for a last record cut short (a crash while it was
// written: what came before plays).
func (d *DesktopReader) Next() (DesktopRecord, error) {
	var h [recordHeaderLen]byte
	if _, err := io.ReadFull(d.r, h[:]); err != nil {
		return DesktopRecord{}, err
	}
	typ, ms, n := h[0], binary.BigEndian.Uint32(h[1:]), binary.BigEndian.Uint32(h[5:])
	switch {
	case typ != SegmentStart && typ != SegmentData && typ != PreviousData && typ != SegmentEnd:
		return DesktopRecord{}, fmt.Errorf("%w: record %d has type %d", ErrBadRecording, d.n, typ)
	case (typ == PreviousData || typ == SegmentEnd) && d.segments < 2:
		return DesktopRecord{}, fmt.Errorf("%w: record %d belongs to no previous segment", ErrBadRecording, d.n)
	case d.n == 0 && typ != SegmentStart:
		return DesktopRecord{}, fmt.Errorf("%w: it does not start with a segment", ErrBadRecording)
	case n > MaxDesktopRecord:
		return DesktopRecord{}, fmt.Errorf("%w: record %d of %d bytes", ErrBadRecording, d.n, n)
	case ms < d.last:
		return DesktopRecord{}, fmt.Errorf("%w: record %d goes back in time", ErrBadRecording, d.n)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(d.r, data); err != nil {
		return DesktopRecord{}, io.ErrUnexpectedEOF
	}
	d.last = ms
	d.n++
	if typ == SegmentStart {
		d.segments++
	}
	return DesktopRecord{Type: typ, At: time.Duration(ms) * time.Millisecond, Data: data}, nil
}
