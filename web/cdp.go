package web

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cubepod/deskd/cdp"
	"github.com/cubepod/deskd/desktop"
)

// CDP routes. Agents reach Chromium's DevTools through here only: it
// listens on 127.0.0.1 and this relay adds the panel check, heartbeats
// and URLs that point back through the panel.
//
//	/cdp/json[/list], /cdp/json/version, /cdp/json/protocol, /cdp/json/new,
//	/cdp/json/close/<id>, /cdp/json/activate/<id>     discovery (a trailing / is fine)
//	/cdp, /cdp/                     WebSocket to the current browser target
//	/cdp/devtools/{browser,page,...}/<id>   WebSocket to that target
//	/cdp/devtools/inspector.html, ...   Chromium's bundled DevTools frontend (GET)

var (
	jsonPath     = regexp.MustCompile(`^/json(/list|/version|/protocol|/new|/(close|activate)/[A-Za-z0-9._-]{1,128})?$`)
	devtoolsPath = regexp.MustCompile(`^/devtools/[a-z_]{1,32}/[A-Za-z0-9._-]{1,128}$`)
	// targetPath is a target's WebSocket (never a frontend file).
	targetPath   = regexp.MustCompile(`^/devtools/(browser|page|tab|iframe|worker|shared_worker|service_worker|other)/`)
	frontendPath = regexp.MustCompile(`^/devtools/[A-Za-z0-9_][A-Za-z0-9._/-]{0,250}$`)
)

// answerTimeout bounds the wait for Chromium's answer to a discovery
// request (a busy browser under load takes seconds).
const answerTimeout = 10 * time.Second

// chromium makes sure Chromium runs (starting the desktop on the first
// CDP request) and returns its debugging port. A status of "running" is
// not trusted alone: a browser killed a moment ago still looks alive
// until it is reaped, so its port is tried, and Activate restarts one
// that refuses.
func (s *Server) chromium(ctx context.Context) (int, error) {
	port := s.cfg.Stack.CDPPort()
	// A running browser whose port takes connections is used as it is:
	// the kernel accepts them even when Chromium is too busy to answer
	// at once, and one that has just died refuses them. A probe of
	// /json/version here, bounded at 2 s, turned a browser busy under
	// load into refused agents. Slow answers are the request's own
	// business (answerTimeout), and restarting a hung browser is the
	// health checker's call (two failed checks), never one agent's.
	if st := s.cfg.Stack.Status(); st.Status == desktop.StatusRunning && st.Pids[desktop.Chromium] != 0 {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
			return port, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if _, err := s.Activate(ctx, desktop.StartOptions{}); err != nil {
		return 0, err
	}
	return port, nil
}

func (s *Server) cdpPublic(r *http.Request) cdp.Public {
	scheme, host, prefix := publicParts(r, s.cfg.BaseURL)
	ws := "ws"
	if scheme == "https" {
		ws = "wss"
	}
	return cdp.Public{Scheme: ws, Host: host, Prefix: prefix}
}

// cdpJSON proxies Chromium's discovery endpoints and rewrites their URLs.
func (s *Server) cdpJSON(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/cdp"), "/")
	if !jsonPath.MatchString(rest) {
		http.Error(w, "no such DevTools endpoint", http.StatusNotFound)
		return
	}
	s.cdpDiscovery(w, r, rest)
}

func (s *Server) cdpDiscovery(w http.ResponseWriter, r *http.Request, rest string) {
	// Only /json/new changes anything, and only by PUT, as Chromium
	// itself wants: a page cannot make a browser send a cross-origin PUT
	// without a preflight, which is never answered here.
	method := http.MethodGet
	switch {
	case rest == "/json/new" && r.Method != http.MethodPut:
		w.Header().Set("Allow", http.MethodPut)
		http.Error(w, "/json/new takes PUT", http.StatusMethodNotAllowed)
		return
	case rest == "/json/new":
		method = http.MethodPut
	case r.Method == http.MethodPut:
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	port, err := s.chromium(r.Context())
	if err != nil {
		http.Error(w, "browser not available: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), answerTimeout)
	defer cancel()
	ask := func(port int) (*http.Response, error) {
		return cdp.Ask(ctx, port, method, rest, r.URL.RawQuery)
	}
	died := s.cfg.Stack.ChromiumDone()
	resp, err := ask(port)
	if err != nil && method == http.MethodGet && ctx.Err() == nil && s.exited(ctx, died) {
		// Killed a moment ago: ask the browser that replaces it.
		if port, err = s.chromium(ctx); err == nil {
			resp, err = ask(port)
		}
	}
	if ctx.Err() != nil && r.Context().Err() == nil {
		http.Error(w, fmt.Sprintf("browser not answering within %v (busy, or hung: the health check restarts a hung one)", answerTimeout), http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, "browser not answering: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, cdp.MaxDiscovery+1))
	if err != nil || len(body) > cdp.MaxDiscovery {
		http.Error(w, fmt.Sprintf("browser answer unreadable or over %d bytes", cdp.MaxDiscovery), http.StatusBadGateway)
		return
	}
	if resp.StatusCode == http.StatusOK && rest != "/json/protocol" { // the protocol schema holds no URLs
		if body, err = cdp.RewriteDiscovery(body, s.cdpPublic(r)); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// cdpBrowser: a WebSocket upgrade reaches the current browser target
// (its id changes with every Chromium start; clients that drop URL
// prefixes, such as Puppeteer's browserURL and chromedp, land here); a
// plain GET answers like /json/version.
func (s *Server) cdpBrowser(w http.ResponseWriter, r *http.Request) {
	if !isUpgrade(r) {
		s.cdpDiscovery(w, r, "/json/version")
		return
	}
	if !s.checkWS(w, r) { // before Chromium is started or asked
		return
	}
	port, err := s.chromium(r.Context())
	if err != nil {
		http.Error(w, "browser not available: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	died := s.cfg.Stack.ChromiumDone()
	v, err := cdp.GetVersion(r.Context(), port)
	if err != nil && s.exited(r.Context(), died) {
		// A browser killed a moment ago can still take a connection and
		// then drop it: ask the next one (started by chromium()).
		if port, err = s.chromium(r.Context()); err != nil {
			http.Error(w, "browser not available: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		v, err = cdp.GetVersion(r.Context(), port)
	}
	if err != nil {
		http.Error(w, "browser not answering: "+err.Error(), http.StatusBadGateway)
		return
	}
	u, err := url.Parse(v.WebSocketDebuggerURL)
	if err != nil {
		http.Error(w, "browser gave a bad URL", http.StatusBadGateway)
		return
	}
	s.relay(w, r, port, u.Path)
}

// exited reports whether died closes within a second: the exit of a
// browser that dropped a request is recorded moments after its socket
// closed. A browser that is merely slow is not restarted here (that is
// the health checker's call).
func (s *Server) exited(ctx context.Context, died <-chan struct{}) bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-died:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (s *Server) cdpDevtools(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/cdp")
	if !isUpgrade(r) && !targetPath.MatchString(path) {
		s.cdpFrontend(w, r, path)
		return
	}
	if !devtoolsPath.MatchString(path) {
		http.Error(w, "no such DevTools target", http.StatusNotFound)
		return
	}
	if !s.checkWS(w, r) {
		return
	}
	port, err := s.chromium(r.Context())
	if err != nil {
		http.Error(w, "browser not available: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	s.relay(w, r, port, path)
}

// maxFrontendFile bounds one file of the DevTools frontend (its largest
// bundle is a few MiB).
const maxFrontendFile = 32 << 20

// cdpFrontend serves the DevTools frontend that Chromium bundles and
// serves on its debugging port (/devtools/inspector.html and the modules
// it loads), so that a person can inspect the sandbox's pages from the
// panel: discovery's devtoolsFrontendUrl points here. Same origin as the
// panel, so the inspector's WebSocket to the relay passes the Origin
// check. GET only, clean paths only, bounded.
func (s *Server) cdpFrontend(w http.ResponseWriter, r *http.Request, p string) {
	if !frontendPath.MatchString(p) || path.Clean(p) != p || strings.Contains(p, "..") {
		http.Error(w, "no such DevTools frontend file", http.StatusNotFound)
		return
	}
	port, err := s.chromium(r.Context())
	if err != nil {
		http.Error(w, "browser not available: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), answerTimeout)
	defer cancel()
	resp, err := cdp.Ask(ctx, port, http.MethodGet, p, "")
	if err != nil {
		http.Error(w, "browser not answering: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFrontendFile+1))
	if err != nil || len(body) > maxFrontendFile {
		http.Error(w, fmt.Sprintf("browser answer unreadable or over %d bytes", maxFrontendFile), http.StatusBadGateway)
		return
	}
	// Chromium answers 200 and nothing for a file it does not have.
	if resp.StatusCode == http.StatusOK && len(body) == 0 {
		http.Error(w, "no such DevTools frontend file", http.StatusNotFound)
		return
	}
	h := w.Header()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-cache") // another Chromium may bring another frontend
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// relay dials Chromium first, so a missing target is an HTTP error the
// agent can read, then accepts the agent and relays until either ends.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, port int, path string) {
	dctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	up, err := cdp.DialUpstream(dctx, port, path)
	cancel()
	if err != nil {
		http.Error(w, "browser target: "+err.Error(), http.StatusBadGateway)
		return
	}
	agent, ctx, done, err := s.upgrade(w, r, wsOptions{readLimit: cdp.MaxMessage})
	if err != nil {
		up.CloseNow()
		return
	}
	defer done()
	defer up.CloseNow()
	err = cdp.Relay(ctx, agent, up, s.cfg.CDPPing, s.watch(path))
	s.log.Debug("cdp relay ended", "path", path, "why", err)
}

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}
