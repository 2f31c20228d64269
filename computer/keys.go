package computer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Keysyms of the keys that have names (X11 keysymdef.h values).
const (
	ksBackSpace = 0xff08
	ksTab       = 0xff09
	ksReturn    = 0xff0d
	ksEscape    = 0xff1b
	ksDelete    = 0xffff
	ksShiftL    = 0xffe1
	ksControlL  = 0xffe3
	ksAltL      = 0xffe9
	ksSuperL    = 0xffeb
	ksF1        = 0xffbe
)

// keyNames maps the names agents use (xdotool/X keysym names, pyautogui,
// Anthropic's and OpenAI's examples, AIO's) to keysyms. Lookups are
// case-insensitive; single characters are not listed (see runeKeysym).
var keyNames = map[string]uint32{
	// modifiers
	"ctrl": ksControlL, "control": ksControlL, "control_l": ksControlL, "ctrl_l": ksControlL, "lctrl": ksControlL, "ctrlleft": ksControlL,
	"control_r": 0xffe4, "ctrl_r": 0xffe4, "rctrl": 0xffe4, "ctrlright": 0xffe4,
	"shift": ksShiftL, "shift_l": ksShiftL, "lshift": ksShiftL, "shiftleft": ksShiftL,
	"shift_r": 0xffe2, "rshift": 0xffe2, "shiftright": 0xffe2,
	"alt": ksAltL, "alt_l": ksAltL, "lalt": ksAltL, "altleft": ksAltL, "option": ksAltL,
	"alt_r": 0xffea, "ralt": 0xffea, "altright": 0xffea, "altgr": 0xfe03, "iso_level3_shift": 0xfe03,
	"super": ksSuperL, "super_l": ksSuperL, "win": ksSuperL, "windows": ksSuperL, "winleft": ksSuperL,
	"cmd": ksSuperL, "command": ksSuperL, "meta": ksSuperL, "meta_l": ksSuperL,
	"super_r": 0xffec, "winright": 0xffec,
	"caps_lock": 0xffe5, "capslock": 0xffe5, "num_lock": 0xff7f, "numlock": 0xff7f,
	"scroll_lock": 0xff14, "scrolllock": 0xff14,
	// editing and whitespace
	"return": ksReturn, "enter": ksReturn, "kp_enter": 0xff8d,
	"backspace": ksBackSpace, "back_space": ksBackSpace,
	"tab": ksTab, "iso_left_tab": 0xfe20,
	"escape": ksEscape, "esc": ksEscape,
	"space": ' ', "spacebar": ' ',
	"delete": ksDelete, "del": ksDelete, "insert": 0xff63, "ins": 0xff63,
	// navigation
	"home": 0xff50, "end": 0xff57,
	"page_up": 0xff55, "pageup": 0xff55, "pgup": 0xff55, "prior": 0xff55,
	"page_down": 0xff56, "pagedown": 0xff56, "pgdn": 0xff56, "next": 0xff56,
	"up": 0xff52, "down": 0xff54, "left": 0xff51, "right": 0xff53,
	"arrowup": 0xff52, "arrowdown": 0xff54, "arrowleft": 0xff51, "arrowright": 0xff53,
	// others
	"print": 0xff61, "printscreen": 0xff61, "prtsc": 0xff61, "prtscr": 0xff61, "sys_req": 0xff15,
	"pause": 0xff13, "break": 0xff6b, "menu": 0xff67, "apps": 0xff67, "contextmenu": 0xff67,
	"volumeup": 0x1008ff13, "volumedown": 0x1008ff11, "volumemute": 0x1008ff12,
	"xf86audioraisevolume": 0x1008ff13, "xf86audiolowervolume": 0x1008ff11, "xf86audiomute": 0x1008ff12,
	"browserback": 0x1008ff26, "xf86back": 0x1008ff26, "browserforward": 0x1008ff27, "xf86forward": 0x1008ff27,
	"browserrefresh": 0x1008ff29, "xf86reload": 0x1008ff73,
	// punctuation by X keysym name (xdotool key minus, ...)
	"minus": '-', "plus": '+', "equal": '=', "comma": ',', "period": '.', "slash": '/', "backslash": '\\',
	"semicolon": ';', "colon": ':', "apostrophe": '\'', "quotedbl": '"', "grave": '`', "asciitilde": '~',
	"bracketleft": '[', "bracketright": ']', "braceleft": '{', "braceright": '}', "parenleft": '(', "parenright": ')',
	"less": '<', "greater": '>', "question": '?', "exclam": '!', "at": '@', "numbersign": '#', "dollar": '$',
	"percent": '%', "asciicircum": '^', "ampersand": '&', "asterisk": '*', "underscore": '_', "bar": '|',
	// keypad
	"kp_0": 0xffb0, "kp_1": 0xffb1, "kp_2": 0xffb2, "kp_3": 0xffb3, "kp_4": 0xffb4,
	"kp_5": 0xffb5, "kp_6": 0xffb6, "kp_7": 0xffb7, "kp_8": 0xffb8, "kp_9": 0xffb9,
	"kp_add": 0xffab, "kp_subtract": 0xffad, "kp_multiply": 0xffaa, "kp_divide": 0xffaf, "kp_decimal": 0xffae,
}

// MaxKeyName bounds one key name; MaxKeys a combination or sequence.
const (
	MaxKeyName = 64
	MaxKeys    = 64
)

// KeyName returns the keysym of a key name (case-insensitive), "F1".."F24",
// or a single character.
func KeyName(name string) (uint32, error) {
	if name == "" {
		return 0, fmt.Errorf("empty key name")
	}
	if len(name) > MaxKeyName {
		return 0, fmt.Errorf("key name of %d bytes (max %d)", len(name), MaxKeyName)
	}
	if r, n := utf8.DecodeRuneInString(name); n == len(name) && r != utf8.RuneError {
		return runeKeysym(r), nil
	}
	l := strings.ToLower(name)
	if ks, ok := keyNames[l]; ok {
		return ks, nil
	}
	var f int
	if _, err := fmt.Sscanf(l, "f%d", &f); err == nil && "f"+fmt.Sprint(f) == l && f >= 1 && f <= 24 {
		return ksF1 + uint32(f-1), nil
	}
	return 0, fmt.Errorf("unknown key name %q", name)
}

// runeKeysym is the keysym that types r: Latin-1 keysyms equal their code
// point; others are 0x01000000 + the code point (X11's Unicode keysyms).
func runeKeysym(r rune) uint32 {
	switch {
	case r == '\n' || r == '\r':
		return ksReturn
	case r == '\t':
		return ksTab
	case r == '\b':
		return ksBackSpace
	case r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xff:
		return uint32(r)
	}
	return 0x01000000 | uint32(r)
}

// Combo parses "ctrl+shift+t" (also "ctrl-t" for single-letter keys after
// a modifier, as pyautogui writes hotkeys) into keysyms, pressed in order.
func Combo(s string) ([]uint32, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty key")
	}
	var parts []string
	if s == "+" {
		parts = []string{"+"}
	} else {
		parts = strings.Split(s, "+")
		// "ctrl++" is Ctrl and the plus key.
		if strings.HasSuffix(s, "++") {
			parts = append(parts[:len(parts)-2], "+")
		}
	}
	if len(parts) > MaxKeys {
		return nil, fmt.Errorf("%d keys in one combination (max %d)", len(parts), MaxKeys)
	}
	out := make([]uint32, 0, len(parts))
	for _, p := range parts {
		ks, err := KeyName(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", s, err)
		}
		out = append(out, ks)
	}
	return out, nil
}

// Sequence parses xdotool's "ctrl+a Delete": combinations separated by
// spaces, pressed one after another.
func Sequence(s string) ([][]uint32, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, fmt.Errorf("no key given")
	}
	if len(fields) > MaxKeys {
		return nil, fmt.Errorf("%d key combinations (max %d)", len(fields), MaxKeys)
	}
	out := make([][]uint32, 0, len(fields))
	for _, f := range fields {
		c, err := Combo(f)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
