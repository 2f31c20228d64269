package x11

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xfixes"
	"github.com/jezek/xgb/xproto"
)

// Clipboard limits. xgb writes a request's length in 16 bits, so one
// request over 256 KB corrupts the connection: text longer than
// clipChunk goes out in INCR pieces (ICCCM §2.7.2), never in one
// ChangeProperty.
const (
	MaxClipboard  = 1 << 20 // bytes of text either way
	clipChunk     = 64 << 10
	clipStall     = 5 * time.Second // an INCR transfer that makes no progress for this long is dropped
	clipEventsCap = 1024
)

// clipAtoms are the atoms the selection protocol needs.
type clipAtoms struct {
	clipboard, primary, targets, utf8, text, str, incr, timestamp, atom, prop xproto.Atom
}

// outgoing is an INCR transfer to a requestor that reads our text.
type outgoing struct {
	data     []byte
	typ      xproto.Atom
	off      int
	lastSeen time.Time
}

type outKey struct {
	w xproto.Window
	p xproto.Atom
}

// incoming is a selection conversion we asked for.
type incoming struct {
	sel      xproto.Atom
	target   xproto.Atom
	incr     bool
	buf      []byte
	started  time.Time
	lastSeen time.Time
}

// clipboard owns CLIPBOARD and PRIMARY for the viewers and follows other
// X clients' selections. One goroutine (run) owns all of its state; the
// screen's event reader forwards the selection events to it.
type clipboard struct {
	s     *Screen
	c     *xgb.Conn
	win   xproto.Window
	atoms clipAtoms

	events  chan xgb.Event // from Screen.events
	set     chan string    // from SetClipboard, newest wins
	setSync chan clipSet   // from SetClipboardSync
	changed chan string    // to the viewers, newest wins

	text    []byte               // what we serve for the selections we own
	owned   map[xproto.Atom]bool // CLIPBOARD, PRIMARY
	out     map[outKey]*outgoing
	in      *incoming
	pending xproto.Atom // a selection whose owner changed while we were reading another
}

// clipSet is a SetClipboardSync request: done gets the result once the
// server has made us the owner.
type clipSet struct {
	text string
	done chan error
}

func newClipboard(s *Screen) (*clipboard, error) {
	cb := &clipboard{s: s, c: s.c, events: make(chan xgb.Event, clipEventsCap), set: make(chan string, 1), setSync: make(chan clipSet),
		changed: make(chan string, 1), out: map[outKey]*outgoing{}, owned: map[xproto.Atom]bool{}}
	names := []struct {
		a    *xproto.Atom
		name string
	}{
		{&cb.atoms.clipboard, "CLIPBOARD"}, {&cb.atoms.primary, "PRIMARY"}, {&cb.atoms.targets, "TARGETS"},
		{&cb.atoms.utf8, "UTF8_STRING"}, {&cb.atoms.text, "TEXT"}, {&cb.atoms.str, "STRING"},
		{&cb.atoms.incr, "INCR"}, {&cb.atoms.timestamp, "TIMESTAMP"}, {&cb.atoms.atom, "ATOM"},
		{&cb.atoms.prop, "DESKD_SELECTION"},
	}
	cookies := make([]xproto.InternAtomCookie, len(names))
	for i, n := range names {
		cookies[i] = xproto.InternAtom(s.c, false, uint16(len(n.name)), n.name)
	}
	for i, ck := range cookies {
		r, err := ck.Reply()
		if err != nil {
			return nil, fmt.Errorf("x11: intern %s: %w", names[i].name, err)
		}
		*names[i].a = r.Atom
	}
	win, err := xproto.NewWindowId(s.c)
	if err != nil {
		return nil, fmt.Errorf("x11: clipboard window id: %w", err)
	}
	// An unmapped input-only window: owner of our selections, and where
	// other owners put what we asked for (PropertyChange for INCR reads).
	if err := xproto.CreateWindowChecked(s.c, 0, win, s.root, -1, -1, 1, 1, 0, xproto.WindowClassInputOnly, 0,
		xproto.CwEventMask, []uint32{xproto.EventMaskPropertyChange}).Check(); err != nil {
		return nil, fmt.Errorf("x11: clipboard window: %w", err)
	}
	cb.win = win
	for _, sel := range []xproto.Atom{cb.atoms.clipboard, cb.atoms.primary} {
		if err := xfixes.SelectSelectionInputChecked(s.c, win, sel, xfixes.SelectionEventMaskSetSelectionOwner).Check(); err != nil {
			return nil, fmt.Errorf("x11: selection events: %w", err)
		}
	}
	return cb, nil
}

// forward hands a selection event from the event reader to run. It never
// blocks the reader (which must keep draining xgb's queue): under a flood
// the event is dropped, and that transfer fails on its requestor's timeout.
func (cb *clipboard) forward(ev xgb.Event) bool {
	switch ev.(type) {
	case xproto.SelectionRequestEvent, xproto.SelectionNotifyEvent, xproto.SelectionClearEvent,
		xproto.PropertyNotifyEvent, xfixes.SelectionNotifyEvent:
	default:
		return false
	}
	select {
	case cb.events <- ev:
	default:
		cb.s.log.Warn("clipboard event dropped: queue full")
	}
	return true
}

// run owns the selections until done closes.
func (cb *clipboard) run(done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case t := <-cb.set:
			cb.own(t)
		case r := <-cb.setSync:
			cb.own(r.text)
			_, err := xproto.GetInputFocus(cb.c).Reply() // the server has processed the ownership
			r.done <- err
		case ev := <-cb.events:
			cb.handle(ev)
		case now := <-tick.C:
			cb.expire(now)
		}
	}
}

// own takes both selections with text.
func (cb *clipboard) own(text string) {
	cb.text = []byte(text)
	for _, sel := range []xproto.Atom{cb.atoms.clipboard, cb.atoms.primary} {
		xproto.SetSelectionOwner(cb.c, cb.win, sel, xproto.TimeCurrentTime)
		cb.owned[sel] = true
	}
}

func (cb *clipboard) handle(ev xgb.Event) {
	switch e := ev.(type) {
	case xfixes.SelectionNotifyEvent:
		if e.Owner == cb.win || e.Owner == 0 {
			return // ours, or nobody's
		}
		cb.convert(e.Selection, e.Timestamp)
	case xproto.SelectionClearEvent:
		delete(cb.owned, e.Selection) // someone else owns it now; their notify follows
	case xproto.SelectionRequestEvent:
		cb.answer(e)
	case xproto.SelectionNotifyEvent:
		cb.converted(e)
	case xproto.PropertyNotifyEvent:
		if e.Window == cb.win && e.Atom == cb.atoms.prop && e.State == xproto.PropertyNewValue && cb.in != nil && cb.in.incr {
			cb.readChunk()
			return
		}
		if e.State == xproto.PropertyDelete {
			if o := cb.out[outKey{e.Window, e.Atom}]; o != nil {
				cb.sendChunk(outKey{e.Window, e.Atom}, o)
			}
		}
	}
}

// convert asks the selection's owner for its text as UTF-8.
func (cb *clipboard) convert(sel xproto.Atom, t xproto.Timestamp) {
	if cb.in != nil {
		cb.pending = sel
		return
	}
	now := time.Now()
	cb.in = &incoming{sel: sel, target: cb.atoms.utf8, started: now, lastSeen: now}
	xproto.DeleteProperty(cb.c, cb.win, cb.atoms.prop)
	xproto.ConvertSelection(cb.c, cb.win, sel, cb.atoms.utf8, cb.atoms.prop, t)
}

// converted handles the owner's answer to convert.
func (cb *clipboard) converted(e xproto.SelectionNotifyEvent) {
	in := cb.in
	if in == nil || e.Requestor != cb.win || e.Selection != in.sel {
		return
	}
	if e.Property == xproto.AtomNone {
		if in.target == cb.atoms.utf8 { // an old client: ask for Latin-1
			in.target = cb.atoms.str
			xproto.ConvertSelection(cb.c, cb.win, in.sel, cb.atoms.str, cb.atoms.prop, e.Time)
			return
		}
		cb.finish(nil, "the owner refused the conversion")
		return
	}
	r, err := xproto.GetProperty(cb.c, false, cb.win, cb.atoms.prop, xproto.GetPropertyTypeAny, 0, MaxClipboard/4+1).Reply()
	if err != nil {
		cb.finish(nil, err.Error())
		return
	}
	if r.Type == cb.atoms.incr {
		in.incr, in.lastSeen = true, time.Now()
		// Deleting the property tells the owner to send the first piece.
		xproto.DeleteProperty(cb.c, cb.win, cb.atoms.prop)
		return
	}
	xproto.DeleteProperty(cb.c, cb.win, cb.atoms.prop)
	if r.BytesAfter > 0 || len(r.Value) > MaxClipboard {
		cb.finish(nil, "selection larger than the clipboard limit")
		return
	}
	cb.finish(r.Value, "")
}

// readChunk takes one INCR piece; an empty one ends the transfer.
func (cb *clipboard) readChunk() {
	in := cb.in
	r, err := xproto.GetProperty(cb.c, true, cb.win, cb.atoms.prop, xproto.GetPropertyTypeAny, 0, MaxClipboard/4+1).Reply()
	if err != nil {
		cb.finish(nil, err.Error())
		return
	}
	in.lastSeen = time.Now()
	if len(r.Value) == 0 {
		cb.finish(in.buf, "")
		return
	}
	if len(in.buf)+len(r.Value) > MaxClipboard {
		cb.finish(nil, "selection larger than the clipboard limit")
		return
	}
	in.buf = append(in.buf, r.Value...)
}

// finish ends the current read, delivering its text when ok.
func (cb *clipboard) finish(data []byte, failure string) {
	in := cb.in
	cb.in = nil
	if failure != "" {
		cb.s.log.Info("clipboard read failed", "err", failure)
	} else {
		text := string(data)
		if in.target == cb.atoms.str {
			text = latin1ToUTF8(data)
		}
		if !utf8.ValidString(text) {
			text = string([]rune(text)) // replaces invalid bytes with U+FFFD
		}
		select {
		case <-cb.changed: // the viewers only need the newest
		default:
		}
		cb.changed <- text
	}
	if sel := cb.pending; sel != 0 {
		cb.pending = 0
		cb.convert(sel, xproto.TimeCurrentTime)
	}
}

// answer serves a requestor of our selection (ICCCM §2.2).
func (cb *clipboard) answer(e xproto.SelectionRequestEvent) {
	prop := e.Property
	if prop == xproto.AtomNone { // obsolete requestors: use the target
		prop = e.Target
	}
	a := cb.atoms
	ok := cb.owned[e.Selection]
	if ok {
		switch e.Target {
		case a.targets:
			var b []byte
			for _, t := range []xproto.Atom{a.targets, a.timestamp, a.utf8, a.str, a.text} {
				b = binary.LittleEndian.AppendUint32(b, uint32(t)) // xgb speaks little-endian
			}
			xproto.ChangeProperty(cb.c, xproto.PropModeReplace, e.Requestor, prop, a.atom, 32, 5, b)
		case a.timestamp:
			xproto.ChangeProperty(cb.c, xproto.PropModeReplace, e.Requestor, prop, xproto.AtomInteger, 32, 1,
				binary.LittleEndian.AppendUint32(nil, 0))
		case a.utf8, a.text:
			cb.put(e.Requestor, prop, a.utf8, cb.text)
		case a.str:
			cb.put(e.Requestor, prop, a.str, utf8ToLatin1(cb.text))
		default:
			ok = false
		}
	}
	if !ok {
		prop = xproto.AtomNone
	}
	ev := xproto.SelectionNotifyEvent{Time: e.Time, Requestor: e.Requestor, Selection: e.Selection, Target: e.Target, Property: prop}
	xproto.SendEvent(cb.c, false, e.Requestor, 0, string(ev.Bytes()))
}

// put writes data to the requestor's property, in INCR pieces when large.
func (cb *clipboard) put(w xproto.Window, prop, typ xproto.Atom, data []byte) {
	if len(data) <= clipChunk {
		xproto.ChangeProperty(cb.c, xproto.PropModeReplace, w, prop, typ, 8, uint32(len(data)), data)
		return
	}
	// Watch the requestor's property deletions (our event mask on its
	// window is ours alone), announce the size, then send on each delete.
	xproto.ChangeWindowAttributes(cb.c, w, xproto.CwEventMask, []uint32{xproto.EventMaskPropertyChange})
	xproto.ChangeProperty(cb.c, xproto.PropModeReplace, w, prop, cb.atoms.incr, 32, 1,
		binary.LittleEndian.AppendUint32(nil, uint32(len(data))))
	cb.out[outKey{w, prop}] = &outgoing{data: data, typ: typ, lastSeen: time.Now()}
}

// sendChunk sends the next INCR piece; the empty piece after the last ends
// the transfer.
func (cb *clipboard) sendChunk(k outKey, o *outgoing) {
	n := min(clipChunk, len(o.data)-o.off)
	xproto.ChangeProperty(cb.c, xproto.PropModeReplace, k.w, k.p, o.typ, 8, uint32(n), o.data[o.off:o.off+n])
	o.lastSeen = time.Now()
	if n == 0 {
		delete(cb.out, k)
		xproto.ChangeWindowAttributes(cb.c, k.w, xproto.CwEventMask, []uint32{0})
		return
	}
	o.off += n
}

// expire drops transfers whose other side went quiet.
func (cb *clipboard) expire(now time.Time) {
	for k, o := range cb.out {
		if now.Sub(o.lastSeen) > clipStall {
			delete(cb.out, k)
			xproto.ChangeWindowAttributes(cb.c, k.w, xproto.CwEventMask, []uint32{0})
		}
	}
	if cb.in != nil && now.Sub(cb.in.lastSeen) > clipStall {
		cb.finish(nil, "the selection owner stopped answering")
	}
}

func latin1ToUTF8(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// utf8ToLatin1 keeps what Latin-1 can say and writes '?' for the rest.
func utf8ToLatin1(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for _, r := range string(b) {
		if r > 0xff {
			r = '?'
		}
		out = append(out, byte(r))
	}
	return out
}

// SetClipboard makes text (UTF-8) the X CLIPBOARD and PRIMARY selections,
// served to X clients until another client takes them.
func (s *Screen) SetClipboard(text string) error {
	if len(text) > MaxClipboard {
		return fmt.Errorf("x11: clipboard text of %d bytes (max %d)", len(text), MaxClipboard)
	}
	select {
	case <-s.clip.set: // an unapplied older text is replaced
	default:
	}
	select {
	case s.clip.set <- text:
		return nil
	case <-s.done:
		return errors.New("x11: screen closed")
	}
}

// SetClipboardSync is SetClipboard that returns once the X server has
// made us the owner, so a paste right after it gets text.
func (s *Screen) SetClipboardSync(ctx context.Context, text string) error {
	if len(text) > MaxClipboard {
		return fmt.Errorf("x11: clipboard text of %d bytes (max %d)", len(text), MaxClipboard)
	}
	r := clipSet{text: text, done: make(chan error, 1)}
	select {
	case s.clip.setSync <- r:
	case <-s.done:
		return errors.New("x11: screen closed")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ClipboardChanged delivers the text (UTF-8) of CLIPBOARD or PRIMARY when
// another X client takes one; only the newest undelivered text is kept.
func (s *Screen) ClipboardChanged() <-chan string { return s.clip.changed }
