package rawconn

import (
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

// blockingPipe returns a pipe whose read end is in blocking mode, as
// os.File.Fd leaves a descriptor, and its write end.
func blockingPipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Fd() // blocking from here on
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func TestNonblockingFile(t *testing.T) {
	r, w := blockingPipe(t)
	nb, err := Nonblocking(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the original file still reads: %v", err)
	}
	f, err := NewFile(nb)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A read waits in the poller for what comes, then returns it.
	go func() {
		time.Sleep(20 * time.Millisecond)
		w.Write([]byte("hello"))
	}()
	b := make([]byte, 64)
	n, err := f.Read(b)
	if err != nil || string(b[:n]) != "hello" {
		t.Fatalf("Read = %q, %v", b[:n], err)
	}
	// Close wakes a reader that nothing else would.
	got := make(chan error, 1)
	go func() {
		_, err := f.Read(b)
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	f.Close()
	select {
	case err := <-got:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("Read after Close = %v, want os.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the reader")
	}
}

func TestFileWriteAllAndEOF(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fr, err := NewFile(r)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := NewFile(w)
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	// Far more than a pipe holds: Write waits while the reader drains.
	big := make([]byte, 4<<20)
	for i := range big {
		big[i] = byte(i * 13)
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(fr)
		got <- b
	}()
	if n, err := fw.Write(big); err != nil || n != len(big) {
		t.Fatalf("Write = %d, %v", n, err)
	}
	fw.Close()
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("read %d bytes, not what was written", len(b))
	}
	// A write to a pipe nobody reads is EPIPE, not a hang.
	r2, w2, _ := os.Pipe()
	r2.Close()
	fw2, _ := NewFile(w2)
	defer fw2.Close()
	if _, err := fw2.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("Write to a closed pipe = %v, want EPIPE", err)
	}
	var ctl int
	if err := fw2.Control(func(fd uintptr) error { ctl = int(fd); return nil }); err != nil || ctl <= 2 {
		t.Fatalf("Control gave fd %d, %v", ctl, err)
	}
}
