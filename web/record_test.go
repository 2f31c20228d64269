package web

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/record"
)

// TestTakeoverBursts: a person's input on the desktop is logged as the
// start of a burst at its first event and its end once the input has
// stopped for takeoverQuiet; a new burst starts again.
func TestTakeoverBursts(t *testing.T) {
	store, err := record.Open(t.TempDir(), 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{Recordings: store, RecordActions: true})
	t.Cleanup(func() { s.Close(); store.Close() })
	id := s.actions.Load().ID()
	for range 5 {
		s.viewerInput()
		time.Sleep(50 * time.Millisecond) // a person's pace
	}
	read := func() []map[string]any {
		f, _, err := store.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var evs []map[string]any
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev map[string]any
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("%q: %v", sc.Text(), err)
			}
			if ev["kind"] == "takeover" {
				evs = append(evs, ev)
			}
		}
		return evs
	}
	deadline := time.Now().Add(takeoverQuiet + 3*time.Second)
	for len(read()) < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // the end is logged by a timer: polled
	}
	evs := read()
	if len(evs) != 2 || evs[0]["phase"] != "start" || evs[1]["phase"] != "end" || evs[1]["first_input"] == evs[1]["last_input"] {
		t.Fatalf("one burst of five inputs: %v", evs)
	}
	s.viewerInput()
	if evs := read(); len(evs) != 3 || evs[2]["phase"] != "start" {
		t.Fatalf("a second burst: %v", evs)
	}
}

// TestRecordHostile: the record routes refuse bad ids, unknown fields,
// wrong methods and view tokens, before anything changes.
func TestRecordHostile(t *testing.T) {
	store, err := record.Open(t.TempDir(), 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, Config{PanelSecret: secret, SandboxID: "sb1", Recordings: store})
	t.Cleanup(func() { s.Close(); store.Close() })
	h := s.Handler()
	full := "/panel/" + token(t, panel.Claims{SID: "sb1"})
	view := "/panel/" + token(t, panel.Claims{SID: "sb1", Scope: panel.ScopeView})
	const js = "application/json"
	tests := []struct {
		method, path, ctype, body string
		want                      int
		has                       string
	}{
		{"GET", full + "/record/", "", "", 200, `"recordings":[]`},
		{"GET", view + "/record/", "", "", 403, ""},
		{"GET", view + "/record/terminal-20261207T120000Z-0a1b2c3d", "", "", 403, ""},
		{"DELETE", view + "/record/terminal-20261207T120000Z-0a1b2c3d", "", "", 403, ""},
		{"POST", view + "/record/start", js, `{"actions":true}`, 403, ""},
		{"GET", full + "/record/etc-passwd", "", "", 400, "recording id"},
		{"GET", full + "/record/terminal-20261207T120000Z-0a1b2c3d", "", "", 404, "no such recording"},
		{"GET", full + "/record/" + strings.Repeat("a", 70000), "", "", 400, ""},
		{"DELETE", full + "/record/terminal-20261207T120000Z-0A1B2C3D", "", "", 400, "recording id"},
		{"POST", full + "/record/start", "text/plain", `{"actions":true}`, 415, ""},
		{"POST", full + "/record/start", js, `{"actions":true,"rm":1}`, 400, "unknown field"},
		{"POST", full + "/record/start", js, `{"actions":"yes"}`, 400, "bad record request"},
		{"POST", full + "/record/start", js, `{}`, 400, "say what to record"},
		{"POST", full + "/record/start", js, `{` + strings.Repeat(" ", maxAPIBody) + `}`, 400, ""},
		{"POST", full + "/record/start", js, `{"terminal":true}`, 409, "no terminal"},
		{"PUT", full + "/record/start", js, `{}`, 405, ""},
		{"POST", view + "/record/start", js, `{"desktop":true}`, 403, ""},
		{"POST", view + "/record/stop", js, `{"desktop":true}`, 403, ""},
		{"POST", full + "/record/start", js, `{"desktop":1}`, 400, "bad record request"},
		{"GET", full + "/record/desktop-20261207T120000Z-0a1b2c3d", "", "", 404, "no such recording"},
		{"GET", full + "/record/desktop-20261207T120000Z-0a1b2c3d.deskrec", "", "", 400, "recording id"},
		// Switched on, desktop recording waits for the desktop: it never
		// starts it (no recording below).
		{"POST", full + "/record/start", js, `{"desktop":true}`, 200, `"desktop":true,"terminal"`},
		{"GET", full + "/api/desktop/status", "", "", 200, `"status":"stopped"`},
		{"POST", full + "/record/stop", js, `{"desktop":true}`, 200, `"desktop":false`},
	}
	for _, tt := range tests {
		req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
		if tt.ctype != "" {
			req.Header.Set("Content-Type", tt.ctype)
		}
		req.Header.Set("Origin", "http://example.com")
		req.Host = "example.com"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body, _ := io.ReadAll(rec.Body)
		if rec.Code != tt.want || !bytes.Contains(body, []byte(tt.has)) {
			t.Errorf("%s %.60s %.30s: %d %.200s; want %d with %q", tt.method, tt.path, tt.body, rec.Code, body, tt.want, tt.has)
		}
	}
	if l, _ := store.List(); len(l) != 0 {
		t.Fatalf("refused requests made recordings: %v", l)
	}
}
