package x11

import (
	"fmt"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

const (
	keysymShiftL = 0xffe1
	keysymShiftR = 0xffe2
)

func (s *Screen) loadKeymap(setup *xproto.SetupInfo) error {
	n := byte(setup.MaxKeycode - setup.MinKeycode + 1)
	m, err := xproto.GetKeyboardMapping(s.c, setup.MinKeycode, n).Reply()
	if err != nil {
		return fmt.Errorf("x11: keyboard mapping: %w", err)
	}
	s.perKey, s.keymap = int(m.KeysymsPerKeycode), m.Keysyms
	s.shiftKey, _, _ = s.lookup(keysymShiftL)
	return nil
}

// lookup finds a keycode producing keysym, and whether it needs Shift.
func (s *Screen) lookup(ks xproto.Keysym) (xproto.Keycode, bool, bool) {
	if kc, ok := s.bound[ks]; ok {
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

// bind maps keysym onto a keycode with no keysyms (unmapped keysyms such
// as € or non-Latin letters have no key on the default layout).
func (s *Screen) bind(ks xproto.Keysym) (xproto.Keycode, error) {
	for i := len(s.keymap)/s.perKey - 1; i >= 0; i-- {
		empty := true
		for l := 0; l < s.perKey; l++ {
			if s.keymap[i*s.perKey+l] != 0 {
				empty = false
				break
			}
		}
		if !empty {
			continue
		}
		kc := s.minKey + xproto.Keycode(i)
		syms := make([]xproto.Keysym, s.perKey)
		for l := range syms {
			syms[l] = ks
		}
		if err := xproto.ChangeKeyboardMappingChecked(s.c, 1, kc, byte(s.perKey), syms).Check(); err != nil {
			return 0, fmt.Errorf("x11: bind keysym %#x: %w", ks, err)
		}
		copy(s.keymap[i*s.perKey:], syms)
		s.bound[ks] = kc
		return kc, nil
	}
	return 0, fmt.Errorf("x11: no spare keycode for keysym %#x", ks)
}

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
	}
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
