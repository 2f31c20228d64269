package testenv

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// Upstream proxies for tests: real proxies on loopback that demand
// credentials, the kind an agent sandbox's browser is sent through.
// Names ending in ".test" reach site (an address), whatever the port
// asked; other names are dialed as they are.

func route(host, site string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.HasSuffix(host, ".test") {
		return site
	}
	return ""
}

// AuthProxy is an HTTP proxy demanding Basic auth: CONNECT tunnels, and
// absolute-form requests passed to the site.
type AuthProxy struct {
	URL        string
	user, pass string
	site       string
	// Refuse, when set, answers CONNECT with this status.
	Refuse int
	mu     sync.Mutex
	auths  []string
}

// NewAuthProxy starts one; it stops at the test's end.
func NewAuthProxy(t testing.TB, user, pass, site string) *AuthProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &AuthProxy{URL: "http://" + ln.Addr().String(), user: user, pass: pass, site: site}
	srv := &http.Server{Handler: p}
	go srv.Serve(ln) // ends at Close
	t.Cleanup(func() { srv.Close() })
	return p
}

// Auths are the Proxy-Authorization headers it was sent.
func (p *AuthProxy) Auths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.auths...)
}

func (p *AuthProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := r.Header.Get("Proxy-Authorization")
	p.mu.Lock()
	p.auths = append(p.auths, a)
	p.mu.Unlock()
	if a != "Basic "+base64.StdEncoding.EncodeToString([]byte(p.user+":"+p.pass)) {
		w.Header().Set("Proxy-Authenticate", `Basic realm="test"`)
		http.Error(w, "who are you", http.StatusProxyAuthRequired)
		return
	}
	addr := route(r.Host, p.site)
	if r.Method == http.MethodConnect {
		if p.Refuse != 0 {
			http.Error(w, "not there", p.Refuse)
			return
		}
		if addr == "" {
			addr = r.Host
		}
		dst, err := net.Dial("tcp", addr)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer dst.Close()
		w.WriteHeader(http.StatusOK)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		go func() { io.Copy(dst, brw); dst.Close() }() // ends when either side closes
		io.Copy(c, dst)
		return
	}
	if addr == "" {
		http.Error(w, "this test proxy reaches *.test only", http.StatusBadGateway)
		return
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://"+addr+r.URL.RequestURI(), r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Host = r.Host
	out.Header = r.Header.Clone()
	out.Header.Del("Proxy-Authorization")
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// NewSocks5Proxy starts a SOCKS5 proxy demanding a username and password
// (RFC 1929) and returns its socks5:// URL; it stops at the test's end.
func NewSocks5Proxy(t testing.TB, user, pass, site string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() { // ends when ln closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { socksServe(c, user, pass, site) })
		}
	})
	return "socks5://" + ln.Addr().String()
}

func socksServe(c net.Conn, user, pass, site string) {
	defer c.Close()
	b := make([]byte, 256)
	if _, err := io.ReadFull(c, b[:2]); err != nil || b[0] != 5 {
		return
	}
	methods := b[2 : 2+int(b[1])]
	if _, err := io.ReadFull(c, methods); err != nil {
		return
	}
	if !strings.Contains(string(methods), "\x02") {
		c.Write([]byte{5, 0xff})
		return
	}
	c.Write([]byte{5, 2})
	field := func() string {
		var n [1]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return ""
		}
		f := make([]byte, n[0])
		io.ReadFull(c, f)
		return string(f)
	}
	io.ReadFull(c, b[:1]) // version 1
	if u, p := field(), field(); u != user || p != pass {
		c.Write([]byte{1, 1})
		return
	}
	c.Write([]byte{1, 0})
	if _, err := io.ReadFull(c, b[:4]); err != nil || b[1] != 1 || b[3] != 3 {
		c.Write([]byte{5, 7, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	host := field()
	io.ReadFull(c, b[:2])
	addr := net.JoinHostPort(host, fmt.Sprint(int(b[0])<<8|int(b[1])))
	if r := route(addr, site); r != "" {
		addr = r
	}
	dst, err := net.Dial("tcp", addr)
	if err != nil {
		c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	defer dst.Close()
	c.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 0})
	go func() { io.Copy(dst, c); dst.Close() }() // ends when either side closes
	io.Copy(c, dst)
}
