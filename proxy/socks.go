package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
)

// SOCKS5 (RFC 1928) with username/password authentication (RFC 1929):
// the client side, towards an upstream SOCKS5 proxy.

// errSocksAuth is a refusal of the credentials (or of having none).
var errSocksAuth = errors.New("the upstream SOCKS5 proxy refused the credentials")

// socksReplies are RFC 1928's reply codes.
var socksReplies = map[byte]string{
	1: "general failure", 2: "not allowed by its rules", 3: "network unreachable", 4: "host unreachable",
	5: "connection refused", 6: "TTL expired", 7: "command not supported", 8: "address type not supported",
}

// socksConnect asks the SOCKS5 proxy on c for a connection to target
// (host:port; the host is sent as a name, resolved by the proxy).
func socksConnect(c net.Conn, target, user, pass string) error {
	host, ps, err := net.SplitHostPort(target)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port < 1 || port > 65535 || len(host) == 0 || len(host) > 255 {
		return fmt.Errorf("bad target %q", target)
	}
	method := byte(0) // no authentication
	if user != "" {
		method = 2
		if len(user) > 255 || len(pass) > 255 {
			return errors.New("SOCKS5 credentials over 255 bytes")
		}
	}
	if _, err := c.Write([]byte{5, 1, method}); err != nil {
		return err
	}
	var b [2]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("no SOCKS5 greeting: %w", err)
	}
	switch {
	case b[0] != 5:
		return fmt.Errorf("not a SOCKS5 proxy (version %d)", b[0])
	case b[1] == 0xff:
		return errSocksAuth // it wants a method we did not offer
	case b[1] != method:
		return fmt.Errorf("SOCKS5 proxy chose method %d, offered %d", b[1], method)
	}
	if method == 2 {
		msg := append([]byte{1, byte(len(user))}, user...)
		msg = append(append(msg, byte(len(pass))), pass...)
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return fmt.Errorf("no SOCKS5 authentication answer: %w", err)
		}
		if b[1] != 0 {
			return errSocksAuth
		}
	}
	req := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	req = binary.BigEndian.AppendUint16(req, uint16(port))
	if _, err := c.Write(req); err != nil {
		return err
	}
	var h [4]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return fmt.Errorf("no SOCKS5 answer: %w", err)
	}
	if h[0] != 5 {
		return fmt.Errorf("not a SOCKS5 answer (version %d)", h[0])
	}
	if h[1] != 0 {
		why := socksReplies[h[1]]
		if why == "" {
			why = "code " + strconv.Itoa(int(h[1]))
		}
		return fmt.Errorf("the upstream SOCKS5 proxy refused %s: %s", target, why)
	}
	// The bound address, which nothing here needs: skip it.
	var skip int
	switch h[3] {
	case 1:
		skip = 4
	case 4:
		skip = 16
	case 3:
		var n [1]byte
		if _, err := io.ReadFull(c, n[:]); err != nil {
			return err
		}
		skip = int(n[0])
	default:
		return fmt.Errorf("SOCKS5 answer with address type %d", h[3])
	}
	_, err = io.CopyN(io.Discard, c, int64(skip+2))
	return err
}
