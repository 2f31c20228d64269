package panel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// GatewayConfig configures the reference gateway.
type GatewayConfig struct {
	// Secret is the master secret; each sandbox's tokens are signed with
	// SandboxKey(Secret, id), the key that sandbox's deskd holds.
	Secret []byte
	// Sandboxes maps a sandbox id to its deskd base URL (http://host:port).
	Sandboxes map[string]*url.URL
	// TTL is the lifetime of minted panel tokens (default 1 h).
	TTL time.Duration
	// PublicURL is the gateway's own public base URL for the links it
	// returns; empty: derived from each request.
	PublicURL string
	// APIKey, when set, is required as "Authorization: Bearer KEY" on the
	// /sandboxes API (the panel proxy is guarded by its tokens).
	APIKey string
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Gateway mints panel tokens, answers the control plane's
// /sandboxes/{id}/desktop/* calls by driving deskd, and reverse-proxies
// /panel/<token>/ (HTTP and WebSocket) to the sandbox's deskd.
type Gateway struct {
	cfg    GatewayConfig
	mux    *http.ServeMux
	client *http.Client
}

// StartRequest is the optional body of POST /sandboxes/{id}/desktop/start.
type StartRequest struct {
	Scope      Scope  `json:"scope,omitempty"`
	TTL        string `json:"ttl,omitempty"` // Go duration, at most 24 h
	Resolution string `json:"resolution,omitempty"`
	URL        string `json:"url,omitempty"`
	// TabFollow switches deskd's tab-follow on or off (absent: as it is).
	TabFollow *bool `json:"tab_follow,omitempty"`
	// Proxy is deskd's upstream proxy setting, passed on as it is
	// ({"server","username","password","bypass"}); never logged.
	Proxy json.RawMessage `json:"proxy,omitempty"`
}

// StartResponse is what the control plane gets back.
type StartResponse struct {
	DesktopURL  string          `json:"desktopUrl"`
	TerminalURL string          `json:"terminalUrl"`
	CDPURL      string          `json:"cdpUrl"`
	ExpiresAt   time.Time       `json:"expiresAt"`
	Status      json.RawMessage `json:"status,omitempty"`
}

const (
	maxTTL       = 24 * time.Hour
	controlTTL   = time.Minute
	maxStartBody = 4096
	maxUpstream  = 1 << 20
)

// NewGateway builds a Gateway.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("panel gateway: empty secret")
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	g := &Gateway{cfg: cfg, mux: http.NewServeMux(), client: &http.Client{Timeout: 3 * time.Minute}}
	g.mux.HandleFunc("POST /sandboxes/{id}/desktop/start", g.api(g.start))
	g.mux.HandleFunc("POST /sandboxes/{id}/desktop/stop", g.api(g.control(http.MethodPost, "/api/desktop/stop")))
	g.mux.HandleFunc("GET /sandboxes/{id}/desktop/status", g.api(g.control(http.MethodGet, "/api/desktop/status")))
	g.mux.HandleFunc(Prefix, g.proxy)
	// Liveness for the gateway's own probes: it serves, nothing more.
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	return g, nil
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

type apiError struct {
	Error   string `json:"error"`
	Message string `json:"message,omitempty"`
}

func (g *Gateway) api(h func(http.ResponseWriter, *http.Request, string, *url.URL)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if g.cfg.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+g.cfg.APIKey {
			writeJSON(w, http.StatusUnauthorized, apiError{Error: "unauthorized"})
			return
		}
		id := r.PathValue("id")
		up, ok := g.cfg.Sandboxes[id]
		if !ok {
			writeJSON(w, http.StatusNotFound, apiError{Error: "sandbox_not_found", Message: id})
			return
		}
		h(w, r, id, up)
	}
}

func (g *Gateway) start(w http.ResponseWriter, r *http.Request, id string, up *url.URL) {
	var req StartRequest
	if r.ContentLength != 0 {
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxStartBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			writeJSON(w, http.StatusBadRequest, apiError{Error: "bad_request", Message: err.Error()})
			return
		}
	}
	scope, err := ParseScope(string(req.Scope))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "bad_request", Message: err.Error()})
		return
	}
	ttl := g.cfg.TTL
	if req.TTL != "" {
		if ttl, err = time.ParseDuration(req.TTL); err != nil || ttl <= 0 || ttl > maxTTL {
			writeJSON(w, http.StatusBadRequest, apiError{Error: "bad_request", Message: "ttl must be a duration in (0, 24h]"})
			return
		}
	}
	body := map[string]any{}
	if req.Resolution != "" {
		body["resolution"] = req.Resolution
	}
	if req.URL != "" {
		body["url"] = req.URL
	}
	if req.TabFollow != nil {
		body["tab_follow"] = *req.TabFollow
	}
	if len(req.Proxy) > 0 {
		body["proxy"] = req.Proxy
	}
	status, code, err := g.callDeskd(r.Context(), id, up, http.MethodPost, "/api/desktop/start", body)
	if err != nil {
		g.upstreamError(w, id, err)
		return
	}
	if code == http.StatusBadRequest { // deskd refused the request itself: say so
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "bad_request", "status": status})
		return
	}
	if code != http.StatusOK {
		writeJSON(w, http.StatusBadGateway, map[string]any{"error": "desktop_start_failed", "status": status})
		return
	}
	exp := g.cfg.Now().Add(ttl).Truncate(time.Second)
	tok, err := Mint(g.key(id), Claims{SID: id, Port: portOf(up), Exp: exp.Unix(), Scope: scope})
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError{Error: "mint_failed", Message: err.Error()})
		return
	}
	base := g.publicBase(r) + Prefix + tok
	writeJSON(w, http.StatusOK, StartResponse{
		DesktopURL:  base + "/vnc.html?autoconnect=true&resize=scale",
		TerminalURL: base + "/terminal/",
		CDPURL:      base + "/cdp",
		ExpiresAt:   exp.UTC(),
		Status:      status,
	})
}

func (g *Gateway) control(method, path string) func(http.ResponseWriter, *http.Request, string, *url.URL) {
	return func(w http.ResponseWriter, r *http.Request, id string, up *url.URL) {
		status, code, err := g.callDeskd(r.Context(), id, up, method, path, nil)
		if err != nil {
			g.upstreamError(w, id, err)
			return
		}
		if code != http.StatusOK {
			code = http.StatusBadGateway
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write(status)
	}
}

// errNotInstalled marks a sandbox where nothing answers on deskd's port.
var errNotInstalled = errors.New("deskd is not running in the sandbox")

func (g *Gateway) upstreamError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, errNotInstalled) {
		writeJSON(w, http.StatusUnprocessableEntity, apiError{Error: "desktop_not_installed", Message: err.Error()})
		return
	}
	g.cfg.Logger.Warn("deskd call failed", "sandbox", id, "err", err)
	writeJSON(w, http.StatusBadGateway, apiError{Error: "desktop_unreachable", Message: err.Error()})
}

// callDeskd calls deskd's API under a short-lived control token.
func (g *Gateway) callDeskd(ctx context.Context, id string, up *url.URL, method, path string, body any) (json.RawMessage, int, error) {
	tok, err := Mint(g.key(id), Claims{SID: id, Port: portOf(up), Exp: g.cfg.Now().Add(controlTTL).Unix(), Scope: ScopeFull})
	if err != nil {
		return nil, 0, err
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, up.JoinPath(Prefix+tok, path).String(), rd)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) {
			return nil, 0, fmt.Errorf("%w: %v", errNotInstalled, err)
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstream))
	if err != nil {
		return nil, 0, err
	}
	if !json.Valid(b) {
		return nil, 0, fmt.Errorf("deskd answered %s with non-JSON %.200q", resp.Status, b)
	}
	return b, resp.StatusCode, nil
}

// proxy forwards a /panel/<token>/ request, HTTP or WebSocket, to the
// token's sandbox. The path is kept: deskd verifies the token itself.
func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request) {
	tok, _, ok := SplitPath(r.URL.EscapedPath())
	if !ok {
		forbidden(w)
		return
	}
	sid, err := PeekSID(tok)
	if err != nil {
		forbidden(w)
		return
	}
	c, err := Verify(g.key(sid), tok, g.cfg.Now())
	if err != nil || c.SID != sid {
		forbidden(w)
		return
	}
	up, ok := g.cfg.Sandboxes[c.SID]
	if !ok || c.Port != portOf(up) {
		forbidden(w)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.URL.Path, pr.Out.URL.RawPath = r.URL.Path, r.URL.RawPath
			pr.Out.Host = up.Host
			pr.SetXForwarded() // X-Forwarded-For, -Host and -Proto
			pr.Out.Header.Set("X-Forwarded-Prefix", Prefix+tok)
		},
		FlushInterval: -1, // stream: event streams and large bodies pass at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			g.cfg.Logger.Warn("panel proxy", "sandbox", c.SID, "err", err)
			http.Error(w, "desktop unreachable", http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

// key is sandbox id's panel key.
func (g *Gateway) key(id string) []byte { return []byte(SandboxKey(g.cfg.Secret, id)) }

func forbidden(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte("forbidden\n"))
}

func (g *Gateway) publicBase(r *http.Request) string {
	if g.cfg.PublicURL != "" {
		return strings.TrimRight(g.cfg.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

func portOf(u *url.URL) int {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443
		}
		return 80
	}
	n, _ := strconv.Atoi(p)
	return n
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// ParseSandbox parses "id=http://host:port" as given to panelgw --sandbox.
func ParseSandbox(s string) (string, *url.URL, error) {
	id, raw, ok := strings.Cut(s, "=")
	if !ok || id == "" {
		return "", nil, fmt.Errorf("sandbox %q: want ID=URL", s)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, fmt.Errorf("sandbox %q: want an http(s) URL", s)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(portOf(u)))
	}
	return id, u, nil
}
