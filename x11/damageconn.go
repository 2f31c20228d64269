package x11

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"io"
	"os"
	"time"
)

// The damage connection: DAMAGE's notifications of the root window come
// on a connection of their own (an xConn), read by one goroutine that
// queues them for the capture loop. Through xgb a notification passed
// two goroutines (xgb's reader, then the one handing xgb's events out)
// and an allocation and interface conversion each: at a keystroke, which
// Chromium answers with one notification of its whole viewport, that was
// a thread wake-up and 9% of deskd's CPU. Nothing else is asked on this
// connection, so what comes back after the set-up is notifications and
// the few events X sends every client, which are skipped.

// Bounds of what readDamage accepts (a bigger reply or event is a broken
// or hostile server).
const damageBuffer = 8 << 10 // bytes read at once: 256 notifications

// dialDamage connects to display as dialSHM does, asks DAMAGE (major
// opcode) for version 1.1 and creates a damage object of drawable that
// reports every rectangle drawn (RawRectangles), checked with a round
// trip.
func dialDamage(display string, opcode byte, drawable uint32) (*xConn, error) {
	conn, num, err := dialLocal(display)
	if err != nil {
		return nil, fmt.Errorf("x11: damage connection: %w", err)
	}
	host, _ := os.Hostname()
	name, data := cookieFor(authFile(), host, num)
	c := &xConn{conn: conn, opcode: opcode, timeout: shmTimeout}
	if err := c.watchDamage(name, data, drawable); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// watchDamage sets the connection up (handshake), negotiates DAMAGE's
// version (the server refuses its other requests before that) and
// creates the damage object, with c.seg as its id.
func (c *xConn) watchDamage(name string, data []byte, drawable uint32) error {
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	defer c.conn.SetDeadline(time.Time{})
	if err := c.handshake(name, data); err != nil {
		return err
	}
	b := c.buf[:12]
	b[0], b[1] = c.opcode, 0 // DamageQueryVersion 1.1
	binary.LittleEndian.PutUint16(b[2:], 3)
	binary.LittleEndian.PutUint32(b[4:], 1)
	binary.LittleEndian.PutUint32(b[8:], 1)
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("x11: damage version: %w", err)
	}
	c.seq = 1
	if err := c.reply(); err != nil {
		return fmt.Errorf("x11: damage version: %w", err)
	}
	b = c.buf[:16]
	b[0], b[1] = c.opcode, 1 // DamageCreate
	binary.LittleEndian.PutUint16(b[2:], 4)
	binary.LittleEndian.PutUint32(b[4:], c.seg)
	binary.LittleEndian.PutUint32(b[8:], drawable)
	clear(b[12:])                                               // level 0: raw rectangles; pad
	sync := []byte{43, 0, 1, 0}                                 // GetInputFocus: has a reply
	if _, err := c.conn.Write(append(b, sync...)); err != nil { // one write: two requests
		return fmt.Errorf("x11: create damage: %w", err)
	}
	c.seq = 3
	if err := c.reply(); err != nil {
		return fmt.Errorf("x11: create damage: %w", err)
	}
	return nil
}

// errDamageStream is what readDamage returns for a stream it cannot
// follow.
var errDamageStream = errors.New("x11: damage connection out of step")

// readDamage reads X events from r until it fails (io.EOF when the
// server closes the connection) and calls fn with the area of each
// DamageNotify (event code notify; synthetic ones, sent by another
// client, are not the server's and are skipped). Other events are
// skipped, GenericEvents with their extra bytes; an error or a reply
// (none is asked for) ends the stream.
func readDamage(r io.Reader, notify byte, fn func(image.Rectangle)) error {
	br := bufio.NewReaderSize(r, damageBuffer)
	var ev [32]byte
	for {
		if _, err := io.ReadFull(br, ev[:]); err != nil {
			return err
		}
		switch ev[0] {
		case notify:
			x, y := int(int16(binary.LittleEndian.Uint16(ev[16:]))), int(int16(binary.LittleEndian.Uint16(ev[18:])))
			w, h := int(binary.LittleEndian.Uint16(ev[20:])), int(binary.LittleEndian.Uint16(ev[22:]))
			fn(image.Rect(x, y, x+w, y+h))
		case 0:
			return fmt.Errorf("X error %d (major %d minor %d): %w", ev[1], ev[10], binary.LittleEndian.Uint16(ev[8:]), errDamageStream)
		case 1:
			return fmt.Errorf("a reply, none asked for: %w", errDamageStream)
		case 35, 35 | 0x80: // GenericEvent: more bytes follow
			n := int64(binary.LittleEndian.Uint32(ev[4:])) * 4
			if n > maxSkip {
				return fmt.Errorf("an event of %d bytes: %w", n, errDamageStream)
			}
			if _, err := io.CopyN(io.Discard, br, n); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF // in the middle of the event
				}
				return err
			}
		}
	}
}
