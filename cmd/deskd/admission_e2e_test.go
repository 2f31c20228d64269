package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cubepod/deskd/internal/testenv"
	"github.com/cubepod/deskd/panel"
)

// Nobody without a token locks the panel or the probes out. From one
// address (127.0.0.2), 2,000 connections to each port, half of them
// idle (nothing sent) and half answered 403 (and left open by the
// client): a request with a valid token from the gateway's address
// (127.0.0.1) still gets its page within 1 s, and the ops port's
// /healthz still answers within 1 s.
func TestConnectionFlood(t *testing.T) {
	const master, sid = "flood-master", "sbx"
	key := panel.SandboxKey([]byte(master), sid)
	dir := testenv.TempDir(t)
	keyFile := filepath.Join(dir, "panel.key")
	if err := os.WriteFile(keyFile, []byte(key), 0o644); err != nil {
		t.Fatal(err)
	}
	port := testenv.FreePort(t)
	listen := "127.0.0.1:" + strconv.Itoa(port)
	ops := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	args := []string{"serve", "--run-dir", filepath.Join(dir, "run"), "--listen", listen, "--ops-listen", ops,
		"--panel-secret-file", keyFile, "--sandbox-id", sid, "--cdp-port", strconv.Itoa(testenv.FreePort(t))}
	if os.Geteuid() == 0 {
		args = append(args, "--user", "1000:1000")
	}
	cmd := exec.Command(deskdBin, args...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		if t.Failed() {
			t.Logf("deskd log:\n%s", tail(logs.String(), 3000))
		}
	})
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	waitFor(t, 10*time.Second, "deskd serving", func() bool {
		resp, err := client.Get("http://" + ops + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	tok, err := panel.Mint([]byte(key), panel.Claims{SID: sid, Port: port, Exp: time.Now().Add(time.Hour).Unix()})
	if err != nil {
		t.Fatal(err)
	}

	// The flood, from 127.0.0.2.
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 5 * time.Second}
	var mu sync.Mutex
	var held []net.Conn
	var refused403, openErrs int
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	flood := func(addr string) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range 2000 {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				c, err := dialer.Dial("tcp", addr)
				if err != nil {
					mu.Lock()
					openErrs++
					mu.Unlock()
					return
				}
				if i%2 == 1 { // a request without a token: 403 (ops: 404), then left open
					fmt.Fprintf(c, "GET /vnc.html HTTP/1.1\r\nHost: %s\r\n\r\n", addr)
					c.SetReadDeadline(time.Now().Add(2 * time.Second))
					b := make([]byte, 12)
					if n, _ := io.ReadFull(c, b); n == 12 && string(b[9:12]) == "403" {
						mu.Lock()
						refused403++
						mu.Unlock()
					}
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	start := time.Now()
	flood(listen)
	flood(ops)
	t.Logf("4,000 connections from 127.0.0.2 in %v: %d answered 403, %d dials failed", time.Since(start).Round(time.Millisecond), refused403, openErrs)

	for _, try := range []struct{ name, url string }{
		{"the panel page with a valid token", "http://" + listen + "/panel/" + tok + "/vnc.html"},
		{"the ops /healthz", "http://" + ops + "/healthz"},
		{"the ops /readyz", "http://" + ops + "/readyz"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, try.url, nil)
		t0 := time.Now()
		resp, err := client.Do(req)
		cancel()
		if err != nil {
			t.Errorf("%s: %v after %v", try.name, err, time.Since(t0).Round(time.Millisecond))
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %s", try.name, resp.Status)
		}
		t.Logf("%s: %s in %v", try.name, resp.Status, time.Since(t0).Round(time.Millisecond))
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b = append(l.b, p...)
	l.mu.Unlock()
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
