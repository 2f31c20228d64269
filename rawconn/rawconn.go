// Package rawconn reads and writes sockets without telling the Go
// scheduler a system call is under way.
//
// Every read or write of a net.Conn goes through the runtime's
// entersyscall, and when the process has been idle that wakes the
// runtime's monitor thread (sysmon) from its deep sleep; it then polls
// every 20 µs for as long as any goroutine runs. On a desktop that sends
// a small update per keystroke that polling was more than half of
// deskd's thread switches, and a thread switch is what an update costs
// most under a hypervisor. A read or write of a non-blocking socket
// returns at once (EAGAIN when it would block), so it needs none of
// that: here it is made with a raw system call inside the connection's
// own RawConn, which still parks the goroutine in the network poller
// until the socket is ready and still honours deadlines and Close.
package rawconn

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Conn is a net.Conn whose Read and Write are raw system calls.
type Conn struct {
	net.Conn
	rc syscall.RawConn
}

// Wrap returns c reading and writing with raw system calls when c is a
// socket of the net package (TCP, Unix), else c itself.
func Wrap(c net.Conn) net.Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return c
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return c
	}
	return &Conn{Conn: c, rc: rc}
}

// Read reads what the socket has, waiting in the poller when it has
// nothing. A closed peer is io.EOF.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := c.call(c.rc.Read, syscall.SYS_READ, "read", p)
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

// Write writes all of p, waiting in the poller while the socket's
// buffer is full.
func (c *Conn) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		n, err := c.call(c.rc.Write, syscall.SYS_WRITE, "write", p)
		if err != nil {
			return total, err
		}
		if n <= 0 { // a socket never does this; a loop must not spin on it
			return total, io.ErrShortWrite
		}
		total += n
		p = p[n:]
	}
	return total, nil
}

// call makes the raw system call trap (read or write) on p once the
// socket is ready; see rawCall.
func (c *Conn) call(wait func(func(uintptr) bool) error, trap uintptr, op string, p []byte) (int, error) {
	n, errno, err := rawCall(wait, trap, p)
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, &net.OpError{Op: op, Net: c.LocalAddr().Network(), Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
	}
	return n, nil
}

// rawCall makes the raw system call trap (read or write) on p through
// wait (a RawConn's Read or Write, which parks the goroutine in the
// poller while the call says EAGAIN); EINTR is retried at once. err is
// the RawConn's (closed, deadline), errno the call's.
func rawCall(wait func(func(uintptr) bool) error, trap uintptr, p []byte) (n int, errno syscall.Errno, err error) {
	err = wait(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // wait until ready
			}
			n, errno = int(r), e
			return true
		}
	})
	return n, errno, err
}
