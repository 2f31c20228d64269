package panel

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var (
	secret = []byte("test-secret-0123456789")
	now    = time.Unix(1_800_000_000, 0)
)

func mint(t *testing.T, c Claims) string {
	t.Helper()
	tok, err := Mint(secret, c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestVerify(t *testing.T) {
	good := Claims{SID: "sb-1", Port: 8080, Exp: now.Add(time.Hour).Unix(), Scope: ScopeView}
	tok := mint(t, good)
	payload, sig, _ := strings.Cut(tok, ".")
	flip := func(s string) string { // change one character, keeping base64url
		b := []byte(s)
		if b[len(b)/2] == 'A' {
			b[len(b)/2] = 'B'
		} else {
			b[len(b)/2] = 'A'
		}
		return string(b)
	}
	tests := []struct {
		name    string
		tok     string
		secret  []byte
		want    Claims
		wantErr error
	}{
		{name: "good", tok: tok, secret: secret, want: good},
		{name: "empty scope is full", tok: mint(t, Claims{SID: "a", Exp: now.Add(time.Minute).Unix()}), secret: secret,
			want: Claims{SID: "a", Exp: now.Add(time.Minute).Unix(), Scope: ScopeFull}},
		{name: "other secret", tok: tok, secret: []byte("other"), wantErr: ErrSignature},
		{name: "tampered payload", tok: flip(payload) + "." + sig, secret: secret, wantErr: ErrSignature},
		{name: "tampered signature", tok: payload + "." + flip(sig), secret: secret, wantErr: ErrSignature},
		{name: "truncated signature", tok: payload + "." + sig[:10], secret: secret, wantErr: ErrSignature},
		{name: "expired", tok: mint(t, Claims{SID: "a", Exp: now.Unix()}), secret: secret, wantErr: ErrExpired},
		{name: "no exp", tok: mint(t, Claims{SID: "a"}), secret: secret, wantErr: ErrExpired},
		{name: "no dot", tok: payload, secret: secret, wantErr: ErrMalformed},
		{name: "empty", tok: "", secret: secret, wantErr: ErrMalformed},
		{name: "bad base64 sig", tok: payload + ".***", secret: secret, wantErr: ErrMalformed},
		{name: "too long", tok: strings.Repeat("a", MaxTokenLen+1), secret: secret, wantErr: ErrMalformed},
		{name: "signed garbage", tok: signed("not json"), secret: secret, wantErr: ErrMalformed},
		{name: "signed unknown scope", tok: signed(`{"sid":"a","exp":9999999999,"scope":"root"}`), secret: secret, wantErr: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Verify(tt.secret, tt.tok, now)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Verify = %+v, %v; want error %v", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Verify = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// signed makes a correctly signed token around an arbitrary payload.
func signed(js string) string {
	p := b64.EncodeToString([]byte(js))
	return p + "." + b64.EncodeToString(sign(secret, p))
}

func TestMintRejects(t *testing.T) {
	for _, c := range []Claims{
		{SID: "a", Exp: 1, Scope: "admin"},
		{SID: "a", Exp: 1, Port: 70000},
		{SID: strings.Repeat("x", MaxSIDLen+1), Exp: 1},
	} {
		if tok, err := Mint(secret, c); err == nil {
			t.Errorf("Mint(%+v) = %q, want error", c, tok)
		}
	}
	if _, err := Mint(nil, Claims{SID: "a", Exp: 1}); err == nil {
		t.Error("Mint with empty secret succeeded")
	}
}

func TestSplitPath(t *testing.T) {
	tests := []struct {
		in, tok, rest string
		ok            bool
	}{
		{"/panel/abc.def/vnc.html", "abc.def", "/vnc.html", true},
		{"/panel/abc/", "abc", "/", true},
		{"/panel/abc", "abc", "", true},
		{"/panel/abc/a/b?x", "abc", "/a/b?x", true},
		{"/panel/", "", "", false},
		{"/panel//x", "", "", false},
		{"/vnc.html", "", "", false},
		{"/panelx/abc/", "", "", false},
	}
	for _, tt := range tests {
		tok, rest, ok := SplitPath(tt.in)
		if tok != tt.tok || rest != tt.rest || ok != tt.ok {
			t.Errorf("SplitPath(%q) = %q, %q, %v; want %q, %q, %v", tt.in, tok, rest, ok, tt.tok, tt.rest, tt.ok)
		}
	}
}

// FuzzVerify: no input crashes Verify, and whatever verifies re-mints to
// claims that verify the same.
func FuzzVerify(f *testing.F) {
	f.Add(signed(`{"sid":"a","port":1,"exp":9999999999}`))
	f.Add(signed(`{"sid":"a","exp":9999999999,"scope":"view"}`))
	f.Add("a.b")
	f.Add("")
	f.Add(".")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := Verify(secret, tok, now)
		if err != nil {
			return
		}
		tok2, err := Mint(secret, c)
		if err != nil {
			t.Fatalf("verified claims %+v do not re-mint: %v", c, err)
		}
		again, err := Verify(secret, tok2, now)
		if err != nil || again != c {
			t.Fatalf("re-minted %+v verifies as %+v, %v", c, again, err)
		}
	})
}

// FuzzVerifySigned reaches the claims decoder with signed payloads.
func FuzzVerifySigned(f *testing.F) {
	f.Add(`{"sid":"a","port":1,"exp":9999999999}`)
	f.Add(`{"exp":1e400}`)
	f.Add(`{"scope":5}`)
	f.Add(`{"sid":"a","port":70000,"exp":9999999999}`)
	// from the hostile suite (bench/hostile.go)
	f.Add(`{"sid":"sb-hostile","port":8080,"exp":9999999999,"scope":"root"}`)
	f.Add(`{"sid":"sb-hostile","port":8080}`)
	f.Add(`sid=sb-hostile`)
	f.Fuzz(func(t *testing.T, js string) {
		c, err := Verify(secret, signed(js), now)
		if err != nil {
			return
		}
		if !now.Before(c.ExpiresAt()) {
			t.Fatalf("expired claims %+v verified", c)
		}
		if _, err := Mint(secret, c); err != nil {
			t.Fatalf("verified claims %+v do not re-mint: %v", c, err)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	tok, _ := Mint(secret, Claims{SID: "sb-1", Port: 8080, Exp: now.Add(time.Hour).Unix()})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Verify(secret, tok, now); err != nil {
			b.Fatal(err)
		}
	}
}
