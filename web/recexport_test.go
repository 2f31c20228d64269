package web

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cubepod/deskd/h264enc"
	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/proc"
	"github.com/cubepod/deskd/record"
)

// smallDesktopRecording is a recording of a 64x48 screen painted one
// colour, then another a second later.
func smallDesktopRecording() []byte {
	hdr := []byte(`{"version":1,"start":"2026-12-07T12:00:00Z"}`)
	b := append([]byte(record.DesktopMagic), binary.BigEndian.AppendUint32(nil, uint32(len(hdr)))...)
	b = append(b, hdr...)
	rec := func(typ byte, ms uint32, data []byte) {
		b = append(b, typ)
		b = binary.BigEndian.AppendUint32(b, ms)
		b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
		b = append(b, data...)
	}
	fill := func(r, g, bl byte) []byte {
		return []byte{0, 0, 0, 1, 0, 0, 0, 0, 0, 64, 0, 48, 0, 0, 0, 7, 0x80, r, g, bl}
	}
	hs := []byte("RFB 003.008\n\x01\x01\x00\x00\x00\x00\x00\x40\x00\x30 \x18\x00\x01\x00\xff\x00\xff\x00\xff\x10\x08\x00\x00\x00\x00\x00\x00\x00\x00")
	rec('S', 0, append(hs, fill(200, 0, 0)...))
	rec('D', 1000, fill(0, 0, 200))
	return b
}

// TestRecordMP4: the export route refuses what it cannot export, by
// scope, parameters, kind and content, says when no x264 is there or one
// export runs, and serves a real x264's MP4 with ranges, the second time
// from the export kept.
func TestRecordMP4(t *testing.T) {
	dir := t.TempDir()
	const desk, term, bad = "desktop-20261207T120000Z-0a1b2c3d", "terminal-20261207T120000Z-0a1b2c3d", "desktop-20261207T120001Z-0a1b2c3d"
	os.WriteFile(filepath.Join(dir, desk+".deskrec"), smallDesktopRecording(), 0o600)
	os.WriteFile(filepath.Join(dir, term+".cast"), []byte(`{"version":2,"width":80,"height":24}`+"\n"), 0o600)
	os.WriteFile(filepath.Join(dir, bad+".deskrec"), append([]byte(record.DesktopMagic), 0, 0, 0, 2, '{', '}'), 0o600)
	store, err := record.Open(dir, 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	testenv.LookPath(t, "x264")
	x, sb, err := h264enc.Find("")
	if err != nil {
		t.Fatal(err)
	}
	sp := proc.NewSpawner()
	t.Cleanup(sp.Close)
	var started atomic.Int32
	failing := atomic.Bool{}
	exportDir := t.TempDir()
	s := newServer(t, Config{PanelSecret: secret, SandboxID: "sb1", Recordings: store, ExportDir: exportDir,
		ExportVideo: func(w, h, fps int) (record.FrameEncoder, error) {
			started.Add(1)
			if failing.Load() {
				return nil, errors.New("no encoder today")
			}
			return h264enc.Start(h264enc.Config{X264: x, Stdbuf: sb, Width: w, Height: h, FPS: fps, Dir: t.TempDir(), Spawner: sp})
		}})
	none := newServer(t, Config{PanelSecret: secret, SandboxID: "sb1", Recordings: store})
	t.Cleanup(func() { s.Close(); none.Close(); store.Close() })
	full := "/panel/" + token(t, panel.Claims{SID: "sb1"})
	view := "/panel/" + token(t, panel.Claims{SID: "sb1", Scope: panel.ScopeView})
	get := func(srv *Server, path, rng string) (int, string, []byte) {
		req := httptest.NewRequest("GET", path, nil)
		req.Host = "example.com"
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		body, _ := io.ReadAll(rec.Body)
		return rec.Code, rec.Header().Get("Content-Type"), body
	}
	for _, tt := range []struct {
		name string
		srv  *Server
		path string
		want int
		has  string
	}{
		{"view token", s, view + "/record/" + desk + "/mp4", 403, ""},
		{"fps 0", s, full + "/record/" + desk + "/mp4?fps=0", 400, "fps"},
		{"fps 31", s, full + "/record/" + desk + "/mp4?fps=31", 400, "fps"},
		{"fps word", s, full + "/record/" + desk + "/mp4?fps=ten", 400, "fps"},
		{"fps huge", s, full + "/record/" + desk + "/mp4?fps=" + strings.Repeat("9", 100), 400, "fps"},
		{"bad id", s, full + "/record/etc-passwd/mp4", 400, "recording id"},
		{"long id", s, full + "/record/desktop-" + strings.Repeat("a", 5000) + "/mp4", 400, "recording id"},
		{"missing", s, full + "/record/desktop-20261207T130000Z-0a1b2c3d/mp4", 404, "no such recording"},
		{"terminal", s, full + "/record/" + term + "/mp4", 400, "only desktop"},
		{"damaged", s, full + "/record/" + bad + "/mp4", 422, "not a deskd desktop recording"},
		{"no x264", none, full + "/record/" + desk + "/mp4", 501, "x264"},
	} {
		if code, _, body := get(tt.srv, tt.path, ""); code != tt.want || !bytes.Contains(body, []byte(tt.has)) {
			t.Errorf("%s: %d %.200s; want %d with %q", tt.name, code, body, tt.want, tt.has)
		}
	}
	// The list says whether export is there (the replay page shows its link then).
	if _, _, body := get(s, full+"/record/", ""); !bytes.Contains(body, []byte(`"mp4":true`)) {
		t.Errorf("the list with x264: %s", body)
	}
	if _, _, body := get(none, full+"/record/", ""); !bytes.Contains(body, []byte(`"mp4":false`)) {
		t.Errorf("the list without x264: %s", body)
	}
	if n := started.Load(); n != 0 {
		t.Fatalf("refused requests started %d encoders", n)
	}
	failing.Store(true)
	if code, _, body := get(s, full+"/record/"+desk+"/mp4", ""); code != 500 || !bytes.Contains(body, []byte("no encoder today")) {
		t.Fatalf("an encoder that fails: %d %s", code, body)
	}
	failing.Store(false)
	s.mp4.busy.Store(true)
	if code, _, _ := get(s, full+"/record/"+desk+"/mp4", ""); code != 429 {
		t.Fatalf("while another export runs: %d", code)
	}
	s.mp4.busy.Store(false)

	code, ctype, mp4 := get(s, full+"/record/"+desk+"/mp4?fps=5", "")
	if code != 200 || ctype != "video/mp4" || len(mp4) < 100 || string(mp4[4:8]) != "ftyp" {
		t.Fatalf("export: %d %s %q", code, ctype, mp4[:min(len(mp4), 40)])
	}
	n := started.Load()
	code, _, part := get(s, full+"/record/"+desk+"/mp4?fps=5", "bytes=8-15")
	if code != 206 || !bytes.Equal(part, mp4[8:16]) || started.Load() != n {
		t.Fatalf("a range of the kept export: %d %q, %d more encoders", code, part, started.Load()-n)
	}
	if code, _, _ := get(s, full+"/record/"+desk+"/mp4?fps=6", ""); code != 200 || started.Load() != n+1 {
		t.Fatalf("another fps is another export: %d", code)
	}
	// Temporary files: the kept export only; none after Close.
	if ents, _ := os.ReadDir(exportDir); len(ents) != 1 || !strings.HasSuffix(ents[0].Name(), ".mp4") {
		t.Fatalf("export dir holds %v", ents)
	}
	s.Close()
	if ents, _ := os.ReadDir(exportDir); len(ents) != 0 {
		t.Fatalf("after Close the export dir holds %v", ents)
	}
}
