package web

import (
	"net"
	"sync"

	"github.com/cubepod/deskd/rawconn"
)

// LimitListener returns a listener that keeps at most n connections of
// l open: past that, Accept waits until one closes (new connections wait
// in the kernel's backlog, costing deskd nothing).
func LimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	closeOnce sync.Once
	done      chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	// Raw reads and writes (rawconn): a viewer's updates do not wake the
	// Go runtime's monitor thread.
	return &limitConn{Conn: rawconn.Wrap(c), release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
