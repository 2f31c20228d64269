package cdp

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

var pub = Public{Scheme: "wss", Host: "gw.example", Prefix: "/panel/TOK"}

func TestRewriteDiscovery(t *testing.T) {
	tests := []struct {
		name, in string
		want     map[string]string // field -> value, per object (first object for lists)
	}{
		{
			name: "version",
			in:   `{"Browser":"Chrome/156","webSocketDebuggerUrl":"ws://127.0.0.1:9222/devtools/browser/abc-1"}`,
			want: map[string]string{"Browser": "Chrome/156", "webSocketDebuggerUrl": "wss://gw.example/panel/TOK/cdp/devtools/browser/abc-1"},
		},
		{
			name: "list",
			in: `[{"id":"P1","type":"page","url":"about:blank","webSocketDebuggerUrl":"ws://127.0.0.1:9222/devtools/page/P1",
			  "devtoolsFrontendUrl":"/devtools/inspector.html?ws=127.0.0.1:9222/devtools/page/P1"}]`,
			want: map[string]string{
				"id": "P1", "url": "about:blank",
				"webSocketDebuggerUrl": "wss://gw.example/panel/TOK/cdp/devtools/page/P1",
				"devtoolsFrontendUrl":  "/panel/TOK/cdp/devtools/inspector.html?wss=gw.example%2Fpanel%2FTOK%2Fcdp%2Fdevtools%2Fpage%2FP1",
			},
		},
		{
			name: "frontend url with a full origin",
			in:   `{"devtoolsFrontendUrl":"https://chrome-devtools-frontend.appspot.com/serve_rev/@x/inspector.html?ws=127.0.0.1:9222/devtools/page/P2"}`,
			// Chromium's bundled copy, through the relay, not the appspot one.
			want: map[string]string{"devtoolsFrontendUrl": "/panel/TOK/cdp/devtools/inspector.html?wss=gw.example%2Fpanel%2FTOK%2Fcdp%2Fdevtools%2Fpage%2FP2"},
		},
		{
			name: "a worker's frontend page kept, a strange one not",
			in: `[{"devtoolsFrontendUrl":"https://chrome-devtools-frontend.appspot.com/serve_rev/@x/worker_app.html?ws=127.0.0.1:9222/devtools/page/W1",
			  "devtoolsFrontendUrlCompat":"https://x/serve_rev/@x/..%2Fevil.js?ws=127.0.0.1:9222/devtools/page/W1"}]`,
			want: map[string]string{
				"devtoolsFrontendUrl":       "/panel/TOK/cdp/devtools/worker_app.html?wss=gw.example%2Fpanel%2FTOK%2Fcdp%2Fdevtools%2Fpage%2FW1",
				"devtoolsFrontendUrlCompat": "/panel/TOK/cdp/devtools/inspector.html?wss=gw.example%2Fpanel%2FTOK%2Fcdp%2Fdevtools%2Fpage%2FW1",
			},
		},
		{
			name: "frontend url without a target left alone",
			in:   `{"devtoolsFrontendUrl":"https://elsewhere/inspector.html?ws=somewhere/else"}`,
			want: map[string]string{"devtoolsFrontendUrl": "https://elsewhere/inspector.html?ws=somewhere/else"},
		},
		{
			name: "foreign url left alone",
			in:   `{"webSocketDebuggerUrl":"ws://elsewhere/x"}`,
			want: map[string]string{"webSocketDebuggerUrl": "ws://elsewhere/x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := RewriteDiscovery([]byte(tt.in), pub)
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if strings.HasPrefix(strings.TrimSpace(tt.in), "[") {
				var list []map[string]any
				if err := json.Unmarshal(out, &list); err != nil || len(list) != 1 {
					t.Fatalf("%s: %v", out, err)
				}
				obj = list[0]
			} else if err := json.Unmarshal(out, &obj); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			for k, v := range tt.want {
				if obj[k] != v {
					t.Errorf("%s = %v, want %s", k, obj[k], v)
				}
			}
		})
	}
	if out, err := RewriteDiscovery([]byte("Target is closing"), pub); err != nil || string(out) != "Target is closing" {
		t.Errorf("plain text answer: %q %v", out, err)
	}
	if _, err := RewriteDiscovery([]byte("[not json"), pub); err == nil {
		t.Error("broken JSON accepted")
	}
}

// FuzzRewriteDiscovery: never panics; valid JSON stays valid JSON and no
// rewritten ws URL leaves the public prefix.
func FuzzRewriteDiscovery(f *testing.F) {
	f.Add([]byte(`{"webSocketDebuggerUrl":"ws://127.0.0.1:9222/devtools/browser/x"}`))
	f.Add([]byte(`[{"devtoolsFrontendUrl":"/devtools/inspector.html?ws=127.0.0.1:9222/devtools/page/P"}]`))
	f.Add([]byte(`{"devtoolsFrontendUrl":"%zz"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := RewriteDiscovery(b, pub)
		if err != nil {
			return
		}
		if json.Valid(b) && !json.Valid(out) {
			t.Fatalf("valid %q became invalid %q", b, out)
		}
		// A rewritten frontend URL stays under the relay's frontend.
		for _, m := range regexp.MustCompile(`"(/[^"]*)"`).FindAllSubmatch(out, -1) {
			if u := string(m[1]); strings.Contains(u, "?wss=") && !strings.HasPrefix(u, pub.Prefix+"/cdp/devtools/") {
				t.Fatalf("frontend URL %q outside the relay in %q", u, out)
			}
		}
	})
}
