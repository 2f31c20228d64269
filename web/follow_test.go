package web

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cubepod/deskd/panel"
)

// api/follow: a person pauses and resumes tab-follow; bad requests get a
// clear 400 and change nothing; a view token may neither read nor set it.
func TestFollowAPI(t *testing.T) {
	s := newServer(t, Config{TabFollow: true, PanelSecret: secret, SandboxID: "sb1", HTTPPort: 8080})
	h := s.Handler()
	full := "/panel/" + token(t, panel.Claims{SID: "sb1"})
	view := "/panel/" + token(t, panel.Claims{SID: "sb1", Scope: panel.ScopeView})
	do := func(method, path, ct, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Host = "127.0.0.1:8080"
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	tests := []struct {
		name, method, path, ct, body string
		code                         int
		has                          string
	}{
		{"state", "GET", full + "/api/follow", "", "", 200, `"on":true,"paused":false`},
		{"pause", "POST", full + "/api/follow", "application/json", `{"paused":true}`, 200, `"paused":true`},
		{"stays paused", "GET", full + "/api/follow", "", "", 200, `"paused":true`},
		{"no field", "POST", full + "/api/follow", "application/json", `{}`, 400, "bad tab-follow request"},
		{"empty", "POST", full + "/api/follow", "application/json", ``, 400, "bad tab-follow request"},
		{"wrong type", "POST", full + "/api/follow", "application/json", `{"paused":"no"}`, 400, "bad tab-follow request"},
		{"unknown field", "POST", full + "/api/follow", "application/json", `{"paused":false,"tab":"x"}`, 400, "bad tab-follow request"},
		{"not an object", "POST", full + "/api/follow", "application/json", `[true]`, 400, "bad tab-follow request"},
		{"too big", "POST", full + "/api/follow", "application/json", `{"paused":false` + strings.Repeat(" ", maxAPIBody) + `}`, 400, "bad tab-follow request"},
		{"not JSON", "POST", full + "/api/follow", "text/plain", `{"paused":false}`, 415, "application/json"},
		{"still paused after all that", "GET", full + "/api/follow", "", "", 200, `"paused":true`},
		{"view token reads", "GET", view + "/api/follow", "", "", 403, "forbidden"},
		{"view token sets", "POST", view + "/api/follow", "application/json", `{"paused":false}`, 403, "forbidden"},
		{"resume", "POST", full + "/api/follow", "application/json", `{"paused":false}`, 200, `"paused":false`},
		{"a start request with a bad proxy", "POST", full + "/api/desktop/start", "application/json", `{"tab_follow":false,"proxy":{"server":"ftp://x:1"}}`, 400, "bad start request"},
		{"changed nothing", "GET", full + "/api/follow", "", "", 200, `"on":true`},
	}
	for _, tt := range tests {
		code, body := do(tt.method, tt.path, tt.ct, tt.body)
		if code != tt.code || !strings.Contains(body, tt.has) {
			t.Errorf("%s: %s %s %.40q = %d %.200q; want %d with %q", tt.name, tt.method, tt.path[len(tt.path)-11:], tt.body, code, body, tt.code, tt.has)
		}
	}
}
