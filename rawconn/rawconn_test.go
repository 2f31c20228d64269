package rawconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pair returns two connected sockets of network, the first wrapped.
func pair(t *testing.T, network string) (net.Conn, net.Conn) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "s")
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial(network, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	w := Wrap(c)
	if _, ok := w.(*Conn); !ok {
		t.Fatalf("Wrap(%T) did not wrap", c)
	}
	t.Cleanup(func() { w.Close(); peer.Close() })
	return w, peer
}

func TestReadWrite(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			c, peer := pair(t, network)
			// A write far bigger than the socket buffers: Write waits in
			// the poller while the peer drains it, and returns all of it.
			big := make([]byte, 8<<20)
			for i := range big {
				big[i] = byte(i * 7)
			}
			got := make(chan []byte, 1)
			go func() {
				b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
				got <- b
			}()
			n, err := c.Write(big)
			if err != nil || n != len(big) {
				t.Fatalf("Write = %d, %v", n, err)
			}
			if b := <-got; !bytes.Equal(b, big) {
				t.Fatalf("peer read %d bytes, not what was written", len(b))
			}
			// Read waits for data, returns what came, then EOF when the
			// peer closes.
			go func() {
				time.Sleep(20 * time.Millisecond)
				peer.Write([]byte("hello"))
				peer.Close()
			}()
			b, err := io.ReadAll(c)
			if err != nil || string(b) != "hello" {
				t.Fatalf("ReadAll = %q, %v", b, err)
			}
			if n, err := c.Read(nil); n != 0 || err != nil {
				t.Fatalf("Read(nil) = %d, %v", n, err)
			}
		})
	}
}

func TestDeadlineAndClose(t *testing.T) {
	c, peer := pair(t, "tcp")
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 10))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read past its deadline: %v", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("deadline error %v is not a net.Error timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("deadline took %v", d)
	}
	// A write blocked on a full buffer ends at its deadline too.
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := c.Write(make([]byte, 64<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past its deadline: %v", err)
	}
	// Close wakes a reader waiting with no deadline.
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the reader")
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	_ = peer
}

func TestWriteToResetPeer(t *testing.T) {
	c, peer := pair(t, "tcp")
	peer.(*net.TCPConn).SetLinger(0)
	peer.Close() // RST
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write(make([]byte, 1<<16))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("write to a reset peer: %v, want a write OpError", err)
	}
}

func TestWrapLeavesOtherConns(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if w := Wrap(a); w != a {
		t.Fatalf("Wrap(net.Pipe) = %T, want it unchanged", w)
	}
}
