package cdp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// Public is where agents reach the relay: the WebSocket scheme ("ws" or
// "wss"), host[:port] and path prefix (e.g. "/panel/<token>"), so that
// Public.Prefix + "/cdp" is the relay's root.
type Public struct {
	Scheme string
	Host   string
	Prefix string
}

// base is the relay root without scheme, as devtoolsFrontendUrl wants it.
func (p Public) base() string { return p.Host + p.Prefix + "/cdp" }

// URL is the public ws URL of an upstream DevTools path ("/devtools/...").
func (p Public) URL(devtoolsPath string) string {
	return p.Scheme + "://" + p.base() + devtoolsPath
}

// MaxDiscovery bounds a /json answer read from Chromium.
const MaxDiscovery = 16 << 20

// RewriteDiscovery rewrites the ws URLs in a /json/version, /json/list or
// /json/new answer (an object or an array of objects) to the public URL.
// Fields it does not know pass through.
func RewriteDiscovery(body []byte, pub Public) ([]byte, error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return body, nil
	}
	if body[0] == '[' {
		var list []map[string]any
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("cdp: discovery list: %w", err)
		}
		for _, t := range list {
			rewriteTarget(t, pub)
		}
		return json.MarshalIndent(list, "", "  ")
	}
	if body[0] != '{' {
		return body, nil // e.g. "Target is closing"
	}
	var t map[string]any
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, fmt.Errorf("cdp: discovery object: %w", err)
	}
	rewriteTarget(t, pub)
	return json.MarshalIndent(t, "", "  ")
}

func rewriteTarget(t map[string]any, pub Public) {
	if s, ok := t["webSocketDebuggerUrl"].(string); ok {
		if u, err := url.Parse(s); err == nil && strings.HasPrefix(u.Path, "/devtools/") {
			t["webSocketDebuggerUrl"] = pub.URL(u.Path)
		}
	}
	for _, k := range []string{"devtoolsFrontendUrl", "devtoolsFrontendUrlCompat"} {
		if s, ok := t[k].(string); ok {
			t[k] = rewriteFrontend(s, pub)
		}
	}
}

// frontendPage is the name of a DevTools frontend page Chromium bundles
// (inspector.html, js_app.html, worker_app.html, ...).
var frontendPage = regexp.MustCompile(`^[a-z_]{1,32}\.html$`)

// rewriteFrontend points a DevTools frontend URL at the copy of the
// frontend Chromium bundles, served through the relay (Chromium names
// chrome-devtools-frontend.appspot.com, which a sandbox cannot reach and
// whose Origin the relay refuses), path-absolute under the panel as
// Chromium's own once were, and its ws= (or wss=) parameter at the relay.
func rewriteFrontend(s string, pub Public) string {
	u, err := url.Parse(s)
	if err != nil {
		return s
	}
	q := u.Query()
	target := q.Get("ws")
	if target == "" {
		target = q.Get("wss")
	}
	i := strings.Index(target, "/devtools/")
	if i < 0 {
		return s
	}
	q.Del("ws")
	q.Del("wss")
	q.Set(pub.Scheme, pub.base()+target[i:])
	page := path.Base(u.Path)
	if !frontendPage.MatchString(page) {
		page = "inspector.html"
	}
	return (&url.URL{Path: pub.Prefix + "/cdp/devtools/" + page, RawQuery: q.Encode()}).String()
}
