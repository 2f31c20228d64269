// Package panel mints and verifies the gateway's signed panel tokens and
// provides the reference gateway that proxies /panel/<token>/ to deskd.
//
// Wire format of a token (both parts base64url without padding):
//
//	base64url(json{"sid","port","exp","scope"}) "." base64url(HMAC-SHA256(secret, payload))
//
// where payload is the first part as it appears in the token (the encoded
// JSON), exp is a Unix time in seconds and scope restricts what the token
// may do (see Scope).
package panel

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxTokenLen bounds a token before any decoding happens. Real tokens are
// around 150 bytes; anything near this bound is garbage.
const MaxTokenLen = 2048

// MaxSIDLen bounds a sandbox id.
const MaxSIDLen = 256

// Scope says what a token may do.
type Scope string

const (
	// ScopeFull allows everything: desktop input, terminal input, CDP and
	// the desktop API. An empty scope means full, so tokens minted by a
	// gateway that knows nothing of scopes keep working.
	ScopeFull Scope = "full"
	// ScopeView allows looking only: the desktop without input, the
	// terminal read-only, no CDP and no desktop API.
	ScopeView Scope = "view"
)

// ParseScope accepts the scopes this package knows; "" means ScopeFull.
func ParseScope(s string) (Scope, error) {
	switch Scope(s) {
	case "", ScopeFull:
		return ScopeFull, nil
	case ScopeView:
		return ScopeView, nil
	}
	return "", fmt.Errorf("panel: unknown scope %q", s)
}

// Claims is the signed content of a token.
type Claims struct {
	SID   string `json:"sid"`
	Port  int    `json:"port"`
	Exp   int64  `json:"exp"`
	Scope Scope  `json:"scope,omitempty"`
}

// ReadOnly reports whether the claims forbid input and control.
func (c Claims) ReadOnly() bool { return c.Scope == ScopeView }

// ExpiresAt is Exp as a time.
func (c Claims) ExpiresAt() time.Time { return time.Unix(c.Exp, 0).UTC() }

// Errors returned by Verify; callers answer all of them with 403.
var (
	ErrMalformed = errors.New("panel: malformed token")
	ErrSignature = errors.New("panel: bad token signature")
	ErrExpired   = errors.New("panel: token expired")
)

var b64 = base64.RawURLEncoding

// Mint signs claims with secret.
func Mint(secret []byte, c Claims) (string, error) {
	if len(secret) == 0 {
		return "", errors.New("panel: empty secret")
	}
	if _, err := ParseScope(string(c.Scope)); err != nil {
		return "", err
	}
	if c.Port < 0 || c.Port > 65535 {
		return "", fmt.Errorf("panel: port %d out of range", c.Port)
	}
	if len(c.SID) > MaxSIDLen {
		return "", fmt.Errorf("panel: sid longer than %d bytes", MaxSIDLen)
	}
	js, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("panel: encode claims: %w", err)
	}
	payload := b64.EncodeToString(js)
	tok := payload + "." + b64.EncodeToString(sign(secret, payload))
	if len(tok) > MaxTokenLen {
		return "", fmt.Errorf("panel: token of %d bytes exceeds %d", len(tok), MaxTokenLen)
	}
	return tok, nil
}

// Verify checks tok's signature in constant time, then its expiry against
// now, and returns its claims.
func Verify(secret []byte, tok string, now time.Time) (Claims, error) {
	if len(secret) == 0 {
		return Claims{}, errors.New("panel: empty secret")
	}
	if len(tok) > MaxTokenLen {
		return Claims{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxTokenLen)
	}
	payload, sig, ok := strings.Cut(tok, ".")
	if !ok || payload == "" || sig == "" {
		return Claims{}, fmt.Errorf("%w: want payload.signature", ErrMalformed)
	}
	got, err := b64.DecodeString(sig)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: signature: %v", ErrMalformed, err)
	}
	// The signature is checked before the payload is parsed, so nothing
	// an attacker writes reaches the JSON decoder unsigned.
	if !hmac.Equal(got, sign(secret, payload)) {
		return Claims{}, ErrSignature
	}
	js, err := b64.DecodeString(payload)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	var c Claims
	if err := json.Unmarshal(js, &c); err != nil {
		return Claims{}, fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	if c.Scope, err = ParseScope(string(c.Scope)); err != nil {
		return Claims{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if c.Port < 0 || c.Port > 65535 {
		return Claims{}, fmt.Errorf("%w: port %d out of range", ErrMalformed, c.Port)
	}
	if len(c.SID) > MaxSIDLen {
		return Claims{}, fmt.Errorf("%w: sid longer than %d bytes", ErrMalformed, MaxSIDLen)
	}
	if c.Exp == 0 || !now.Before(c.ExpiresAt()) {
		return Claims{}, ErrExpired
	}
	return c, nil
}

// SandboxKey derives a sandbox's own panel key from the gateway's master
// secret: hex(HMAC-SHA256(master, "deskd panel key v1\x00" + sid)). The
// gateway signs a sandbox's tokens with it and the sandbox's deskd holds
// only it, so a sandbox that leaks its key cannot mint tokens for another.
func SandboxKey(master []byte, sid string) string {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("deskd panel key v1\x00"))
	m.Write([]byte(sid))
	return hex.EncodeToString(m.Sum(nil))
}

// PeekSID returns the sid a token claims, without checking its signature:
// a gateway needs it to pick the key it verifies the token with. Nothing
// else of an unverified token may be trusted.
func PeekSID(tok string) (string, error) {
	if len(tok) > MaxTokenLen {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxTokenLen)
	}
	payload, _, ok := strings.Cut(tok, ".")
	if !ok || payload == "" {
		return "", fmt.Errorf("%w: want payload.signature", ErrMalformed)
	}
	js, err := b64.DecodeString(payload)
	if err != nil {
		return "", fmt.Errorf("%w: payload: %v", ErrMalformed, err)
	}
	var c struct {
		SID string `json:"sid"`
	}
	if err := json.Unmarshal(js, &c); err != nil {
		return "", fmt.Errorf("%w: claims: %v", ErrMalformed, err)
	}
	if c.SID == "" || len(c.SID) > MaxSIDLen {
		return "", fmt.Errorf("%w: sid missing or too long", ErrMalformed)
	}
	return c.SID, nil
}

func sign(secret []byte, payload string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// Prefix is the path prefix under which a token is presented.
const Prefix = "/panel/"

// SplitPath splits "/panel/<tok>/rest" into the token and "/rest". A path
// that is exactly "/panel/<tok>" yields rest "" (callers redirect to add
// the slash, so relative URLs in pages resolve under the prefix).
func SplitPath(p string) (tok, rest string, ok bool) {
	s, found := strings.CutPrefix(p, Prefix)
	if !found {
		return "", "", false
	}
	tok, rest, slash := strings.Cut(s, "/")
	if tok == "" {
		return "", "", false
	}
	if slash {
		rest = "/" + rest
	}
	return tok, rest, true
}
