package x11

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Xauthority families (Xau), the one protocol deskd speaks, and how much
// of a file it reads.
const (
	familyLocal = 256
	familyWild  = 0xffff
	cookieName  = "MIT-MAGIC-COOKIE-1"
	authMax     = 1 << 16
)

// WriteAuthority writes a fresh MIT-MAGIC-COOKIE-1 to path as one
// Xauthority entry for any host and any display (family Wild, no display
// number), mode 0600, owned by uid:gid (when uid >= 0). Xvfb started with
// -auth path admits only clients that present the cookie; X clients find
// it through $XAUTHORITY.
func WriteAuthority(path string, uid, gid int) error {
	cookie := make([]byte, 16)
	if _, err := rand.Read(cookie); err != nil {
		return fmt.Errorf("x11: cookie: %w", err)
	}
	var b []byte
	b = binary.BigEndian.AppendUint16(b, familyWild)
	for _, f := range [][]byte{nil, nil, []byte(cookieName), cookie} { // address, display, name, data
		b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
		b = append(b, f...)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".xauthority-")
	if err != nil {
		return fmt.Errorf("x11: authority: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("x11: authority: %w", err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("x11: authority: %w", err)
	}
	if uid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return fmt.Errorf("x11: authority: %w", err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("x11: authority: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("x11: authority: %w", err)
	}
	return nil
}

// authFile is the Xauthority file X clients read: $XAUTHORITY, else
// ~/.Xauthority.
func authFile() string {
	if f := os.Getenv("XAUTHORITY"); f != "" {
		return f
	}
	if home := os.Getenv("HOME"); home != "" {
		return home + "/.Xauthority"
	}
	return ""
}

// cookieFor reads the cookie for display number num on host from the
// Xauthority file path; empty when there is none to present.
func cookieFor(path, host, num string) (string, []byte) {
	if path == "" {
		return "", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, authMax))
	return findCookie(b, host, num)
}

// findCookie picks, from an Xauthority file's bytes, the first
// MIT-MAGIC-COOKIE-1 entry for any host (Wild) or for this one (Local),
// for display num or for any display. A truncated entry ends the search.
func findCookie(b []byte, host, num string) (string, []byte) {
	field := func() ([]byte, bool) {
		if len(b) < 2 {
			return nil, false
		}
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			return nil, false
		}
		f := b[2 : 2+n]
		b = b[2+n:]
		return f, true
	}
	for len(b) >= 2 {
		family := binary.BigEndian.Uint16(b)
		b = b[2:]
		var fs [4][]byte // address, display, name, data
		for i := range fs {
			f, ok := field()
			if !ok {
				return "", nil
			}
			fs[i] = f
		}
		hostOK := family == familyWild || family == familyLocal && string(fs[0]) == host
		if hostOK && (len(fs[1]) == 0 || string(fs[1]) == num) && string(fs[2]) == cookieName && len(fs[3]) == 16 {
			return cookieName, fs[3]
		}
	}
	return "", nil
}
