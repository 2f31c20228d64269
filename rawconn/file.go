package rawconn

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
)

// File is a pollable file (a PTY's master, a pipe) read and written with
// raw system calls, as Conn does for sockets: a goroutine waiting on it
// parks in the network poller, never in a thread blocked in read(2).
type File struct {
	f      *os.File
	rc     syscall.RawConn
	closed atomic.Bool
}

// NewFile takes over f, which must be in the poller (non-blocking: from
// os.Pipe, or from Nonblocking). Close closes f.
func NewFile(f *os.File) (*File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("rawconn: %s: %w", f.Name(), err)
	}
	return &File{f: f, rc: rc}, nil
}

// Nonblocking returns a file in the poller for the descriptor f holds,
// and closes f. os.File.Fd puts a descriptor in blocking mode for good
// (pty.Open calls it), and a blocking descriptor costs a thread stuck in
// read(2) for each waiting reader, and cannot be woken by Close.
func Nonblocking(f *os.File) (*os.File, error) {
	defer f.Close()
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("rawconn: %s: %w", f.Name(), err)
	}
	var (
		fd   int
		derr error
	)
	if err := sc.Control(func(old uintptr) {
		fd, derr = dupCloexec(int(old))
	}); err != nil {
		return nil, fmt.Errorf("rawconn: %s: %w", f.Name(), err)
	}
	if derr != nil {
		return nil, fmt.Errorf("rawconn: dup %s: %w", f.Name(), derr)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("rawconn: %s: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil // non-blocking: NewFile puts it in the poller
}

func dupCloexec(fd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, e
	}
	return int(r), nil
}

// Read reads what the file has, waiting in the poller when it has
// nothing. End of file (a read of 0) is io.EOF.
func (f *File) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := f.call(f.rc.Read, syscall.SYS_READ, "read", p)
	if err == nil && n == 0 {
		return 0, io.EOF
	}
	return n, err
}

// Write writes all of p, waiting in the poller while the file is full.
func (f *File) Write(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		n, err := f.call(f.rc.Write, syscall.SYS_WRITE, "write", p)
		if err != nil {
			return total, err
		}
		if n <= 0 {
			return total, io.ErrShortWrite
		}
		total += n
		p = p[n:]
	}
	return total, nil
}

func (f *File) call(wait func(func(uintptr) bool) error, trap uintptr, op string, p []byte) (int, error) {
	n, errno, err := rawCall(wait, trap, p)
	switch {
	case err != nil:
		if f.closed.Load() { // the poller's own error for it is internal
			err = os.ErrClosed
		}
		return 0, &os.PathError{Op: op, Path: f.f.Name(), Err: err}
	case errno != 0:
		return 0, &os.PathError{Op: op, Path: f.f.Name(), Err: errno}
	}
	return n, nil
}

// Control runs fn on the descriptor (an ioctl) without taking it out of
// the poller, as f.Fd would.
func (f *File) Control(fn func(fd uintptr) error) error {
	var ferr error
	if err := f.rc.Control(func(fd uintptr) { ferr = fn(fd) }); err != nil {
		return err
	}
	return ferr
}

// Close closes the file; a Read or Write waiting on it returns
// os.ErrClosed.
func (f *File) Close() error {
	f.closed.Store(true)
	return f.f.Close()
}

// Name is the file's name.
func (f *File) Name() string { return f.f.Name() }
