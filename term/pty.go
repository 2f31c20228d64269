package term

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/creack/pty"
	"github.com/cubepod/deskd/rawconn"
)

// openPTY opens a PTY of size sz whose terminal belongs to cred's user
// (nil: deskd's). The master is read and written in the poller with raw
// system calls: pty.Open leaves it in blocking mode (it calls Fd), where
// every read holds a thread in read(2), each keystroke's echo woke the
// runtime's monitor and a second thread, and Close could not wake a
// reader that background jobs kept waiting.
func openPTY(sz Size, cred *syscall.Credential) (ptmx *rawconn.File, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("term: open pty: %w", err)
	}
	fail := func(err error) (*rawconn.File, *os.File, error) {
		m.Close()
		tty.Close()
		return nil, nil, err
	}
	if cred != nil {
		// The shell's user must own its terminal (write(1), mesg, ssh).
		if err := os.Chown(tty.Name(), int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("term: chown pty: %w", err))
		}
	}
	nb, err := rawconn.Nonblocking(m) // closes m
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("term: pty: %w", err)
	}
	if ptmx, err = rawconn.NewFile(nb); err != nil {
		nb.Close()
		tty.Close()
		return nil, nil, fmt.Errorf("term: pty: %w", err)
	}
	if err := setSize(ptmx, sz); err != nil {
		ptmx.Close()
		tty.Close()
		return nil, nil, err
	}
	return ptmx, tty, nil
}

// setSize sets the PTY's window size (TIOCSWINSZ), which signals the
// shell's foreground job (SIGWINCH).
func setSize(ptmx *rawconn.File, sz Size) error {
	ws := pty.Winsize{Cols: uint16(sz.Columns), Rows: uint16(sz.Rows)}
	err := ptmx.Control(func(fd uintptr) error {
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws))); e != 0 {
			return e
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("term: size pty: %w", err)
	}
	return nil
}
