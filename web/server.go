// Package web is deskd's one HTTP port: embedded pages and assets, the
// panel-token check, /healthz, /metrics and /api/desktop/*.
package web

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cubepod/deskd/a11y"
	"github.com/cubepod/deskd/bridge"
	"github.com/cubepod/deskd/cdp"
	"github.com/cubepod/deskd/cores"
	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/panel"
	"github.com/cubepod/deskd/proxy"
	"github.com/cubepod/deskd/record"
	"github.com/cubepod/deskd/term"
	"github.com/cubepod/deskd/x11"
)

// Config configures a Server.
type Config struct {
	Stack  *desktop.Stack
	Logger *slog.Logger
	// PanelSecret, when set, makes the server accept only paths under a
	// valid /panel/<token>/ and strip that prefix.
	PanelSecret []byte
	// SandboxID, when set, must equal a token's sid.
	SandboxID string
	// BaseURL is where the server is reached directly (e.g.
	// http://127.0.0.1:8080); used for URLs in answers to requests that
	// carry no usable Host, such as those on the control socket.
	BaseURL string
	// HTTPPort is reported in status.
	HTTPPort int
	// SessionIdle is how long a panel session counts as active after its
	// last request (default 5 min).
	SessionIdle time.Duration
	// Terminal serves /terminal/ws; nil answers 503 there.
	Terminal *term.Manager
	// VNCPassword, when set, makes viewers pass VNC authentication.
	VNCPassword string
	// CDPPing is the heartbeat interval of CDP relays (default 20 s).
	CDPPing time.Duration
	// AllowOrigins are extra origins (host or scheme://host, "*" for any)
	// whose pages may open WebSockets here.
	AllowOrigins []string
	// AllowHosts are Host names accepted without a panel secret besides
	// loopback ones (DNS rebinding: a page of another site that resolves
	// its name to 127.0.0.1 still sends its own name as Host).
	AllowHosts []string
	// WSPing is how often desktop and terminal WebSockets are pinged
	// (default 20 s).
	WSPing time.Duration
	// MaxViewers caps concurrent VNC viewers (default bridge's).
	MaxViewers int
	// FilesRoot is the GUI user's home, the root of /files/ ("" answers
	// 503 there); what the API makes is owned by FilesOwner (nil: by
	// deskd's user). MaxUpload bounds one upload (default 4 GiB).
	FilesRoot  string
	FilesOwner *syscall.Credential
	MaxUpload  int64
	// FilesDeny are paths the files API never serves, lists or changes
	// even inside FilesRoot: Chromium's profile (its cookies), deskd's run
	// dir (the display's cookie), secret files.
	FilesDeny []string
	// Cores is widened for work that splits across cores (big RFB
	// updates, screenshots) when the daemon runs on one P; nil: the
	// runtime's own setting.
	Cores *cores.Cores
	// TabFollow brings the tab an agent acts on to the front (a start
	// request may switch it).
	TabFollow bool
	// Recordings, when set, is where recordings go (record/ routes);
	// TerminalRecorder records terminal sessions there (Terminal's
	// Config.Record uses it). RecordView lets view tokens list and
	// download recordings.
	Recordings       *record.Store
	TerminalRecorder *record.Terminals
	RecordView       bool
	// RecordActions starts the action log at once (--record=actions).
	RecordActions bool
	// RecordDesktop records the desktop whenever it runs
	// (--record=desktop); RecordKeyframe and RecordKeyframeBytes space
	// the full pictures of desktop recordings (record.DesktopOptions;
	// 0: record's defaults).
	RecordDesktop       bool
	RecordKeyframe      time.Duration
	RecordKeyframeBytes int64
	// Proxy is the browser's way out (a start request may change it,
	// which restarts Chromium alone); nil: no upstream proxy support.
	Proxy *proxy.Switch
	// Video starts H.264 encoders for the RFB server (bridge.Config's);
	// nil: encoding 50 is never used.
	Video func(w, h, quality int) (bridge.VideoEncoder, error)
	// ExportVideo starts H.264 encoders for MP4 exports of desktop
	// recordings (record/{id}/mp4); nil: no export. Exports keep their
	// files in ExportDir (default the system's temporary directory).
	ExportVideo func(w, h, fps int) (record.FrameEncoder, error)
	ExportDir   string
}

// Server serves deskd's HTTP API and pages.
type Server struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	sessions *sessions
	public   http.Handler // behind the panel check
	control  http.Handler // for the local control socket: no panel check

	rfb   rfbHolder
	comp  computerHolder
	elems elements
	// actions is the action log being written (nil: none); actionsMu
	// serialises its start and stop.
	actions   atomic.Pointer[record.Actions]
	actionsMu sync.Mutex
	deskRec   deskRec   // desktop recording (recdesk.go)
	mp4       mp4Export // MP4 export (recexport.go)
	takeover  takeover
	lease     lease
	human     humanInput
	fit       browserFit
	shots     shotGate
	kbd       keyboards
	pinging   atomic.Bool     // a readiness check of the display in flight
	base      context.Context // ends at Close: WebSockets hang off it
	cancel    context.CancelFunc
	handlers  handlerGroup
	idle      *idleMemory
	follow    *cdp.Follower
}

// New builds a Server; it owns no goroutines.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SessionIdle == 0 {
		cfg.SessionIdle = 5 * time.Minute
	}
	if cfg.WSPing <= 0 {
		cfg.WSPing = 20 * time.Second
	}
	if cfg.MaxUpload <= 0 {
		cfg.MaxUpload = 4 << 30
	}

	s := &Server{cfg: cfg, log: cfg.Logger, sessions: newSessions(cfg.SessionIdle), idle: newIdleMemory(2 * time.Second), shots: newShotGate()}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.metrics = newMetrics(cfg.Stack, s.sessions, cfg.Terminal)
	s.metrics.recordings = cfg.Recordings
	s.follow = s.newFollower()
	s.elems.s = s
	if cfg.RecordActions && cfg.Recordings != nil {
		if err := s.startActions(); err != nil {
			s.log.Error("action log not started", "err", err)
		}
	}
	s.deskRec.poke = make(chan struct{}, 1)
	if cfg.Recordings != nil && s.handlers.TryAdd() {
		s.deskRec.on = cfg.RecordDesktop
		s.deskRec.nudge()
		go func() { // ends at Close
			defer s.handlers.Done()
			s.deskRecLoop(s.base)
		}()
	}
	mux := s.routes()
	s.public = s.withPanel(mux)
	s.control = s.withClaims(mux, panel.Claims{Scope: panel.ScopeFull})
	return s
}

// Close ends the WebSocket connections (they get 1001 "going away") and
// waits for their handlers, which http.Server.Shutdown does not do for
// hijacked connections. Call it after Shutdown.
func (s *Server) Close() {
	s.cancel()
	s.handlers.closeAndWait()
	s.idle.close()
	s.rfb.mu.Lock()
	s.rfb.close()
	s.rfb.mu.Unlock()
	s.comp.mu.Lock()
	s.comp.close()
	s.elems.close()
	s.closeTakeover()
	s.stopActions()
	s.comp.mu.Unlock()
	s.follow.Close()
	s.mp4.close()
}

// Handler is the public handler, for the TCP listener.
func (s *Server) Handler() http.Handler { return s.public }

// OpsHandler serves /healthz and /metrics only, with no token: for
// kubelet probes and Prometheus on an address of their own (--ops-listen).
func (s *Server) OpsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /livez", healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.metrics.handler())
	return mux
}

// ControlHandler is for the control socket in the run dir, reachable only
// by local users the socket's permissions admit; it skips the panel check.
func (s *Server) ControlHandler() http.Handler { return s.control }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.HandleFunc("GET /livez", healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("POST /api/desktop/start", s.requireFull(requireJSON(s.apiStart)))
	mux.HandleFunc("GET /api/desktop/status", s.requireFull(s.apiStatus))
	mux.HandleFunc("GET /api/panel", s.apiPanel)
	mux.HandleFunc("GET /api/follow", s.requireFull(s.apiFollow))
	mux.HandleFunc("POST /api/follow", s.requireFull(requireJSON(s.apiFollowSet)))
	mux.HandleFunc("POST /api/desktop/stop", s.requireFull(requireJSON(s.apiStop)))
	// A GET of another /api/ path gets an API answer, not the file server's.
	mux.HandleFunc("GET /api/", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/desktop/start", "/api/desktop/stop":
			w.Header().Set("Allow", http.MethodPost)
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use POST"})
		default:
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such API: " + r.URL.Path})
		}
	})
	mux.HandleFunc("GET /terminal/ws", s.terminalWS)
	mux.HandleFunc("GET /websockify", s.websockify)
	for _, p := range []string{"/cdp/json", "/cdp/json/"} {
		mux.HandleFunc("GET "+p, s.requireFull(s.cdpJSON))
		mux.HandleFunc("PUT "+p, s.requireFull(s.cdpJSON))
	}
	mux.HandleFunc("GET /cdp", s.requireFull(s.cdpBrowser))
	mux.HandleFunc("GET /cdp/{$}", s.requireFull(s.cdpBrowser))
	mux.HandleFunc("GET /cdp/devtools/", s.requireFull(s.cdpDevtools))
	s.computerRoutes(mux)
	if s.cfg.Recordings != nil {
		s.recordRoutes(mux)
	}
	mcpH := s.mcpHandler()
	for _, m := range []string{"POST", "GET", "DELETE"} { // stateless: GET and DELETE answer 405
		mux.Handle(m+" /mcp", mcpH)
	}
	mux.Handle("GET /", assetHandler(s.log))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isFilesPath(r.URL.Path) {
			s.filesAPI(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// requireJSON refuses a POST whose Content-Type is not JSON: a page of
// another site can send a "simple" cross-origin POST (text/plain, form)
// without asking, but not a JSON one, which needs a preflight that deskd
// never answers.
func requireJSON(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
		if err != nil || ct != "application/json" {
			writeJSON(w, http.StatusUnsupportedMediaType, map[string]string{"error": "Content-Type must be application/json"})
			return
		}
		h(w, r)
	}
}

// maxAPIBody bounds a start request's JSON body.
const maxAPIBody = 4096

// startRequest is a start request's body: the desktop's options and
// deskd's own.
type startRequest struct {
	desktop.StartOptions
	// TabFollow switches tab-follow on or off (absent: as it is).
	TabFollow *bool `json:"tab_follow,omitempty"`
	// Proxy sets the upstream proxy of the browser ({"server": ""}:
	// direct; absent: as it is).
	Proxy *proxy.Config `json:"proxy,omitempty"`
}

func (s *Server) apiStart(w http.ResponseWriter, r *http.Request) {
	var req startRequest
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAPIBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad start request: " + err.Error()})
			return
		}
	}
	o := req.StartOptions
	if err := cdp.CheckStartURL(o.URL); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad start request: " + err.Error()})
		return
	}
	if err := a11y.CheckMode(o.A11y); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad start request: " + err.Error()})
		return
	}
	if req.Proxy != nil { // first: a bad setting is refused before anything changed
		if s.cfg.Proxy == nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad start request: this deskd takes no upstream proxy"})
			return
		}
		changed, err := s.cfg.Proxy.Set(*req.Proxy)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad start request: " + err.Error()})
			return
		}
		if changed { // a running browser takes the new way out at a restart, alone
			if _, err := s.cfg.Stack.RestartChromium(r.Context()); err != nil {
				s.log.Error("chromium restart for the new proxy failed", "err", err)
			}
		}
	}
	if req.TabFollow != nil {
		s.follow.SetOn(*req.TabFollow)
	}

	st, err := s.Activate(r.Context(), o)
	code := http.StatusOK
	if err != nil {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, s.decorate(r, st))
}

// panelInfo is what a page needs to know about its own session.
type panelInfo struct {
	Scope     panel.Scope `json:"scope"`
	ReadOnly  bool        `json:"read_only"`
	Files     bool        `json:"files"`
	MaxUpload int64       `json:"max_upload"`
}

// apiPanel tells a page what its token allows, so it can show a view-only
// badge and hide what would be refused.
func (s *Server) apiPanel(w http.ResponseWriter, r *http.Request) {
	c, _ := ClaimsFrom(r.Context())
	writeJSON(w, http.StatusOK, panelInfo{Scope: cmp.Or(c.Scope, panel.ScopeFull), ReadOnly: c.ReadOnly(),
		Files: s.cfg.FilesRoot != "", MaxUpload: s.cfg.MaxUpload})
}

func (s *Server) apiStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.decorate(r, s.cfg.Stack.Status()))
}

func (s *Server) apiStop(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.decorate(r, s.cfg.Stack.Stop(r.Context())))
}

// Activate starts the desktop (idempotently) and counts the activation.
// Viewers and agents that need the desktop call it on their first
// connection.
func (s *Server) Activate(ctx context.Context, o desktop.StartOptions) (desktop.Status, error) {
	st, err := s.cfg.Stack.Start(ctx, o)
	result := "ok"
	switch {
	case errors.Is(err, desktop.ErrUnsupported):
		result = "unsupported"
		s.log.Error("desktop cannot start here", "err", err)
	case err != nil:
		result = "error"
		s.log.Error("desktop start failed", "err", err)
	}
	s.metrics.activation(result)
	if err == nil {
		s.deskRec.nudge() // a recording may wait for the desktop
	}
	return st, err
}

// decorate adds what only the web layer knows: deskd's own pid and port
// and the URLs of the desktop, terminal and CDP as the caller reaches them.
func (s *Server) decorate(r *http.Request, st desktop.Status) desktop.Status {
	st.Pids["deskd"] = os.Getpid()
	if w, h, ok := s.rfb.size(st.Display); ok { // the size now, after any viewer's resize
		if res, err := x11.ParseResolution(st.Resolution); err == nil {
			res.Width, res.Height = w, h
			st.Resolution = res.String()
		}
	}
	st.Ports["http"] = s.cfg.HTTPPort
	if s.cfg.Proxy != nil {
		st.Proxy = s.cfg.Proxy.Status()
	}
	base := publicBase(r, s.cfg.BaseURL)
	st.URLs = map[string]string{
		"desktop":  base + "/vnc.html?autoconnect=true&resize=scale",
		"terminal": base + "/terminal/",
		"cdp":      base + "/cdp",
	}
	return st
}

// publicBase is the URL prefix under which the caller reached us: scheme
// from X-Forwarded-Proto, host from X-Forwarded-Host or Host, prefix from
// X-Forwarded-Prefix or the panel path.
func publicBase(r *http.Request, fallback string) string {
	scheme, host, prefix := publicParts(r, fallback)
	return scheme + "://" + host + prefix
}

func publicParts(r *http.Request, fallback string) (scheme, host, prefix string) {
	prefix = prefixOf(r)
	host = firstValue(r.Header.Get("X-Forwarded-Host"))
	if host == "" {
		host = r.Host
	}
	if host == "" || strings.HasPrefix(r.RemoteAddr, "@") || r.RemoteAddr == "" {
		if u, err := url.Parse(fallback); err == nil && u.Host != "" {
			return u.Scheme, u.Host, prefix
		}
		host = "127.0.0.1"
	}
	scheme = "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := firstValue(r.Header.Get("X-Forwarded-Proto")); p == "https" || p == "http" {
		scheme = p
	}
	return scheme, host, prefix
}

func prefixOf(r *http.Request) string {
	if p := firstValue(r.Header.Get("X-Forwarded-Prefix")); strings.HasPrefix(p, "/") {
		return strings.TrimRight(p, "/")
	}
	if p, ok := r.Context().Value(prefixKey{}).(string); ok {
		return p
	}
	return ""
}

func firstValue(h string) string {
	v, _, _ := strings.Cut(h, ",")
	return strings.TrimSpace(v)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// ListenerPort returns the TCP port of l, or 0.
func ListenerPort(l net.Listener) int {
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}
