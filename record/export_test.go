package record

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cubepod/deskd/h264enc"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/proc"
)

// recordingOf makes a desktop recording of the given records.
func recordingOf(t *testing.T, recs ...DesktopRecord) []byte {
	t.Helper()
	hdr, _ := json.Marshal(DesktopHeader{Version: 1, Start: time.Now()})
	b := append([]byte(DesktopMagic), binary.BigEndian.AppendUint32(nil, uint32(len(hdr)))...)
	b = append(b, hdr...)
	for _, r := range recs {
		b = append(b, r.Type)
		b = binary.BigEndian.AppendUint32(b, uint32(r.At.Milliseconds()))
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.Data)))
		b = append(b, r.Data...)
	}
	return b
}

// fillUpdate is an update painting a rectangle one colour.
func fillUpdate(x, y, w, h int, r, g, b byte) []byte {
	return (&rfbStream{}).update(1).rect(x, y, w, h, 7, 0x80, r, g, b).b
}

// x264Encoders starts real x264 children for exports.
func x264Encoders(t *testing.T, started *int) func(w, h, fps int) (FrameEncoder, error) {
	testenv.LookPath(t, "x264")
	x, sb, err := h264enc.Find("")
	if err != nil {
		t.Fatal(err)
	}
	sp := proc.NewSpawner()
	t.Cleanup(sp.Close)
	return func(w, h, fps int) (FrameEncoder, error) {
		*started++
		return h264enc.Start(h264enc.Config{X264: x, Stdbuf: sb, Width: w, Height: h, FPS: fps,
			Preset: "veryfast", Dir: t.TempDir(), Spawner: sp})
	}
}

func export(t *testing.T, rec []byte, o ExportOptions) ([]byte, ExportStats, error) {
	t.Helper()
	scratch, err := os.Create(filepath.Join(t.TempDir(), "samples"))
	if err != nil {
		t.Fatal(err)
	}
	defer scratch.Close()
	var out bytes.Buffer
	st, err := ExportMP4(t.Context(), bytes.NewReader(rec), &out, scratch, o)
	return out.Bytes(), st, err
}

// TestExportMP4: the video follows the recording's clock and its
// segments as the replay page does (the next segment shows from its
// 'E'), encodes a picture only when it changed, is the first segment's
// size made even, and has its index before the pictures.
func TestExportMP4(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	odd := append(serverHandshake(63, 47), fillUpdate(0, 0, 63, 47, 200, 0, 0)...)
	second := append(serverHandshake(80, 40), fillUpdate(0, 0, 80, 40, 0, 0, 200)...)
	rec := recordingOf(t,
		DesktopRecord{Type: SegmentStart, At: 0, Data: odd},
		DesktopRecord{Type: SegmentData, At: ms(500), Data: fillUpdate(0, 0, 10, 10, 0, 200, 0)},
		DesktopRecord{Type: SegmentStart, At: ms(1000), Data: second},
		DesktopRecord{Type: PreviousData, At: ms(1100), Data: fillUpdate(10, 10, 10, 10, 9, 9, 9)},
		DesktopRecord{Type: SegmentEnd, At: ms(1230)},
		DesktopRecord{Type: SegmentData, At: ms(2010), Data: fillUpdate(0, 0, 4, 4, 1, 2, 3)},
		DesktopRecord{Type: SegmentData, At: ms(2050), Data: fillUpdate(0, 0, 16, 16, 250, 250, 250)},
	)
	started := 0
	out, st, err := export(t, rec, ExportOptions{FPS: 10, NewEncoder: x264Encoders(t, &started)})
	if err != nil {
		t.Fatal(err)
	}
	// Pictures at 0 (red), 500 (green corner), 1100 (the old segment's
	// last change), 1300 (the next segment, from its 'E' at 1230), 2100
	// (the two changes since the look at 2000: one picture), which shows
	// one look long.
	want := ExportStats{Width: 64, Height: 48, Frames: 5, Duration: ms(2200), Bytes: int64(len(out))}
	if st != want || started != 1 {
		t.Fatalf("stats %+v, want %+v (%d encoders)", st, want, started)
	}
	if len(out) < 16 || string(out[4:8]) != "ftyp" || !bytes.Contains(out[:200], []byte("moov")) {
		t.Fatalf("not an MP4 with its index first: %q", out[:min(len(out), 64)])
	}
	// A recording cut in its last record exports up to the one before.
	cut, st2, err := export(t, rec[:len(rec)-5], ExportOptions{FPS: 10, NewEncoder: x264Encoders(t, &started)})
	if err != nil || st2.Frames != 5 || st2.Duration != ms(2200) || len(cut) == 0 || bytes.Equal(cut, out) {
		t.Fatalf("a cut recording: %v, %+v", err, st2)
	}
}

// TestExportMP4Refuses: what is not a recording, holds no picture, or
// grows past the bound fails, and the encoder is never left running;
// a segment that cannot be decoded keeps its last picture and is
// counted.
func TestExportMP4Refuses(t *testing.T) {
	started := 0
	enc := x264Encoders(t, &started)
	ok := append(serverHandshake(64, 48), fillUpdate(0, 0, 64, 48, 1, 2, 3)...)
	if _, _, err := export(t, []byte("not a recording"), ExportOptions{NewEncoder: enc}); !errors.Is(err, ErrBadRecording) {
		t.Fatalf("garbage: %v", err)
	}
	empty := recordingOf(t, DesktopRecord{Type: SegmentStart, Data: []byte("RFB 003.008\n")})
	if _, _, err := export(t, empty, ExportOptions{NewEncoder: enc}); !errors.Is(err, ErrBadRecording) {
		t.Fatalf("no picture: %v", err)
	}
	if _, _, err := export(t, recordingOf(t, DesktopRecord{Type: SegmentStart, Data: ok}), ExportOptions{}); err == nil {
		t.Fatal("no encoder")
	}
	noisy := []DesktopRecord{{Type: SegmentStart, Data: ok}}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 30 {
		px := make([]byte, 64*48*4)
		for j := range px {
			px[j] = byte(rng.Uint32())
		}
		noisy = append(noisy, DesktopRecord{Type: SegmentData, At: time.Duration(i+1) * 100 * time.Millisecond,
			Data: (&rfbStream{}).update(1).rect(0, 0, 64, 48, 0, px...).b})
	}
	if _, _, err := export(t, recordingOf(t, noisy...), ExportOptions{NewEncoder: enc, MaxBytes: 2000}); !errors.Is(err, ErrExportTooLarge) {
		t.Fatalf("past the bound: %v", err)
	}
	damaged := recordingOf(t,
		DesktopRecord{Type: SegmentStart, Data: ok},
		DesktopRecord{Type: SegmentData, At: 200 * time.Millisecond, Data: []byte{77}},
		DesktopRecord{Type: SegmentData, At: 300 * time.Millisecond, Data: fillUpdate(0, 0, 4, 4, 1, 1, 1)},
		DesktopRecord{Type: SegmentStart, At: time.Second, Data: ok},
		DesktopRecord{Type: SegmentEnd, At: time.Second},
	)
	_, st, err := export(t, damaged, ExportOptions{NewEncoder: enc})
	if err != nil || st.Undecodable != 1 || st.Frames != 2 {
		t.Fatalf("a damaged segment: %v, %+v (want 1 undecodable, 2 pictures)", err, st)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	scratch, _ := os.Create(filepath.Join(t.TempDir(), "s"))
	defer scratch.Close()
	if _, err := ExportMP4(ctx, bytes.NewReader(damaged), &bytes.Buffer{}, scratch, ExportOptions{NewEncoder: enc}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
