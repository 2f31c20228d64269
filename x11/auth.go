package x11

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
)

// Xauthority families (Xau).
const familyWild = 0xffff

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
	for _, f := range [][]byte{nil, nil, []byte("MIT-MAGIC-COOKIE-1"), cookie} { // address, display, name, data
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
