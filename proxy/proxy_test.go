package proxy

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
)

// newSite is the web site behind the proxies: it echoes what it got.
func newSite(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "site: %s %s %s %q %q", r.Method, r.Host, r.URL, r.Header.Get("X-Test"), r.Header.Get("Proxy-Authorization"))
	})}
	go srv.Serve(ln) // ends at Close
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func listenLocal(t *testing.T, server, creds string) *Local {
	t.Helper()
	up, err := ParseUpstream(server, creds)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Listen(up, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// client is a browser using l as its proxy.
func client(l *Local) *http.Client {
	pu, _ := url.Parse("http://" + l.Addr())
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
}

func TestPlainHTTPThroughUpstream(t *testing.T) {
	up := testenv.NewAuthProxy(t, "alice", "s3cr:et", newSite(t))
	l := listenLocal(t, up.URL, "alice:s3cr:et\n")
	req, _ := http.NewRequest("GET", "http://site.test/page?q=1", nil)
	req.Header.Set("X-Test", "kept")
	req.Header.Set("Proxy-Authorization", "Basic ZXZpbDpldmls") // the browser's own: replaced
	resp, err := client(l).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `site: GET site.test /page?q=1 "kept" ""` {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	if l.Status() != "ok" {
		t.Fatalf("status %q", l.Status())
	}
	if got := up.Auths()[0]; got != "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:s3cr:et")) {
		t.Fatalf("upstream saw %q", got)
	}
}

func TestTunnelThroughUpstream(t *testing.T) {
	up := testenv.NewAuthProxy(t, "alice", "pw", "")
	l := listenLocal(t, up.URL, "alice:pw")
	// A site on loopback that answers over the tunnel.
	site, _ := net.Listen("tcp", "127.0.0.1:0")
	defer site.Close()
	go func() {
		for {
			c, err := site.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, io.LimitReader(c, 1<<20)) }() // echo
		}
	}()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\nearly bytes|", site.Addr(), site.Addr())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	big := strings.Repeat("0123456789", 100_000) // 1 MB through the tunnel
	go fmt.Fprint(c, big)
	got := make([]byte, len("early bytes|")+len(big))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "early bytes|"+big {
		t.Fatalf("echo through the tunnel: %v (%d bytes)", err, len(got))
	}
}

func TestUpstreamRefusals(t *testing.T) {
	old := handshakeTime
	handshakeTime = 500 * time.Millisecond
	defer func() { handshakeTime = old }()
	up := testenv.NewAuthProxy(t, "alice", "right", "")
	refusing := testenv.NewAuthProxy(t, "alice", "right", "")
	refusing.Refuse = http.StatusForbidden
	silent, _ := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	huge, _ := net.Listen("tcp", "127.0.0.1:0") // answers with a header without end
	defer huge.Close()
	go func() {
		for {
			c, err := huge.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Big: ")
				for range 200 {
					if _, err := io.WriteString(c, strings.Repeat("a", 1024)); err != nil {
						return
					}
				}
			}()
		}
	}()
	tests := []struct {
		name, server, creds, status string
		connect                     bool
	}{
		{"wrong password", up.URL, "alice:wrong", "refused the credentials (407", false},
		{"wrong password, tunnel", up.URL, "alice:wrong", "refused the credentials (407", true},
		{"no credentials", up.URL, "", "wants credentials (407) and none are configured", false},
		{"CONNECT refused", refusing.URL, "alice:right", "answered 403 Forbidden to CONNECT", true},
		{"upstream silent", "http://" + silent.Addr().String(), "alice:right", "gave no answer", true},
		{"upstream gone", "http://" + deadAddr, "alice:right", "unreachable", false},
		{"upstream header without end", "http://" + huge.Addr().String(), "alice:right", "gave no answer", true},
		{"upstream header without end, request", "http://" + huge.Addr().String(), "alice:right", "gave no answer", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := listenLocal(t, tt.server, tt.creds)
			code := 0
			if tt.connect {
				c, err := net.Dial("tcp", l.Addr())
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(c, "CONNECT site.test:443 HTTP/1.1\r\nHost: site.test:443\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				c.Close()
				if err != nil {
					t.Fatal(err)
				}
				code = resp.StatusCode
			} else {
				resp, err := client(l).Get("http://site.test/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				code = resp.StatusCode
			}
			if code != http.StatusBadGateway || !strings.Contains(l.Status(), tt.status) {
				t.Fatalf("browser got %d, status %q; want 502 and %q", code, l.Status(), tt.status)
			}
			if strings.Contains(l.Status(), "right") || strings.Contains(l.Status(), "wrong") {
				t.Fatalf("status %q names a password", l.Status())
			}
		})
	}
}

// Hostile browsers' requests get a clear 400 and cost a bounded header.
func TestHostileRequests(t *testing.T) {
	old := handshakeTime
	handshakeTime = time.Second
	defer func() { handshakeTime = old }()
	up := testenv.NewAuthProxy(t, "a", "b", "")
	l := listenLocal(t, up.URL, "a:b")
	tests := []struct{ name, raw string }{
		{"garbage", "\x16\x03\x01 not http\r\n\r\n"},
		{"relative GET", "GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"ftp", "GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"CONNECT without a port", "CONNECT site.test HTTP/1.1\r\nHost: site.test\r\n\r\n"},
		{"huge header", "GET http://x/ HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n"},
		{"slow", "GET http://x/ HTTP/1.1\r\n"}, // never ends its header
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go io.WriteString(c, tt.raw)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%v %v; want 400", resp, err)
			}
		})
	}
	if s := l.Status(); s != "" {
		t.Fatalf("the browser's bad requests changed the upstream's status to %q", s)
	}
}

func TestParseUpstream(t *testing.T) {
	tests := []struct {
		server, creds, want, err string
	}{
		{"http://proxy.corp:3128", "u:p", "http://proxy.corp:3128", ""},
		{"proxy.corp:3128", "", "http://proxy.corp:3128", ""},
		{"https://proxy.corp", "u:p:with:colons", "https://proxy.corp:443", ""},
		{"http://u:p@proxy.corp:3128", "", "", "credentials in the proxy URL"},
		{"socks4://proxy:1080", "", "", "want http, https or socks5"},
		{"socks5://proxy", "u:p", "socks5://proxy:1080", ""},
		{"socks5://proxy:1080", "u:" + strings.Repeat("p", 300), "", "at most 255 bytes"},
		{"http://proxy:3128/path", "", "", "want scheme://host:port"},
		{"http://:3128", "", "", "want scheme://host:port"},
		{"http://proxy:3128", "nocolon", "", "want one line user:password"},
		{"http://proxy:3128", ":nouser", "", "want one line user:password"},
		{"http://proxy:3128", "u:p\nsecond", "", "want one line user:password"},
		{"http://proxy:3128", "u:" + strings.Repeat("p", 2000), "", "at most 1 KiB"},
		{"http://a b:1", "", "", "proxy"},
	}
	for _, tt := range tests {
		up, err := ParseUpstream(tt.server, tt.creds)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseUpstream(%q) = %v; want error %q", tt.server, err, tt.err)
		case tt.err == "" && (err != nil || up.String() != tt.want):
			t.Errorf("ParseUpstream(%q) = %v, %v; want %s", tt.server, up, err, tt.want)
		case err != nil && (strings.Contains(err.Error(), ":p@") || strings.Contains(err.Error(), "pppp")):
			t.Errorf("error %q shows a credential", err)
		}
	}
}

func FuzzParseUpstream(f *testing.F) {
	f.Add("http://proxy:3128", "u:p")
	f.Add("https://u:p@x", "")
	f.Fuzz(func(t *testing.T, server, creds string) {
		up, err := ParseUpstream(server, creds)
		if err != nil {
			if _, pass, ok := strings.Cut(creds, ":"); ok && len(pass) > 3 && strings.Contains(err.Error(), pass) {
				t.Fatalf("error %q shows the password", err)
			}
			return
		}
		if up.URL.User != nil || strings.Contains(up.String(), "@") {
			t.Fatalf("%q: credentials kept in the URL: %s", server, up)
		}
	})
}

func TestSwitch(t *testing.T) {
	s := NewSwitch(nil)
	defer s.Close()
	if f := s.ChromiumFlags(); f != nil || s.Status() != "" {
		t.Fatalf("direct: flags %v, status %q", f, s.Status())
	}
	c := Config{Server: "http://proxy.corp:3128", Username: "alice", Password: "hunter2", Bypass: []string{"*.internal", "<local>"}}
	if changed, err := s.Set(c); !changed || err != nil {
		t.Fatalf("Set = %v, %v", changed, err)
	}
	f := strings.Join(s.ChromiumFlags(), " ")
	if !strings.HasPrefix(f, "--proxy-server=http://127.0.0.1:") || !strings.Contains(f, "--proxy-bypass-list=*.internal;<local>") || strings.Contains(f, "hunter2") || strings.Contains(f, "alice") {
		t.Fatalf("flags %q", f)
	}
	if st := s.Status(); st != "http://proxy.corp:3128: not used yet" {
		t.Fatalf("status %q", st)
	}
	if changed, _ := s.Set(c); changed {
		t.Fatal("the same setting counted as a change")
	}
	c.Password = "hunter3"
	if changed, _ := s.Set(c); !changed {
		t.Fatal("a new password is no change")
	}
	for _, bad := range []Config{
		{Server: "http://u:p@proxy:1"},
		{Server: "ftp://proxy:1"},
		{Server: "http://proxy:1", Username: "a:b", Password: "c"},
		{Server: "http://proxy:1", Bypass: []string{"bad host"}},
		{Server: "http://proxy:1", Bypass: []string{"x;--renderer-cmd-prefix=sh"}},
		{Server: "http://proxy:1", Bypass: make([]string, maxBypass+1)},
	} {
		if changed, err := s.Set(bad); err == nil || changed {
			t.Errorf("Set(%+v) = %v, %v; want an error and no change", bad, changed, err)
		} else if strings.Contains(err.Error(), "hunter") {
			t.Errorf("error %q shows a password", err)
		}
	}
	if changed, err := s.Set(Config{}); !changed || err != nil || s.ChromiumFlags() != nil {
		t.Fatalf("back to direct: %v %v %v", changed, err, s.ChromiumFlags())
	}
}
