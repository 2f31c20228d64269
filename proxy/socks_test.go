package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/cubepod/deskd/internal/testenv"
)

func TestSocks5Upstream(t *testing.T) {
	up := testenv.NewSocks5Proxy(t, "bob", "p@ss:word", newSite(t))

	l := listenLocal(t, up, "bob:p@ss:word")
	// Plain HTTP: through a SOCKS5 tunnel, in origin form.
	resp, err := client(l).Get("http://www.site.test/a?b=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != `site: GET www.site.test /a?b=1 "" ""` || l.Status() != "ok" {
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
	if string(b) != `site: GET t.test /tunnel "" ""` {
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
