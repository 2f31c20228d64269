package term

// ring is the session's scrollback: the newest len(buf) bytes of output,
// addressed by absolute offsets so each viewer keeps only a cursor.
type ring struct {
	buf        []byte
	start, end int64 // absolute offsets of the oldest kept byte and one past the newest
}

func newRing(size int) *ring { return &ring{buf: make([]byte, size)} }

func (r *ring) size() int64 { return int64(len(r.buf)) }

// write appends p, dropping the oldest bytes past the ring's size.
func (r *ring) write(p []byte) {
	if over := len(p) - len(r.buf); over > 0 { // only p's tail can stay
		r.end += int64(over)
		p = p[over:]
	}
	for len(p) > 0 {
		i := int(r.end % r.size())
		n := copy(r.buf[i:], p)
		p = p[n:]
		r.end += int64(n)
	}
	if r.end-r.start > r.size() {
		r.start = r.end - r.size()
	}
}

// readAt copies bytes from offset off into p. ok is false when off is
// older than the ring (those bytes are gone).
func (r *ring) readAt(off int64, p []byte) (n int, ok bool) {
	if off < r.start {
		return 0, false
	}
	for n < len(p) && off < r.end {
		i := int(off % r.size())
		m := copy(p[n:], r.buf[i:min(len(r.buf), i+int(r.end-off))])
		n += m
		off += int64(m)
	}
	return n, true
}
