package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// socksUpstream is a real SOCKS5 proxy on loopback that demands a
// username and password (RFC 1929); it connects names ending in ".test"
// to site, everything else as asked.
func socksUpstream(t *testing.T, user, pass, site string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // ends when ln closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := make([]byte, 600)
				if _, err := io.ReadFull(c, b[:2]); err != nil || b[0] != 5 {
					return
				}
				methods := b[2 : 2+int(b[1])]
				io.ReadFull(c, methods)
				if !strings.Contains(string(methods), "\x02") {
					c.Write([]byte{5, 0xff})
					return
				}
				c.Write([]byte{5, 2})
				io.ReadFull(c, b[:2])
				u := make([]byte, b[1])
				io.ReadFull(c, u)
				io.ReadFull(c, b[:1])
				p := make([]byte, b[0])
				io.ReadFull(c, p)
				if string(u) != user || string(p) != pass {
					c.Write([]byte{1, 1})
					return
				}
				c.Write([]byte{1, 0})
				io.ReadFull(c, b[:5])
				if b[1] != 1 || b[3] != 3 {
					c.Write([]byte{5, 7, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				host := make([]byte, b[4])
				io.ReadFull(c, host)
				io.ReadFull(c, b[:2])
				addr := net.JoinHostPort(string(host), fmt.Sprint(int(b[0])<<8|int(b[1])))
				if strings.HasSuffix(string(host), ".test") {
					addr = site
				}
				dst, err := net.Dial("tcp", addr)
				if err != nil {
					c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				defer dst.Close()
				c.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 0})
				go io.Copy(dst, c)
				io.Copy(c, dst)
			}()
		}
	}()
	return "socks5://" + ln.Addr().String()
}

func TestSocks5Upstream(t *testing.T) {
	site := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "site: %s %s", r.Host, r.URL)
	})}
	sl, _ := net.Listen("tcp", "127.0.0.1:0")
	go site.Serve(sl) // ends at Close
	defer site.Close()
	up := socksUpstream(t, "bob", "p@ss:word", sl.Addr().String())

	l := listenLocal(t, up, "bob:p@ss:word")
	// Plain HTTP: through a SOCKS5 tunnel, in origin form.
	resp, err := client(l).Get("http://www.site.test/a?b=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "site: www.site.test /a?b=1" || l.Status() != "ok" {
		t.Fatalf("%d %q, status %q", resp.StatusCode, b, l.Status())
	}
	// CONNECT: a tunnel to the site.
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT www.site.test:443 HTTP/1.1\r\nHost: www.site.test:443\r\n\r\nGET /tunnel HTTP/1.1\r\nHost: t.test\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	if string(b) != "site: t.test /tunnel" {
		t.Fatalf("through the tunnel: %q", b)
	}

	for _, tt := range []struct{ creds, status string }{
		{"bob:wrong", "refused the credentials"},
		{"", "wants credentials and none are configured"},
	} {
		l := listenLocal(t, up, tt.creds)
		resp, err := client(l).Get("http://www.site.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(l.Status(), tt.status) {
			t.Fatalf("creds %q: %d, status %q; want 502 and %q", tt.creds, resp.StatusCode, l.Status(), tt.status)
		}
	}
	// A target the proxy cannot reach: its refusal, named.
	l = listenLocal(t, up, "bob:p@ss:word")
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := dead.Addr().String()
	dead.Close()
	c2, _ := net.Dial("tcp", l.Addr())
	defer c2.Close()
	fmt.Fprintf(c2, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", deadAddr, deadAddr)
	if resp, err := http.ReadResponse(bufio.NewReader(c2), nil); err != nil || resp.StatusCode != http.StatusBadGateway || !strings.Contains(l.Status(), "connection refused") {
		t.Fatalf("unreachable target: %v %v, status %q", resp, err, l.Status())
	}
}
