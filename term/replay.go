package term

import "bytes"

// Replay filtering. Scrollback replayed to a new viewer may hold the
// queries programs sent to the terminal (device attributes, cursor
// position, colours...). A terminal answers each query by sending input;
// answered again on replay, those answers would land in the shell as
// typed text. filterQueries drops the query sequences and keeps
// everything else, including mode changes and the screen contents.

const (
	esc = 0x1b
	bel = 0x07
	// maxSeq bounds how far a sequence is scanned for its terminator; a
	// longer one passes through untouched.
	maxSeq = 4096
)

// filterQueries returns b without terminal query sequences.
func filterQueries(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		if b[i] != esc || i+1 >= len(b) {
			out = append(out, b[i])
			i++
			continue
		}
		n, query := sequence(b[i:])
		if n == 0 {
			out = append(out, b[i])
			i++
			continue
		}
		if !query {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// sequence measures the escape sequence at the start of b and says
// whether it is a query. n is 0 when b does not start a complete
// sequence within maxSeq bytes.
func sequence(b []byte) (n int, query bool) {
	switch b[1] {
	case '[':
		return csi(b)
	case ']':
		return stringSeq(b, func(body []byte) bool {
			// OSC Ps ; ... ? — a colour or clipboard query has a "?" item.
			return bytes.HasSuffix(body, []byte(";?")) || bytes.Contains(body, []byte(";?;"))
		})
	case 'P':
		return stringSeq(b, func(body []byte) bool {
			// DECRQSS (DCS $ q) and XTGETTCAP (DCS + q).
			return bytes.HasPrefix(body, []byte("$q")) || bytes.HasPrefix(body, []byte("+q"))
		})
	}
	return 0, false
}

// csi parses ESC [ params intermediates final.
func csi(b []byte) (int, bool) {
	i := 2
	for i < len(b) && i < maxSeq && b[i] >= 0x30 && b[i] <= 0x3f { // parameter bytes
		i++
	}
	params := b[2:i]
	for i < len(b) && i < maxSeq && b[i] >= 0x20 && b[i] <= 0x2f { // intermediates
		i++
	}
	if i >= len(b) || i >= maxSeq || b[i] < 0x40 || b[i] > 0x7e {
		return 0, false
	}
	inter := b[2+len(params) : i]
	final := b[i]
	return i + 1, csiQuery(params, inter, final)
}

func csiQuery(params, inter []byte, final byte) bool {
	p := string(params)
	switch final {
	case 'c': // DA1, DA2 (>), DA3 (=)
		return len(inter) == 0
	case 'n': // DSR: status, cursor position, and DEC private variants
		return len(inter) == 0 && (p == "5" || p == "6" || (len(p) > 1 && p[0] == '?'))
	case 't': // window reports (size, position, title)
		switch p {
		case "11", "13", "14", "15", "16", "18", "19", "20", "21":
			return len(inter) == 0
		}
	case 'p': // DECRQM: CSI Ps $ p, CSI ? Ps $ p
		return string(inter) == "$"
	case 'q': // XTVERSION: CSI > q
		return p == ">" || p == ">0"
	case 'u': // kitty keyboard protocol query: CSI ? u
		return p == "?" && len(inter) == 0
	}
	return false
}

// stringSeq parses ESC X body terminator (BEL or ESC \) and asks isQuery
// about the body.
func stringSeq(b []byte, isQuery func([]byte) bool) (int, bool) {
	for i := 2; i < len(b) && i < maxSeq; i++ {
		switch {
		case b[i] == bel:
			return i + 1, isQuery(b[2:i])
		case b[i] == esc && i+1 < len(b) && b[i+1] == '\\':
			return i + 2, isQuery(b[2:i])
		}
	}
	return 0, false
}

// replayStart picks where a replay of the ring begins: the oldest byte,
// or, once the ring has dropped output, the byte after the first newline,
// so the replay never starts inside an escape sequence or a UTF-8 rune.
func replayStart(r *ring) int64 {
	if r.start == 0 {
		return 0
	}
	var buf [4096]byte
	for off := r.start; off < r.end; {
		n, _ := r.readAt(off, buf[:])
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return off + int64(i) + 1
		}
		off += int64(n)
	}
	return r.start
}
