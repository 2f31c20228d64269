package x11

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

const (
	keysymShiftL = 0xffe1
	keysymShiftR = 0xffe2
)

// Keyboard is one X display's keyboard mapping as deskd sees it, with the
// spare keycodes deskd lends: one owner, shared by every Screen deskd
// opens on the display (the VNC server's, the computer API's), so two
// connections never lend one keycode to two keysyms (an agent's "€" once
// typed the "ж" a person had typed meanwhile). A MappingNotify, whether
// from deskd's own binding or from setxkbmap in a shell, marks it stale;
// the next key reloads it from the server, keeping the loans the server
// still shows.
type Keyboard struct {
	mu       sync.Mutex
	loaded   bool
	stale    atomic.Bool
	minKey   xproto.Keycode
	perKey   int
	keymap   []xproto.Keysym // (keycode-min)*perKey + level
	shiftKey xproto.Keycode
	spares   spareKeys // keycodes lent to keysyms no key produces
	reloads  atomic.Int64
}

// NewKeyboard returns a Keyboard to share between the Screens of one
// display (OpenScreenWith); it loads the mapping at first use.
func NewKeyboard() *Keyboard { return &Keyboard{} }

// invalidate makes the next key reload the mapping.
func (kb *Keyboard) invalidate() { kb.stale.Store(true) }

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

// ensure loads the mapping over c if it was never loaded or is stale.
// Call with kb.mu held.
func (kb *Keyboard) ensure(c *xgb.Conn, minKey, maxKey xproto.Keycode) error {
	if kb.loaded && !kb.stale.Swap(false) {
		return nil
	}
	m, err := xproto.GetKeyboardMapping(c, minKey, byte(maxKey-minKey+1)).Reply()
	if err != nil {
		kb.stale.Store(true)
		return fmt.Errorf("x11: keyboard mapping: %w", err)
	}
	old := kb.spares
	kb.minKey, kb.perKey, kb.keymap = minKey, int(m.KeysymsPerKeycode), m.Keysyms
	sp := spareKeys{bound: map[xproto.Keysym]xproto.Keycode{}, sym: map[xproto.Keycode]xproto.Keysym{},
		used: map[xproto.Keycode]uint64{}, down: map[xproto.Keycode]bool{}, clock: old.clock}
	for i := len(kb.keymap)/kb.perKey - 1; i >= 0; i-- { // from the top, as xdotool does
		kc := minKey + xproto.Keycode(i)
		syms := kb.keymap[i*kb.perKey : (i+1)*kb.perKey]
		if ks, lent := old.sym[kc]; lent && boundTo(syms, ks) {
			// Still ours: the server maps it as deskd bound it.
			sp.bound[ks], sp.sym[kc], sp.used[kc] = kc, ks, old.used[kc]
			if old.down[kc] {
				sp.down[kc] = true
			}
			continue
		}
		if allEqual(syms, 0) {
			sp.free = append(sp.free, kc)
		}
	}
	kb.spares = sp
	kb.shiftKey, _, _ = kb.lookup(keysymShiftL)
	kb.loaded = true
	kb.reloads.Add(1)
	return nil
}

// boundTo reports whether a keycode's keysyms are what bind set: ks on
// the first level, and on the others ks or nothing (the server keeps the
// core mapping's first four levels of what XKB holds).
func boundTo(syms []xproto.Keysym, ks xproto.Keysym) bool {
	if len(syms) == 0 || syms[0] != ks {
		return false
	}
	for _, s := range syms[1:] {
		if s != ks && s != 0 {
			return false
		}
	}
	return true
}

func allEqual(syms []xproto.Keysym, ks xproto.Keysym) bool {
	for _, s := range syms {
		if s != ks {
			return false
		}
	}
	return true
}

// lookup finds a keycode producing keysym, and whether it needs Shift.
func (kb *Keyboard) lookup(ks xproto.Keysym) (xproto.Keycode, bool, bool) {
	if kc, ok := kb.spares.bound[ks]; ok {
		return kc, false, true
	}
	for level := 0; level < min(2, kb.perKey); level++ {
		for i := 0; i*kb.perKey+level < len(kb.keymap); i++ {
			if kb.keymap[i*kb.perKey+level] == ks {
				return kb.minKey + xproto.Keycode(i), level == 1, true
			}
		}
	}
	return 0, false, false
}

// bind maps keysym onto a spare keycode over c: a free one, else the
// least recently used one that is not held down.
func (kb *Keyboard) bind(c *xgb.Conn, ks xproto.Keysym) (xproto.Keycode, error) {
	sp := &kb.spares
	var kc xproto.Keycode
	if n := len(sp.free); n > 0 {
		kc = sp.free[n-1]
	} else {
		if kc = kb.lruVictim(nil); kc == 0 {
			return 0, fmt.Errorf("x11: no spare keycode for keysym %#x (all %d are held down)", ks, len(sp.used))
		}
	}
	syms := make([]xproto.Keysym, kb.perKey)
	for l := range syms {
		syms[l] = ks
	}
	if err := xproto.ChangeKeyboardMappingChecked(c, 1, kc, byte(kb.perKey), syms).Check(); err != nil {
		return 0, fmt.Errorf("x11: bind keysym %#x: %w", ks, err)
	}
	if n := len(sp.free); n > 0 && sp.free[n-1] == kc {
		sp.free = sp.free[:n-1]
	}
	if old, ok := sp.sym[kc]; ok {
		delete(sp.bound, old)
	}
	copy(kb.keymap[int(kc-kb.minKey)*kb.perKey:], syms)
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
	kb := s.kb
	// Held until the key is sent and the server has it: another Screen
	// must not lend this keycode elsewhere in between.
	kb.mu.Lock()
	defer kb.mu.Unlock()
	if err := kb.ensure(s.c, s.minKey, s.maxKey); err != nil {
		return err
	}
	ks := xproto.Keysym(keysym)
	if ks == keysymShiftL || ks == keysymShiftR {
		if down {
			s.shifts++
		} else {
			s.shifts = max(0, s.shifts-1)
		}
	}
	kc, shifted, ok := kb.lookup(ks)
	if !ok {
		var err error
		if kc, err = kb.bind(s.c, ks); err != nil {
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
	kb.spares.noteKey(kc, down)
	typ := byte(xproto.KeyRelease)
	if down {
		typ = xproto.KeyPress
	}
	needShift := shifted && down && s.shifts == 0 && kb.shiftKey != 0
	if needShift {
		xtest.FakeInput(s.c, xproto.KeyPress, byte(kb.shiftKey), 0, s.root, 0, 0, 0)
	}
	xtest.FakeInput(s.c, typ, byte(kc), 0, s.root, 0, 0, 0)
	if needShift {
		xtest.FakeInput(s.c, xproto.KeyRelease, byte(kb.shiftKey), 0, s.root, 0, 0, 0)
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
	kb := s.kb
	kb.mu.Lock()
	defer kb.mu.Unlock()
	if err := kb.ensure(s.c, s.minKey, s.maxKey); err != nil {
		return 0, false, err
	}
	mine := map[xproto.Keycode]bool{}
	for i, k := range keysyms {
		ks := xproto.Keysym(k)
		kc, _, ok := kb.lookup(ks)
		if !ok {
			if len(kb.spares.free) == 0 && kb.lruVictim(mine) == 0 {
				return i, changed, nil
			}
			if kc, err = kb.bind(s.c, ks); err != nil {
				return i, changed, err
			}
			changed = true
		}
		if _, lent := kb.spares.sym[kc]; lent {
			mine[kc] = true
			kb.spares.noteKey(kc, kb.spares.down[kc])
		}
	}
	return len(keysyms), changed, nil
}

// lruVictim is the keycode bind would take back, unless it is in keep.
func (kb *Keyboard) lruVictim(keep map[xproto.Keycode]bool) xproto.Keycode {
	sp := &kb.spares
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
