package x11

import (
	"fmt"
	"time"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

const (
	keysymShiftL = 0xffe1
	keysymShiftR = 0xffe2
)

// spareKeys lends the keycodes that have no keysym on the server's own
// layout to keysyms no key produces (€, non-Latin letters), and takes
// back the least recently used one when all are lent, so any number of
// distinct characters can be typed. A key held down is never taken.
type spareKeys struct {
	free  []xproto.Keycode // not lent yet
	bound map[xproto.Keysym]xproto.Keycode
	sym   map[xproto.Keycode]xproto.Keysym
	used  map[xproto.Keycode]uint64 // clock of the last use
	down  map[xproto.Keycode]bool
	clock uint64
}

func (s *Screen) loadKeymap(setup *xproto.SetupInfo) error {
	n := byte(setup.MaxKeycode - setup.MinKeycode + 1)
	m, err := xproto.GetKeyboardMapping(s.c, setup.MinKeycode, n).Reply()
	if err != nil {
		return fmt.Errorf("x11: keyboard mapping: %w", err)
	}
	s.perKey, s.keymap = int(m.KeysymsPerKeycode), m.Keysyms
	s.shiftKey, _, _ = s.lookup(keysymShiftL)
	s.spares = spareKeys{bound: map[xproto.Keysym]xproto.Keycode{}, sym: map[xproto.Keycode]xproto.Keysym{},
		used: map[xproto.Keycode]uint64{}, down: map[xproto.Keycode]bool{}}
	for i := len(s.keymap)/s.perKey - 1; i >= 0; i-- { // from the top, as xdotool does
		empty := true
		for l := 0; l < s.perKey; l++ {
			if s.keymap[i*s.perKey+l] != 0 {
				empty = false
				break
			}
		}
		if empty {
			s.spares.free = append(s.spares.free, s.minKey+xproto.Keycode(i))
		}
	}
	return nil
}

// lookup finds a keycode producing keysym, and whether it needs Shift.
func (s *Screen) lookup(ks xproto.Keysym) (xproto.Keycode, bool, bool) {
	if kc, ok := s.spares.bound[ks]; ok {
		return kc, false, true
	}
	for level := 0; level < min(2, s.perKey); level++ {
		for i := 0; i*s.perKey+level < len(s.keymap); i++ {
			if s.keymap[i*s.perKey+level] == ks {
				return s.minKey + xproto.Keycode(i), level == 1, true
			}
		}
	}
	return 0, false, false
}

// bind maps keysym onto a spare keycode: a free one, else the least
// recently used one that is not held down.
func (s *Screen) bind(ks xproto.Keysym) (xproto.Keycode, error) {
	sp := &s.spares
	var kc xproto.Keycode
	if n := len(sp.free); n > 0 {
		kc = sp.free[n-1]
	} else {
		if kc = s.lruVictim(nil); kc == 0 {
			return 0, fmt.Errorf("x11: no spare keycode for keysym %#x (all %d are held down)", ks, len(sp.used))
		}
	}
	syms := make([]xproto.Keysym, s.perKey)
	for l := range syms {
		syms[l] = ks
	}
	if err := xproto.ChangeKeyboardMappingChecked(s.c, 1, kc, byte(s.perKey), syms).Check(); err != nil {
		return 0, fmt.Errorf("x11: bind keysym %#x: %w", ks, err)
	}
	if n := len(sp.free); n > 0 && sp.free[n-1] == kc {
		sp.free = sp.free[:n-1]
	}
	if old, ok := sp.sym[kc]; ok {
		delete(sp.bound, old)
	}
	copy(s.keymap[int(kc-s.minKey)*s.perKey:], syms)
	sp.bound[ks], sp.sym[kc] = kc, ks
	return kc, nil
}

// noteKey records the use of a lent keycode, and whether it is held.
func (sp *spareKeys) noteKey(kc xproto.Keycode, down bool) {
	if _, lent := sp.sym[kc]; !lent {
		return
	}
	sp.clock++
	sp.used[kc] = sp.clock
	if down {
		sp.down[kc] = true
	} else {
		delete(sp.down, kc)
	}
}

// MappingSettle is the pause after the keyboard mapping changed before a
// key that needs the change is sent (see Key; PrepareKeys lets a caller
// bind a batch first and pause once).
const MappingSettle = 50 * time.Millisecond

// Key presses or releases the key producing keysym, binding a spare
// keycode when no key does, and adding Shift for shifted symbols sent
// without it.
func (s *Screen) Key(keysym uint32, down bool) error {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	ks := xproto.Keysym(keysym)
	if ks == keysymShiftL || ks == keysymShiftR {
		if down {
			s.shifts++
		} else {
			s.shifts = max(0, s.shifts-1)
		}
	}
	kc, shifted, ok := s.lookup(ks)
	if !ok {
		var err error
		if kc, err = s.bind(ks); err != nil {
			return err
		}
		// Applications apply the new mapping when its MappingNotify
		// reaches them, and nothing says when: a key sent at once is read
		// with the old one (Chromium saw "\0" for é and € typed through
		// noVNC). The server has the mapping once sync returns; give the
		// clients MappingSettle. Only the first use of a keysym pays.
		if err := s.sync(); err != nil {
			return err
		}
		time.Sleep(MappingSettle)
	}
	s.spares.noteKey(kc, down)
	typ := byte(xproto.KeyRelease)
	if down {
		typ = xproto.KeyPress
	}
	needShift := shifted && down && s.shifts == 0 && s.shiftKey != 0
	if needShift {
		xtest.FakeInput(s.c, xproto.KeyPress, byte(s.shiftKey), 0, s.root, 0, 0, 0)
	}
	xtest.FakeInput(s.c, typ, byte(kc), 0, s.root, 0, 0, 0)
	if needShift {
		xtest.FakeInput(s.c, xproto.KeyRelease, byte(s.shiftKey), 0, s.root, 0, 0, 0)
	}
	return s.sync()
}

// PrepareKeys makes keysyms typeable ahead of typing them: each one no
// key produces gets a spare keycode now. Applications apply a mapping
// change when its MappingNotify reaches them, with no event back to say
// so; binding first and typing after a pause keeps them from reading a
// key with a stale mapping. It stops before a binding would take back a
// keycode it bound for an earlier keysym of this call, and returns how
// many of keysyms (from the start) are ready and whether any binding
// changed.
func (s *Screen) PrepareKeys(keysyms []uint32) (ready int, changed bool, err error) {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	mine := map[xproto.Keycode]bool{}
	for i, k := range keysyms {
		ks := xproto.Keysym(k)
		kc, _, ok := s.lookup(ks)
		if !ok {
			if len(s.spares.free) == 0 && s.lruVictim(mine) == 0 {
				return i, changed, nil
			}
			if kc, err = s.bind(ks); err != nil {
				return i, changed, err
			}
			changed = true
		}
		if _, lent := s.spares.sym[kc]; lent {
			mine[kc] = true
			s.spares.noteKey(kc, s.spares.down[kc])
		}
	}
	return len(keysyms), changed, nil
}

// lruVictim is the keycode bind would take back, unless it is in keep.
func (s *Screen) lruVictim(keep map[xproto.Keycode]bool) xproto.Keycode {
	sp := &s.spares
	var kc xproto.Keycode
	oldest := uint64(0)
	for c, t := range sp.used {
		if !sp.down[c] && (kc == 0 || t < oldest) {
			kc, oldest = c, t
		}
	}
	if keep[kc] {
		return 0
	}
	return kc
}
