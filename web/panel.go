package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cubepod/deskd/panel"
)

// errOtherPort refuses a token minted for another port of the sandbox.
var errOtherPort = errors.New("panel token is for another port")

type claimsKey struct{}
type prefixKey struct{}
type sessionKey struct{}

// sessionKeyFrom is the key under which the request's panel session is
// counted.
func sessionKeyFrom(r *http.Request) string {
	k, _ := r.Context().Value(sessionKey{}).(string)
	return k
}

// ClaimsFrom returns the panel claims of a request that passed the check.
func ClaimsFrom(ctx context.Context) (panel.Claims, bool) {
	c, ok := ctx.Value(claimsKey{}).(panel.Claims)
	return c, ok
}

func (s *Server) withClaims(next http.Handler, c panel.Claims) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, c)))
	})
}

// withPanel enforces the panel token when a secret is configured: only
// paths under a valid /panel/<token>/ are served, with the prefix
// stripped; anything else gets 403 and nothing more. Without a secret
// every request has full claims (deskd then listens on loopback only).
func (s *Server) withPanel(next http.Handler) http.Handler {
	if len(s.cfg.PanelSecret) == 0 {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !hostAllowed(r.Host, s.cfg.AllowHosts) {
				s.log.Debug("host refused", "host", r.Host, "remote", r.RemoteAddr)
				w.Header().Set("Connection", "close")
				http.Error(w, "forbidden: Host "+strconvQuote(r.Host)+" is not a loopback name (see --allow-host)", http.StatusForbidden)
				return
			}
			if !s.sameOrigin(w, r) {
				return
			}
			trustConn(r.Context())
			key := clientKey(r)
			s.sessions.seen(key, time.Now())
			ctx := context.WithValue(r.Context(), claimsKey{}, panel.Claims{Scope: panel.ScopeFull})
			next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, sessionKey{}, key)))
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// EscapedPath keeps a token's bytes as sent; tokens are base64url,
		// so a token needing escapes is not a token.
		tok, rest, ok := panel.SplitPath(r.URL.EscapedPath())
		if !ok {
			forbid(w)
			return
		}
		c, err := panel.Verify(s.cfg.PanelSecret, tok, time.Now())
		if err == nil && s.cfg.SandboxID != "" && c.SID != s.cfg.SandboxID {
			err = panel.ErrSignature
		}
		// A token is for one port of the sandbox: one the gateway minted
		// for an app on another port must not open the panel.
		if err == nil && c.Port != 0 && s.cfg.HTTPPort != 0 && c.Port != s.cfg.HTTPPort {
			err = errOtherPort
		}
		if err != nil {
			s.log.Debug("panel token refused", "err", err, "remote", r.RemoteAddr)
			forbid(w)
			return
		}
		trustConn(r.Context())
		prefix := panel.Prefix + tok
		if rest == "" { // relative URLs in the pages need the slash
			u := *r.URL
			u.Path, u.RawPath = prefix+"/", ""
			http.Redirect(w, r, u.RequestURI(), http.StatusMovedPermanently)
			return
		}
		if !s.sameOrigin(w, r) {
			return
		}
		key := tokenKey(tok)
		s.sessions.seen(key, time.Now())
		ctx := context.WithValue(r.Context(), claimsKey{}, c)
		ctx = context.WithValue(ctx, prefixKey{}, prefix)
		r2 := r.Clone(context.WithValue(ctx, sessionKey{}, key))
		r2.URL.RawPath = ""
		r2.URL.Path = unescapePath(rest)
		r2.RequestURI = ""
		next.ServeHTTP(w, r2)
	})
}

// sameOrigin refuses a request that may change something (any method
// but GET, HEAD and OPTIONS) sent by a page of another origin.
func (s *Server) sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	if err := checkOrigin(r, s.cfg.AllowOrigins); err != nil {
		s.log.Warn("cross-origin request refused", "method", r.Method, "path", r.URL.Path, "err", err)
		forbid(w)
		return false
	}
	return true
}

// hostAllowed reports whether a request's Host names this machine's
// loopback (localhost, 127.0.0.0/8, ::1) or one of allow.
func hostAllowed(hostport string, allow []string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range allow {
		if strings.EqualFold(a, host) || strings.EqualFold(a, hostport) {
			return true
		}
	}
	return false
}

func strconvQuote(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return strconv.Quote(s)
}

func unescapePath(p string) string {
	u, err := url.PathUnescape(p)
	if err != nil {
		return p
	}
	return u
}

func forbid(w http.ResponseWriter) {
	// The connection goes with the answer: a refused client must not keep
	// a slot (see Admission).
	w.Header().Set("Connection", "close")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte("forbidden\n"))
}

// requireFull refuses requests whose token is view-only.
func (s *Server) requireFull(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if c, ok := ClaimsFrom(r.Context()); !ok || c.ReadOnly() {
			forbid(w)
			return
		}
		h(w, r)
	}
}

func tokenKey(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return "t:" + hex.EncodeToString(h[:8])
}

func clientKey(r *http.Request) string {
	host := r.RemoteAddr
	if i := strings.LastIndexByte(host, ':'); i > 0 {
		host = host[:i]
	}
	return "c:" + host
}
