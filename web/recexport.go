package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubepod/deskd/record"
)

// GET record/{id}/mp4[?fps=N]: a desktop recording as an MP4 (H.264,
// x264 in a child process as the GUI user; record.ExportMP4 draws the
// pictures from the recording itself, the replay page's way). One export
// runs at a time (429 while one does); the last one made of a finished
// recording is kept for the Range requests a <video> makes and for the
// next download, until another is made or the daemon stops.

// mp4Export is the export in progress and the last one kept.
type mp4Export struct {
	busy atomic.Bool
	mu   sync.Mutex
	key  string // what was exported: id, fps, and the file's size and time
	path string // "": none kept
}

// MP4 export bounds.
const (
	exportDefaultFPS = 10
	exportMaxFPS     = 30
)

func (s *Server) recordMP4(w http.ResponseWriter, r *http.Request) {
	if s.cfg.ExportVideo == nil {
		apiError(w, http.StatusNotImplemented, "MP4 export needs x264 (Debian's x264 package), which is not installed")
		return
	}
	fps := exportDefaultFPS
	if v := r.URL.Query().Get("fps"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > exportMaxFPS {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("fps: want 1 to %d, got %.20q", exportMaxFPS, v))
			return
		}
		fps = n
	}
	id := r.PathValue("id")
	f, info, ok := s.openRecording(w, r)
	if !ok {
		return
	}
	defer f.Close()
	if info.Kind != record.Desktop {
		apiError(w, http.StatusBadRequest, "only desktop recordings export to MP4")
		return
	}
	key := fmt.Sprintf("%s/%d/%d/%d", id, fps, info.Size, info.Modified.UnixNano())
	if !info.Active {
		if out, ok := s.mp4.kept(key); ok {
			defer out.Close()
			serveMP4(w, r, id, out, info.Modified)
			return
		}
	}
	if !s.mp4.busy.CompareAndSwap(false, true) {
		w.Header().Set("Retry-After", "5")
		apiError(w, http.StatusTooManyRequests, "an MP4 export is running: one at a time")
		return
	}
	defer s.mp4.busy.Store(false)
	// Ends with the request, or with the daemon.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.base, cancel)
	defer stop()
	start := time.Now()
	out, st, err := s.exportMP4(ctx, io.LimitReader(f, info.Size), fps)
	switch {
	case ctx.Err() != nil:
		return // the client left, or the daemon stops
	case errors.Is(err, record.ErrBadRecording):
		apiError(w, http.StatusUnprocessableEntity, err.Error())
		return
	case errors.Is(err, record.ErrExportTooLarge):
		apiError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	case err != nil:
		s.log.Warn("MP4 export failed", "id", id, "err", err)
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer out.Close()
	s.log.Info("MP4 export", "id", id, "fps", fps, "frames", st.Frames, "size", fmt.Sprintf("%dx%d", st.Width, st.Height),
		"duration", st.Duration, "bytes", st.Bytes, "undecodable_segments", st.Undecodable, "took", time.Since(start).Round(time.Millisecond))
	if info.Active {
		os.Remove(out.Name()) // a recording still growing: not kept
	} else {
		s.mp4.keep(key, out.Name())
	}
	serveMP4(w, r, id, out, info.Modified)
}

// exportMP4 writes the export to a new temporary file and returns it
// open.
func (s *Server) exportMP4(ctx context.Context, rec io.Reader, fps int) (*os.File, record.ExportStats, error) {
	dir := cmp.Or(s.cfg.ExportDir, os.TempDir())
	scratch, err := os.CreateTemp(dir, "export-*.h264")
	if err != nil {
		return nil, record.ExportStats{}, fmt.Errorf("export: %w", err)
	}
	defer func() { scratch.Close(); os.Remove(scratch.Name()) }()
	out, err := os.CreateTemp(dir, "export-*.mp4")
	if err != nil {
		return nil, record.ExportStats{}, fmt.Errorf("export: %w", err)
	}
	// An export is bounded as the recordings are together (its files may
	// be in a tmpfs: memory): none of them can be larger.
	st, err := record.ExportMP4(ctx, rec, out, scratch, record.ExportOptions{FPS: fps, NewEncoder: s.cfg.ExportVideo,
		MaxBytes: s.cfg.Recordings.MaxBytes()})
	if err != nil {
		out.Close()
		os.Remove(out.Name())
		return nil, st, err
	}
	return out, st, nil
}

func serveMP4(w http.ResponseWriter, r *http.Request, id string, f *os.File, modified time.Time) {
	h := w.Header()
	h.Set("Content-Type", "video/mp4")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": id + ".mp4"}))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, "", modified, f)
}

// kept opens the export kept for key, if it is the one kept.
func (e *mp4Export) kept(key string) (*os.File, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.path == "" || e.key != key {
		return nil, false
	}
	f, err := os.Open(e.path)
	return f, err == nil
}

// keep makes path the export kept, removing the one before (a reader of
// it keeps its open file).
func (e *mp4Export) keep(key, path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.path != "" {
		os.Remove(e.path)
	}
	e.key, e.path = key, path
}

func (e *mp4Export) close() { e.keep("", "") }
