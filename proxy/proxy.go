// Package proxy is the desktop browser's way out through an upstream proxy
// that wants credentials. Chromium takes --proxy-server but no username
// or password (a person in noVNC would get a login prompt, an agent would
// have to answer Fetch.authRequired on every connection), so Chromium is
// pointed at a Local proxy on loopback, which adds the credentials
// upstream: CONNECT for HTTPS, absolute-form requests for plain HTTP, or
// a SOCKS5 CONNECT with username and password for either.
// Credentials never leave deskd's memory but towards the upstream proxy:
// not on a command line, in an environment, a log line or a status.
package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Upstream is the proxy the browser's traffic goes through.
type Upstream struct {
	URL      *url.URL // http://host:port or https://host:port, no credentials
	Username string
	Password string
}

// ParseUpstream checks server ("http://host:port", "https://host:port";
// a bare host:port is http) and takes the credentials from creds
// ("user:password", one line, as read from a file; "" for none).
// Credentials in the URL are refused: a URL ends up on command lines and
// in logs.
func ParseUpstream(server, creds string) (Upstream, error) {
	if !strings.Contains(server, "://") {
		server = "http://" + server
	}
	u, err := url.Parse(server)
	if err != nil {
		return Upstream{}, fmt.Errorf("proxy: %q: %w", redact(server), err)
	}
	if u.User != nil {
		return Upstream{}, errors.New("proxy: credentials in the proxy URL: give them in a file (--proxy-credentials-file)")
	}
	if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5" {
		return Upstream{}, fmt.Errorf("proxy: scheme %q: want http, https or socks5", u.Scheme)
	}
	if u.Hostname() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return Upstream{}, fmt.Errorf("proxy: %q: want scheme://host:port", u.Redacted())
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443", "socks5": "1080"}[u.Scheme])
	}
	u.Path = ""
	up := Upstream{URL: u}
	creds = strings.TrimRight(creds, "\r\n")
	if creds != "" {
		user, pass, ok := strings.Cut(creds, ":")
		if !ok || user == "" || strings.ContainsAny(creds, "\r\n") || len(creds) > 1024 {
			return Upstream{}, errors.New("proxy: credentials: want one line user:password (at most 1 KiB)")
		}
		if u.Scheme == "socks5" && (len(user) > 255 || len(pass) > 255) {
			return Upstream{}, errors.New("proxy: credentials: SOCKS5 takes at most 255 bytes of user and of password")
		}
		up.Username, up.Password = user, pass
	}
	return up, nil
}

// redact drops what a malformed URL might carry before an @.
func redact(s string) string {
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "…@" + s[i+1:]
	}
	return s
}

// String names the upstream without its credentials.
func (u Upstream) String() string { return u.URL.Scheme + "://" + u.URL.Host }

func (u Upstream) auth() string {
	if u.Username == "" {
		return ""
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username+":"+u.Password))
}

// Bounds of a Local proxy.
const (
	MaxConns  = 256      // connections from the browser at once
	maxHeader = 64 << 10 // a request's or response's header
)

// handshakeTime bounds reading a request, dialing the upstream and its
// answer (a variable for tests).
var handshakeTime = 15 * time.Second

// Local is the proxy on loopback that Chromium uses.
type Local struct {
	up  Upstream
	log *slog.Logger
	ln  net.Listener
	sem chan struct{}

	mu      sync.Mutex
	status  string // "" until the first answer, then "ok" or why not
	conns   map[net.Conn]struct{}
	closed  bool
	serving sync.WaitGroup
}

// Listen starts a Local proxy for up on 127.0.0.1 (a free port).
func Listen(up Upstream, log *slog.Logger) (*Local, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	l := &Local{up: up, log: log, ln: ln, sem: make(chan struct{}, MaxConns), conns: map[net.Conn]struct{}{}}
	l.serving.Add(1)
	go l.accept() // ends at Close
	return l, nil
}

// Addr is where Chromium is to send its traffic (--proxy-server).
func (l *Local) Addr() string { return l.ln.Addr().String() }

// Status is "" before any traffic, "ok" after the upstream last did what
// was asked, or why it did not (for deskd's status).
func (l *Local) Status() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}

func (l *Local) setStatus(s string) {
	l.mu.Lock()
	changed := l.status != s
	l.status = s
	l.mu.Unlock()
	if changed && s != "ok" {
		l.log.Warn("upstream proxy", "proxy", l.up.String(), "problem", s)
	} else if changed {
		l.log.Info("upstream proxy works", "proxy", l.up.String())
	}
}

// Close stops listening, closes every connection and waits for them.
func (l *Local) Close() {
	l.mu.Lock()
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.ln.Close()
	l.serving.Wait()
}

func (l *Local) accept() {
	defer l.serving.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		select {
		case l.sem <- struct{}{}:
		default: // over the bound: the browser retries
			c.Close()
			continue
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			c.Close()
			<-l.sem
			return
		}
		l.conns[c] = struct{}{}
		l.serving.Add(1)
		l.mu.Unlock()
		go func() { // ends when either side closes, or at Close
			defer l.serving.Done()
			defer func() { <-l.sem }()
			defer func() {
				l.mu.Lock()
				delete(l.conns, c)
				l.mu.Unlock()
				c.Close()
			}()
			l.serve(c)
		}()
	}
}

// serve answers one request from the browser: a CONNECT tunnel, or one
// plain HTTP request (the connection then closes).
func (l *Local) serve(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(handshakeTime))
	br, lim := headerReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		reply(c, http.StatusBadRequest, "bad proxy request")
		return
	}
	lim.lift()
	c.SetReadDeadline(time.Time{})
	if req.Method == http.MethodConnect {
		l.tunnel(c, br, req)
		return
	}
	if !req.URL.IsAbs() || req.URL.Scheme != "http" {
		reply(c, http.StatusBadRequest, "a proxy takes absolute http:// URLs and CONNECT")
		return
	}
	l.forward(c, req)
}

// dial opens a connection to the upstream proxy.
func (l *Local) dial(ctx context.Context) (net.Conn, error) {
	d := net.Dialer{Timeout: handshakeTime, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", l.up.URL.Host)
	if err != nil {
		return nil, err
	}
	if l.up.URL.Scheme == "https" {
		tc := tls.Client(c, &tls.Config{ServerName: l.up.URL.Hostname(), MinVersion: tls.VersionTLS12})
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return tc, nil
	}
	return c, nil
}

// refusal turns an upstream answer that is not 2xx into a status line
// and the browser's answer.
func (l *Local) refusal(resp *http.Response, what string) {
	switch resp.StatusCode {
	case http.StatusProxyAuthRequired:
		if l.up.Username == "" {
			l.setStatus("the upstream proxy wants credentials (407) and none are configured")
		} else {
			l.setStatus("the upstream proxy refused the credentials (407 Proxy Authentication Required)")
		}
	default:
		l.setStatus(fmt.Sprintf("the upstream proxy answered %s to %s", resp.Status, what))
	}
}

func (l *Local) tunnel(c net.Conn, br *bufio.Reader, req *http.Request) {
	target := req.Host
	if _, _, err := net.SplitHostPort(target); err != nil || len(target) > 512 {
		reply(c, http.StatusBadRequest, "CONNECT wants host:port")
		return
	}
	up := l.open(c)
	if up == nil {
		return
	}
	defer up.Close()
	if l.up.URL.Scheme == "socks5" {
		if err := socksConnect(up, target, l.up.Username, l.up.Password); err != nil {
			l.socksFailed(err)
			reply(c, http.StatusBadGateway, "upstream proxy refused the tunnel")
			return
		}
		l.setStatus("ok")
		up.SetDeadline(time.Time{})
		if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		splice(c, br, up, bufio.NewReader(up))
		return
	}
	out := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if a := l.up.auth(); a != "" {
		out.Header.Set("Proxy-Authorization", a)
	}
	resp, ubr := l.exchange(c, up, out, out.Write, "the connection", " to CONNECT")
	if resp == nil {
		return
	}
	if resp.StatusCode/100 != 2 {
		l.refusal(resp, "CONNECT")
		reply(c, http.StatusBadGateway, "upstream proxy refused the tunnel")
		return
	}
	l.setStatus("ok")
	up.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(c, br, up, ubr)
}

// splice copies both ways until either side ends; what the readers
// buffered goes first.
func splice(a net.Conn, ar *bufio.Reader, b net.Conn, brd *bufio.Reader) {
	done := make(chan struct{}, 2)
	cp := func(dst net.Conn, src io.Reader) {
		io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			tc.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go cp(b, ar) // ends when a's side ends or b fails
	go cp(a, brd)
	<-done
	// One way ended: the other gets a moment, then both close.
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		a.Close()
		b.Close()
		<-done
	}
}

// hopHeaders are a hop's own, never passed on.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Authenticate", "Te", "Trailer", "Upgrade"}

func (l *Local) forward(c net.Conn, req *http.Request) {
	up := l.open(c)
	if up == nil {
		return
	}
	defer up.Close()
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.Header.Set("Connection", "close")
	write := req.WriteProxy
	if l.up.URL.Scheme == "socks5" {
		// Through a SOCKS5 tunnel to the site, which takes the request
		// in origin form.
		target := req.URL.Host
		if req.URL.Port() == "" {
			target = net.JoinHostPort(req.URL.Hostname(), "80")
		}
		if err := socksConnect(up, target, l.up.Username, l.up.Password); err != nil {
			l.socksFailed(err)
			reply(c, http.StatusBadGateway, "upstream proxy refused the connection")
			return
		}
		write = req.Write
	} else if a := l.up.auth(); a != "" {
		req.Header.Set("Proxy-Authorization", a)
	}
	resp, _ := l.exchange(c, up, req, write, "the request", "")
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusProxyAuthRequired {
		l.refusal(resp, "a request")
		reply(c, http.StatusBadGateway, "upstream proxy refused the credentials")
		return
	}
	l.setStatus("ok")
	up.SetDeadline(time.Time{})
	resp.Close = true // one request a connection
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	resp.Write(c) // the body streams from the upstream
}

// open dials the upstream proxy, with the handshake's deadline set; nil:
// it is unreachable, which it recorded and told the browser.
func (l *Local) open(c net.Conn) net.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTime)
	defer cancel()
	up, err := l.dial(ctx)
	if err != nil {
		l.setStatus("the upstream proxy is unreachable: " + err.Error())
		reply(c, http.StatusBadGateway, "upstream proxy unreachable")
		return nil
	}
	up.SetDeadline(time.Now().Add(handshakeTime))
	return up
}

// exchange sends req to the upstream with write and reads its answer's
// header (bounded); the body follows from the returned reader. nil: it
// dropped the request or gave no answer, which it recorded (sent names
// what was sent, to what the request) and told the browser.
func (l *Local) exchange(c, up net.Conn, req *http.Request, write func(io.Writer) error, sent, to string) (*http.Response, *bufio.Reader) {
	if err := write(up); err != nil {
		l.setStatus("the upstream proxy dropped " + sent + ": " + err.Error())
		reply(c, http.StatusBadGateway, "upstream proxy failed")
		return nil, nil
	}
	ubr, lim := headerReader(up)
	resp, err := http.ReadResponse(ubr, req)
	if err != nil {
		l.setStatus("the upstream proxy gave no answer" + to + ": " + err.Error())
		reply(c, http.StatusBadGateway, "upstream proxy failed")
		return nil, nil
	}
	lim.lift()
	return resp, ubr
}

// socksFailed records why a SOCKS5 CONNECT failed.
func (l *Local) socksFailed(err error) {
	switch {
	case errors.Is(err, errSocksAuth) && l.up.Username == "":
		l.setStatus("the upstream SOCKS5 proxy wants credentials and none are configured")
	case errors.Is(err, errSocksAuth):
		l.setStatus(errSocksAuth.Error())
	case strings.HasPrefix(err.Error(), "the upstream"):
		l.setStatus(err.Error())
	default:
		l.setStatus("the upstream SOCKS5 proxy failed: " + err.Error())
	}
}

// reply answers the browser with a short plain-text error.
func reply(c net.Conn, code int, msg string) {
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		code, http.StatusText(code), len(msg)+1, msg)
}

// headerLimit bounds what a reader yields until it is lifted: a
// request's or response's header, never its body.
type headerLimit struct {
	r    io.Reader
	left int64
}

var errHeaderTooBig = errors.New("proxy: header over 64 KiB")

func (h *headerLimit) Read(p []byte) (int, error) {
	if h.left <= 0 {
		return 0, errHeaderTooBig
	}
	if int64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	h.left -= int64(n)
	return n, err
}

// lift ends the bound once the header is read.
func (h *headerLimit) lift() { h.left = 1 << 62 }

func headerReader(r io.Reader) (*bufio.Reader, *headerLimit) {
	h := &headerLimit{r: r, left: maxHeader}
	return bufio.NewReaderSize(h, 4096), h
}
