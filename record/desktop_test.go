package record

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// fakeRFB is the server side of one recorder connection: RFB 3.8's
// handshake, then an update ("frame N") for each FramebufferUpdateRequest
// while frames last. It counts the requests.
type fakeRFB struct {
	frames   int          // updates it has to give per connection
	requests atomic.Int32 // update requests, all connections
	conns    atomic.Int32
	refuse   atomic.Bool // dials fail
	exact    atomic.Bool // connections say ExactStart
}

type exactConn struct{ net.Conn }

func (exactConn) ExactStart() bool { return true }

var fakeInit = func() []byte {
	b := []byte("RFB 003.008\n")
	b = append(b, 1, 1)                                                    // one security type: none
	b = append(b, 0, 0, 0, 0)                                              // SecurityResult OK
	b = append(b, 0, 64, 0, 32)                                            // 64x32
	b = append(b, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0) // pixel format
	b = binary.BigEndian.AppendUint32(b, 4)
	return append(b, "fake"...)
}()

func (f *fakeRFB) dial(ctx context.Context) (net.Conn, error) {
	if f.refuse.Load() {
		return nil, errors.New("no desktop")
	}
	a, b := net.Pipe()
	f.conns.Add(1)
	go f.serve(b)
	if f.exact.Load() {
		return exactConn{a}, nil
	}
	return a, nil
}

func (f *fakeRFB) serve(c net.Conn) {
	defer c.Close()
	hs := fakeInit
	w := func(p []byte) bool { _, err := c.Write(p); return err == nil }
	r := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			return nil
		}
		return b
	}
	if !w(hs[:12]) || r(12) == nil || !w(hs[12:14]) || r(1) == nil || !w(hs[14:18]) || r(1) == nil || !w(hs[18:]) {
		return
	}
	sent := 0
	for {
		t := r(1)
		if t == nil {
			return
		}
		switch t[0] {
		case 0:
			r(19)
		case 2:
			n := r(3)
			if n == nil {
				return
			}
			r(4 * int(binary.BigEndian.Uint16(n[1:])))
		case 3:
			r(9)
			f.requests.Add(1)
			if sent < f.frames {
				sent++
				if !w([]byte(fmt.Sprintf("frame %d;", sent))) {
					return
				}
			}
		default:
			return
		}
	}
}

// readDesktop reads a recording's segments: the bytes of each.
func readDesktop(t *testing.T, s *Store, id string) (DesktopHeader, [][]byte, error) {
	t.Helper()
	f, _, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewDesktopReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var segs [][]byte
	var ends []bool
	for {
		rec, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return r.Header, segs, err
		}
		switch rec.Type {
		case SegmentStart:
			segs = append(segs, nil)
			ends = append(ends, false)
		case PreviousData:
			if ends[len(segs)-2] {
				t.Errorf("data of segment %d after its end", len(segs)-2)
			}
			segs[len(segs)-2] = append(segs[len(segs)-2], rec.Data...)
			continue
		case SegmentEnd:
			ends[len(segs)-2] = true
			continue
		}
		segs[len(segs)-1] = append(segs[len(segs)-1], rec.Data...)
	}
}

// waitEnded fails the test with why unless the recording ends in time.
func waitEnded(t *testing.T, d *DesktopRecorder, within time.Duration, why string) {
	t.Helper()
	select {
	case <-d.Done():
	case <-time.After(within):
		t.Fatal(why)
	}
}

func TestDesktopRecorder(t *testing.T) {
	s := openStore(t, 1<<20)
	srv := &fakeRFB{frames: 5}
	f, err := s.Create(Desktop)
	if err != nil {
		t.Fatal(err)
	}
	d, err := RecordDesktop(context.Background(), f, srv.dial, DesktopOptions{Keyframe: 300 * time.Millisecond, KeyframeBytes: -1, MinInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	d.Close()
	if err := d.Err(); err != nil {
		t.Fatalf("Err after Close: %v", err)
	}
	hdr, segs, err := readDesktop(t, s, d.ID())
	if err != nil {
		t.Fatal(err)
	}
	if hdr.KeyframeMS != 300 || hdr.Quality != 6 || hdr.Compression != 2 || time.Since(hdr.Start) > 5*time.Second {
		t.Errorf("header %+v", hdr)
	}
	// A segment every 300 ms, each a whole connection: the server's
	// handshake, then the updates it gave, each asked for.
	if len(segs) < 3 || len(segs) > 5 || int(srv.conns.Load()) != len(segs) {
		t.Fatalf("%d segments in 1.1 s, %d connections", len(segs), srv.conns.Load())
	}
	want := append(append([]byte{}, fakeInit...), "frame 1;frame 2;frame 3;frame 4;frame 5;"...)
	for i, seg := range segs[:len(segs)-1] {
		if !bytes.Equal(seg, want) {
			t.Errorf("segment %d: %q, want %q", i, seg, want)
		}
	}
	// Nothing is asked for while nothing comes: one request beyond the
	// updates given (it waits at the server), per connection.
	if n := int(srv.requests.Load()); n > len(segs)*6 {
		t.Errorf("%d update requests for %d segments of 5 updates", n, len(segs))
	}
	if info, _ := s.List(); len(info) != 1 || info[0].Kind != Desktop || info[0].Active {
		t.Errorf("list: %+v", info)
	}
}

func TestDesktopRecorderEnds(t *testing.T) {
	t.Run("no desktop", func(t *testing.T) {
		s := openStore(t, 1<<20)
		srv := &fakeRFB{}
		srv.refuse.Store(true)
		f, _ := s.Create(Desktop)
		if _, err := RecordDesktop(context.Background(), f, srv.dial, DesktopOptions{}); err == nil {
			t.Fatal("recording without a desktop started")
		}
		if l, _ := s.List(); len(l) != 0 {
			t.Errorf("an empty recording was left: %+v", l)
		}
	})
	t.Run("the desktop stops", func(t *testing.T) {
		s := openStore(t, 1<<20)
		srv := &fakeRFB{frames: 2}
		f, _ := s.Create(Desktop)
		d, err := RecordDesktop(context.Background(), f, srv.dial, DesktopOptions{Keyframe: 200 * time.Millisecond, KeyframeBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		srv.refuse.Store(true)
		waitEnded(t, d, 3*time.Second, "the recording did not end with the desktop")
		if err := d.Err(); !errors.Is(err, ErrDesktopStopped) {
			t.Errorf("Err: %v", err)
		}
		if _, segs, err := readDesktop(t, s, d.ID()); err != nil || len(segs) < 2 {
			t.Errorf("%d segments, %v", len(segs), err)
		}
	})
	t.Run("the quota", func(t *testing.T) {
		s := openStore(t, 4096)
		srv := &fakeRFB{frames: 1 << 20}
		f, _ := s.Create(Desktop)
		d, err := RecordDesktop(context.Background(), f, srv.dial, DesktopOptions{MinInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		waitEnded(t, d, 5*time.Second, "the recording did not stop at the quota")
		if err := d.Err(); !errors.Is(err, ErrQuota) {
			t.Errorf("Err: %v", err)
		}
		if s.Bytes() > 4096 {
			t.Errorf("%d bytes kept", s.Bytes())
		}
		if _, _, err := readDesktop(t, s, d.ID()); err != nil {
			t.Errorf("the file up to the quota: %v", err)
		}
	})
}

// A recording cut anywhere (a crash) reads up to its last whole record.
func TestDesktopReaderCut(t *testing.T) {
	s := openStore(t, 1<<20)
	srv := &fakeRFB{frames: 3}
	f, _ := s.Create(Desktop)
	d, err := RecordDesktop(context.Background(), f, srv.dial, DesktopOptions{Keyframe: 100 * time.Millisecond, KeyframeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond)
	d.Close()
	full, err := os.ReadFile(filepath.Join(s.root.Name(), d.ID()+".deskrec"))
	if err != nil {
		t.Fatal(err)
	}
	whole := 0
	r, _ := NewDesktopReader(bytes.NewReader(full))
	for {
		if _, err := r.Next(); err != nil {
			break
		}
		whole++
	}
	for cut := len(full) - 1; cut > len(full)-200 && cut > 40; cut-- {
		r, err := NewDesktopReader(bytes.NewReader(full[:cut]))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			_, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("cut at %d: %v", cut, err)
				}
				break
			}
			n++
		}
		if n >= whole || n < whole-10 {
			t.Fatalf("cut at %d of %d: %d records of %d", cut, len(full), n, whole)
		}
	}
}

func TestDesktopReaderBad(t *testing.T) {
	rec := func(typ byte, ms, n uint32, data string) []byte {
		b := []byte{typ}
		b = binary.BigEndian.AppendUint32(b, ms)
		b = binary.BigEndian.AppendUint32(b, n)
		return append(b, data...)
	}
	head := func(json string) []byte {
		return append(binary.BigEndian.AppendUint32([]byte(DesktopMagic), uint32(len(json))), json...)
	}
	good := head(`{"version":1}`)
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"magic", []byte("DESKREC2\x00\x00\x00\x02{}")},
		{"huge header", binary.BigEndian.AppendUint32([]byte(DesktopMagic), 1<<30)},
		{"version", head(`{"version":2}`)},
		{"not json", head(`{version`)},
		{"data first", append(good, rec('D', 0, 1, "x")...)},
		{"type", append(good, rec('X', 0, 1, "x")...)},
		{"huge record", append(good, rec('S', 0, MaxDesktopRecord+1, "x")...)},
		{"back in time", append(append(good, rec('S', 10, 1, "x")...), rec('D', 9, 1, "x")...)},
		{"previous of none", append(append(good, rec('S', 0, 1, "x")...), rec('P', 1, 1, "x")...)},
		{"end of none", append(append(good, rec('S', 0, 1, "x")...), rec('E', 1, 0, "")...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewDesktopReader(bytes.NewReader(tc.in))
			for i := 0; err == nil && i < 3; i++ {
				_, err = r.Next()
			}
			if !errors.Is(err, ErrBadRecording) {
				t.Errorf("got %v, want ErrBadRecording", err)
			}
		})
	}
}

func FuzzDesktopReader(f *testing.F) {
	var seed bytes.Buffer
	seed.WriteString(DesktopMagic)
	seed.Write([]byte{0, 0, 0, 13})
	seed.WriteString(`{"version":1}`)
	seed.Write([]byte{'S', 0, 0, 0, 1, 0, 0, 0, 3, 'a', 'b', 'c', 'D', 0, 0, 0, 2, 0, 0, 0, 1, 'd'})
	f.Add(seed.Bytes())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := NewDesktopReader(bytes.NewReader(b))
		if err != nil {
			return
		}
		var last time.Duration
		for i := 0; ; i++ {
			rec, err := r.Next()
			if err != nil {
				return
			}
			if i == 0 && rec.Type != SegmentStart || rec.At < last || len(rec.Data) > MaxDesktopRecord || len(rec.Data) > len(b) {
				t.Fatalf("record %d: %c at %v (%d bytes) after %v", i, rec.Type, rec.At, len(rec.Data), last)
			}
			last = rec.At
		}
	})
}

// A recorder on its own connection moves to one that follows a viewer
// (ExactStart) as soon as Better says there is one; between such
// connections there is no overlap.
func TestDesktopRecorderFollows(t *testing.T) {
	s := openStore(t, 1<<20)
	srv := &fakeRFB{frames: 2}
	f, _ := s.Create(Desktop)
	d, err := RecordDesktop(context.Background(), f, srv.dial, DesktopOptions{Keyframe: 1500 * time.Millisecond, KeyframeBytes: -1,
		Better: func() bool { return srv.exact.Load() }})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	srv.exact.Store(true) // a viewer to follow: the next segment within a second
	time.Sleep(1200 * time.Millisecond)
	if n := srv.conns.Load(); n != 2 {
		t.Fatalf("%d connections 1.4 s in: want the second at once when Better says so", n)
	}
	time.Sleep(1600 * time.Millisecond) // a keyframe between followers
	d.Close()
	file, _, _ := s.Get(d.ID())
	defer file.Close()
	r, err := NewDesktopReader(file)
	if err != nil {
		t.Fatal(err)
	}
	var types []byte
	for {
		rec, err := r.Next()
		if err != nil {
			break
		}
		if rec.Type != SegmentData {
			types = append(types, rec.Type)
		}
	}
	// S (own), S E (follows: the first ends at once), S E (keyframe).
	if got := string(types); got != "SSESE" {
		t.Fatalf("record types %q, want SSESE (no P: no overlap)", got)
	}
}

// A screen that holds still gets no new keyframe: too little was
// recorded since the last to be worth replaying from a new one.
func TestDesktopRecorderKeyframeBytes(t *testing.T) {
	s := openStore(t, 1<<20)
	srv := &fakeRFB{frames: 3}
	f, _ := s.Create(Desktop)
	d, err := RecordDesktop(context.Background(), f, srv.dial, DesktopOptions{Keyframe: 150 * time.Millisecond, KeyframeBytes: 1000})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	d.Close()
	if n := srv.conns.Load(); n != 1 {
		t.Fatalf("%d connections for 24 bytes of updates: keyframes with nothing to replay", n)
	}
	if hdr, _, _ := readDesktop(t, s, d.ID()); hdr.KeyframeBytes != 1000 {
		t.Errorf("header %+v", hdr)
	}
}
