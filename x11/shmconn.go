package x11

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/cubepod/deskd/rawconn"
)

// xConn is a connection to the X server of our own, spoken without xgb,
// that does one thing. The capture's does MIT-SHM GetImage into our
// segment, the request written and its reply read by the goroutine that
// captures. Through xgb a capture's round trip passes five goroutines
// (request queue, sequence numbers, writer, reader, reply channel), each
// hand-off a thread wake-up on an idle core: with a keystroke's update
// costing about a millisecond of deskd's CPU, most of it waking up, one
// read here is what the capture needs. Nothing selects events on it, so
// what comes back is our replies, our errors and the few events X sends
// every client (MappingNotify), which are skipped. The damage
// connection (damageconn.go) only receives DAMAGE's notifications.
type xConn struct {
	conn    net.Conn
	opcode  byte   // the extension's major opcode (the same on every connection)
	seg     uint32 // our first resource id: the segment's, the damage object's
	seq     uint16 // the last request's sequence number
	timeout time.Duration
	buf     [32]byte
}

// X protocol limits this reader enforces (a reply bigger than these is a
// broken or hostile server, not a capture).
const (
	maxSkip    = 1 << 20 // extra bytes of an event or reply we skip
	maxEvents  = 1 << 14 // events read while waiting for one reply
	shmTimeout = 5 * time.Second
)

// dialSHM connects to display, authenticates as xgb does (the first
// MIT-MAGIC-COOKIE-1 in $XAUTHORITY or ~/.Xauthority for this host and
// display, none when there is no file), attaches SysV segment shmid and
// checks with a round trip that the server could.
func dialSHM(display string, opcode byte, shmid int) (*xConn, error) {
	conn, num, err := dialLocal(display)
	if err != nil {
		return nil, fmt.Errorf("x11: shm connection: %w", err)
	}
	host, _ := os.Hostname()
	name, data := cookieFor(authFile(), host, num)
	c := &xConn{conn: conn, opcode: opcode, timeout: shmTimeout}
	if err := c.setup(name, data, uint32(shmid)); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// dialLocal connects to the local socket of display (dialSocket) and
// returns it with raw reads and writes (rawconn), and the display's
// number.
func dialLocal(display string) (net.Conn, string, error) {
	c, num, err := dialSocket(display)
	if err != nil {
		return nil, "", err
	}
	return rawconn.Wrap(c), num, nil
}

// dialSocket connects to the local socket of display, the abstract one
// first as Xlib does, and returns it with the display's number.
func dialSocket(display string) (*net.UnixConn, string, error) {
	num, err := displayNumber(display)
	if err != nil {
		return nil, "", err
	}
	for _, path := range []string{"@/tmp/.X11-unix/X" + num, "/tmp/.X11-unix/X" + num} {
		if c, err := net.DialTimeout("unix", path, shmTimeout); err == nil {
			return c.(*net.UnixConn), num, nil
		}
	}
	return nil, "", fmt.Errorf("x11: no local socket for display %s", display)
}

// displayNumber is N of ":N" or ":N.S" (a local display: capture shares
// memory, so the server is on this machine).
func displayNumber(display string) (string, error) {
	n, ok := strings.CutPrefix(display, ":")
	if i := strings.IndexByte(n, '.'); i >= 0 {
		n = n[:i]
	}
	if !ok || n == "" || len(n) > 6 || strings.Trim(n, "0123456789") != "" {
		return "", fmt.Errorf("x11: display %q is not a local display :N", display)
	}
	return n, nil
}

// setup sends the connection setup, reads the server's answer (the
// resource id range, for our segment's id), attaches the segment and
// makes a round trip that reports an error the attach met.
func (c *xConn) setup(name string, data []byte, shmid uint32) error {
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	defer c.conn.SetDeadline(time.Time{})
	if err := c.handshake(name, data); err != nil {
		return err
	}
	attach := c.buf[:16]
	attach[0], attach[1] = c.opcode, 1 // ShmAttach
	binary.LittleEndian.PutUint16(attach[2:], 4)
	binary.LittleEndian.PutUint32(attach[4:], c.seg)
	binary.LittleEndian.PutUint32(attach[8:], shmid)
	clear(attach[12:])                                               // read-write, pad
	sync := []byte{43, 0, 1, 0}                                      // GetInputFocus: has a reply
	if _, err := c.conn.Write(append(attach, sync...)); err != nil { // one write: two requests
		return fmt.Errorf("x11: shm attach: %w", err)
	}
	c.seq = 2
	if err := c.reply(); err != nil {
		return fmt.Errorf("x11: shm attach: %w", err)
	}
	return nil
}

// handshake sends the connection setup with the cookie name and data,
// reads the server's answer and takes the first id of the resource id
// range it gives as c.seg. The caller sets the deadline.
func (c *xConn) handshake(name string, data []byte) error {
	pad := func(n int) int { return (n + 3) &^ 3 }
	req := make([]byte, 12+pad(len(name))+pad(len(data)))
	req[0] = 'l' // little-endian, protocol 11.0
	binary.LittleEndian.PutUint16(req[2:], 11)
	binary.LittleEndian.PutUint16(req[6:], uint16(len(name)))
	binary.LittleEndian.PutUint16(req[8:], uint16(len(data)))
	copy(req[12:], name)
	copy(req[12+pad(len(name)):], data)
	if _, err := c.conn.Write(req); err != nil {
		return fmt.Errorf("x11: connection setup: %w", err)
	}
	base, mask, err := readSetup(c.conn)
	if err != nil {
		return err
	}
	c.seg = base | mask&-mask // the first id of our range
	return nil
}

// readSetup reads the server's setup reply and returns the client's
// resource id base and mask.
func readSetup(r io.Reader) (base, mask uint32, err error) {
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, 0, fmt.Errorf("x11: connection setup: %w", err)
	}
	n := int(binary.LittleEndian.Uint16(head[6:])) * 4 // at most 256 KiB: a 16-bit count of words
	rest := make([]byte, n)
	if _, err := io.ReadFull(r, rest); err != nil {
		return 0, 0, fmt.Errorf("x11: connection setup: %w", err)
	}
	switch head[0] {
	case 1: // success
	case 0: // failed: reason in the first head[1] bytes
		reason := rest[:min(int(head[1]), len(rest))]
		return 0, 0, fmt.Errorf("x11: connection refused: %q", strings.TrimSpace(string(reason)))
	default: // 2: more authentication wanted, which we do not speak
		return 0, 0, fmt.Errorf("x11: connection setup: status %d", head[0])
	}
	if len(rest) < 12 {
		return 0, 0, fmt.Errorf("x11: connection setup: reply of %d bytes", len(rest))
	}
	base, mask = binary.LittleEndian.Uint32(rest[4:]), binary.LittleEndian.Uint32(rest[8:])
	if mask == 0 || base&mask != 0 {
		return 0, 0, fmt.Errorf("x11: connection setup: resource ids %#x/%#x", base, mask)
	}
	return base, mask, nil
}

// getImage captures r of drawable into the segment at offset (ZPixmap,
// all planes) and returns when the server has written it.
func (c *xConn) getImage(drawable uint32, x, y, w, h int, offset uint32) error {
	b := c.buf[:32]
	b[0], b[1] = c.opcode, 4 // ShmGetImage
	binary.LittleEndian.PutUint16(b[2:], 8)
	binary.LittleEndian.PutUint32(b[4:], drawable)
	binary.LittleEndian.PutUint16(b[8:], uint16(int16(x)))
	binary.LittleEndian.PutUint16(b[10:], uint16(int16(y)))
	binary.LittleEndian.PutUint16(b[12:], uint16(w))
	binary.LittleEndian.PutUint16(b[14:], uint16(h))
	binary.LittleEndian.PutUint32(b[16:], 0xffffffff)
	b[20], b[21], b[22], b[23] = 2, 0, 0, 0 // ZPixmap
	binary.LittleEndian.PutUint32(b[24:], c.seg)
	binary.LittleEndian.PutUint32(b[28:], offset)
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("x11: shm capture: %w", err)
	}
	c.seq++
	if err := c.reply(); err != nil {
		return fmt.Errorf("x11: shm capture: %w", err)
	}
	return nil
}

// errXStream is a reply that leaves the connection out of step.
var errXStream = errors.New("connection out of step")

// xError is the X server's error for the request waited for: the
// connection stays in step. Any other error from getImage leaves it
// unusable (its caller closes it and dials again).
type xError struct{ code, major, minor int }

func (e *xError) Error() string {
	return fmt.Sprintf("X error %d (major %d minor %d)", e.code, e.major, e.minor)
}

// reply reads until the reply to request c.seq, skipping events. An X
// error is returned as such; anything else unexpected breaks the stream.
func (c *xConn) reply() error {
	b := c.buf[:32]
	for range maxEvents {
		if _, err := io.ReadFull(c.conn, b); err != nil {
			return err
		}
		seq := binary.LittleEndian.Uint16(b[2:])
		switch b[0] {
		case 0: // an error: ours (nothing else is asked on this connection)
			if seq != c.seq {
				// an earlier request's: none of ours fails silently
				return fmt.Errorf("X error %d on request %d (major %d minor %d), %w", b[1], seq, b[10], binary.LittleEndian.Uint16(b[8:]), errXStream)
			}
			return &xError{int(b[1]), int(b[10]), int(binary.LittleEndian.Uint16(b[8:]))}
		case 1:
			if seq != c.seq {
				return fmt.Errorf("reply to request %d, waiting for %d: %w", seq, c.seq, errXStream)
			}
			return c.skip(binary.LittleEndian.Uint32(b[4:]))
		case 35, 35 | 0x80: // GenericEvent: more bytes follow
			if err := c.skip(binary.LittleEndian.Uint32(b[4:])); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("%d events and no reply: %w", maxEvents, errXStream)
}

// skip reads and drops words 4-byte units.
func (c *xConn) skip(words uint32) error {
	n := int64(words) * 4
	if n > maxSkip {
		return fmt.Errorf("%d bytes to skip: %w", n, errXStream)
	}
	_, err := io.CopyN(io.Discard, c.conn, n)
	return err
}

func (c *xConn) Close() error { return c.conn.Close() }
