package cdp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Tab-follow: the person watching the desktop sees the tab the agent works
// in. Agents drive tabs by id over CDP and the visible tab stays where it
// was; the relay watches what each agent connection does (Watcher) and the
// Follower brings the tab to the front from deskd's own browser
// connection (Target.activateTarget), at most once per FollowDelay, never
// while a person has just used the desktop.

var errNoBrowser = errors.New("cdp: no browser")

// FollowDelay is how long the Follower collects an agent's acts before it
// switches tabs (the newest target wins).
const FollowDelay = 300 * time.Millisecond

// FollowConfig configures a Follower.
type FollowConfig struct {
	// Port is Chromium's debugging port now (0: no browser).
	Port func() int
	// LastInput is when a person last used the desktop (zero: never);
	// nothing switches within Hold of it, and what is in front since is
	// the person's choice, not a tab the Follower brought there.
	LastInput func() time.Time
	Hold      time.Duration
	// Off starts it switched off (a start request may turn it on or off).
	Off    bool
	Logger *slog.Logger
	// OnCommand, when set, hears each agent command that changes a page
	// or the tabs (Input.*, Page.navigate/reload, Target.create/close/
	// activateTarget): its method, the page target it acts in ("" when
	// not known) and its parameters (at most maxInspected bytes, from the
	// relay's goroutine: it must not block).
	OnCommand func(method, target string, params json.RawMessage)
}

// Follower brings the tab an agent acts on to the front.
type Follower struct {
	cfg FollowConfig
	log *slog.Logger

	mu     sync.Mutex
	off    bool   // switched off (--tab-follow=false, a start request)
	paused bool   // paused by a person (the panel's button)
	want   string // the target to bring to the front at the next tick
	front  string // the tab last brought to the front
	// frontAt is when: a person's input after it makes front unknown
	frontAt time.Time
	// the last strong act, and its tab
	strongAt time.Time
	strongTo string
	armed    bool // a switch is scheduled
	closed   bool
	timer    *time.Timer
	running  sync.WaitGroup // switches under way
}

// NewFollower returns a Follower; Close stops it.
func NewFollower(cfg FollowConfig) *Follower {
	f := &Follower{cfg: cfg, log: cfg.Logger, off: cfg.Off}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	f.timer = time.AfterFunc(time.Hour, f.tick)
	f.timer.Stop()
	return f
}

// Close stops the Follower and waits for a switch under way.
func (f *Follower) Close() {
	f.mu.Lock()
	f.closed = true
	f.timer.Stop()
	f.mu.Unlock()
	f.running.Wait()
}

// FollowState is what the panel and the computer API show.
type FollowState struct {
	On     bool   `json:"on"`     // switched on (flag, start request)
	Paused bool   `json:"paused"` // paused by a person
	Tab    string `json:"tab,omitempty"`
}

// State reports whether it follows and the tab it brought to the front.
func (f *Follower) State() FollowState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return FollowState{On: !f.off, Paused: f.paused, Tab: f.front}
}

// SetOn switches following on or off.
func (f *Follower) SetOn(on bool) {
	f.mu.Lock()
	f.off = !on
	f.mu.Unlock()
}

// SetPaused pauses or resumes following (a person's choice).
func (f *Follower) SetPaused(p bool) {
	f.mu.Lock()
	f.paused = p
	f.mu.Unlock()
}

// StrongHold is how long after a strong act (input, navigation, a new
// tab) weak acts elsewhere do not move the view: an agent that clicked in
// one tab and then reads the titles of all (Runtime.evaluate in each)
// still works in the first.
const StrongHold = 2 * time.Second

// Want asks for target to be brought to the front at the next tick. A
// strong act (input, navigation, a new tab, a popup) wins over weak ones
// (evaluating script, focusing an element) in the same tick, and for
// StrongHold after it.
func (f *Follower) Want(target string, strong bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.off || f.paused || target == "" {
		return
	}
	now := time.Now()
	if f.cfg.LastInput != nil && f.cfg.LastInput().After(f.frontAt) {
		f.front = "" // a person may have switched tabs since
	}
	if strong {
		f.strongAt, f.strongTo = now, target
	} else if target != f.strongTo && now.Sub(f.strongAt) < StrongHold {
		return
	}
	f.want = target
	if !f.armed && target != f.front {
		f.armed = true
		f.timer.Reset(FollowDelay)
	}
}

// tick switches to the newest wanted tab (the timer's goroutine).
func (f *Follower) tick() {
	f.mu.Lock()
	f.armed = false
	want := f.want
	if f.closed || f.off || f.paused || want == "" || want == f.front {
		f.mu.Unlock()
		return
	}
	if f.cfg.LastInput != nil && time.Since(f.cfg.LastInput()) < f.cfg.Hold {
		// A person is using the desktop: leave the tab they see; the
		// agent's next act asks again.
		f.want = ""
		f.mu.Unlock()
		return
	}
	f.running.Add(1)
	f.mu.Unlock()
	defer f.running.Done()
	err := f.activate(want)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.log.Debug("tab-follow: tab not brought to the front", "target", want, "err", err)
		return
	}
	f.front, f.frontAt = want, time.Now()
	f.log.Debug("tab-follow: brought the agent's tab to the front", "target", want)
}

func (f *Follower) activate(target string) error {
	port := 0
	if f.cfg.Port != nil {
		port = f.cfg.Port()
	}
	if port == 0 {
		return errNoBrowser
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := dialBrowser(ctx, port)
	if err != nil {
		return err
	}
	defer s.close()
	return s.call(ctx, "Target.activateTarget", map[string]string{"targetId": target}, nil)
}

// Watch returns a Watcher for one agent connection: page is the target of
// a page connection (/devtools/page/<id>), "" for a browser connection.
func (f *Follower) Watch(page string) *Watcher {
	return &Watcher{f: f, page: page, sessions: map[string]string{}, pending: map[int64]pendingCall{}}
}

// Bounds of a Watcher's maps (an agent that attaches forever).
const (
	maxWatchedSessions = 4096
	maxPendingCalls    = 1024
	// maxInspected is the largest message a Watcher reads: commands and
	// the events it needs are small; bigger messages stream past.
	maxInspected = 64 << 10
)

// Watcher follows one agent connection: which page each of its sessions
// drives, and which of its commands act on a page.
type Watcher struct {
	f    *Follower
	page string

	mu       sync.Mutex
	sessions map[string]string // CDP session -> the page target it acts in
	pending  map[int64]pendingCall
}

type pendingCall struct {
	create bool   // Target.createTarget: its answer names a new tab
	attach string // Target.attachToTarget: its answer names the session
}

// pageActs are the commands that act on a page a person would want to
// see: true for strong acts (input, navigation), false for weak ones
// (script, which agents also use to read: a page's title, say).
var pageActs = map[string]bool{
	"Page.navigate": true, "Page.reload": true,
	"Runtime.evaluate": false, "Runtime.callFunctionOn": false, "DOM.focus": false,
}

// actsOnPage says whether method acts on a page, and how strongly.
func actsOnPage(method string) (acts, strong bool) {
	if strings.HasPrefix(method, "Input.") {
		return true, true
	}
	strong, acts = pageActs[method]
	return acts, strong
}

// changesPage reports whether an agent's command changes a page or the
// tabs (what an action log keeps).
func changesPage(method string) bool {
	switch method {
	case "Page.navigate", "Page.reload", "Page.navigateToHistoryEntry", "Target.createTarget", "Target.closeTarget", "Target.activateTarget":
		return true
	}
	return strings.HasPrefix(method, "Input.")
}

// FromAgent looks at a message an agent sends (whole, at most
// maxInspected bytes).
func (w *Watcher) FromAgent(b []byte) {
	var m struct {
		ID        int64           `json:"id"`
		Method    string          `json:"method"`
		SessionID string          `json:"sessionId"`
		Params    json.RawMessage `json:"params"`
	}
	if json.Unmarshal(b, &m) != nil || m.Method == "" {
		return
	}
	var p struct {
		TargetID string `json:"targetId"`
	}
	json.Unmarshal(m.Params, &p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if on := w.f.cfg.OnCommand; on != nil && changesPage(m.Method) {
		target := p.TargetID
		if target == "" {
			target = w.page
			if m.SessionID != "" {
				target = w.sessions[m.SessionID]
			}
		}
		on(m.Method, target, m.Params)
	}
	if m.SessionID == "" && len(w.pending) < maxPendingCalls {
		switch m.Method {
		case "Target.createTarget":
			w.pending[m.ID] = pendingCall{create: true}
		case "Target.attachToTarget":
			if p.TargetID != "" {
				w.pending[m.ID] = pendingCall{attach: p.TargetID}
			}
		}
	}
	acts, strong := actsOnPage(m.Method)
	if !acts {
		return
	}
	target := w.page
	if m.SessionID != "" {
		target = w.sessions[m.SessionID]
	}
	w.f.Want(target, strong)
}

// FromBrowser looks at a message Chromium sends the agent (whole, at most
// maxInspected bytes): session attachments, and the answers FromAgent
// waits for.
func (w *Watcher) FromBrowser(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	attach := bytes.Contains(b, []byte("Target.attachedToTarget"))
	detach := bytes.Contains(b, []byte("Target.detachedFromTarget"))
	// Chromium writes an answer as {"id":..., an event as {"method":...
	answer := len(w.pending) > 0 && bytes.HasPrefix(b, []byte(`{"id":`))
	if !attach && !detach && !answer {
		return
	}
	var m struct {
		ID        int64  `json:"id"`
		Method    string `json:"method"`
		SessionID string `json:"sessionId"`
		Params    struct {
			SessionID          string `json:"sessionId"`
			WaitingForDebugger bool   `json:"waitingForDebugger"`
			TargetInfo         struct {
				TargetID string `json:"targetId"`
				Type     string `json:"type"`
				OpenerID string `json:"openerId"`
			} `json:"targetInfo"`
		} `json:"params"`
		Result struct {
			SessionID string `json:"sessionId"`
			TargetID  string `json:"targetId"`
		} `json:"result"`
	}
	if json.Unmarshal(b, &m) != nil {
		return
	}
	switch {
	case m.Method == "Target.attachedToTarget":
		ti, child := m.Params.TargetInfo, m.Params.SessionID
		if child == "" || len(w.sessions) >= maxWatchedSessions {
			return
		}
		if ti.Type == "page" {
			w.sessions[child] = ti.TargetID
			if ti.OpenerID != "" && m.Params.WaitingForDebugger { // a new popup: follow it
				w.f.Want(ti.TargetID, true)
			}
			return
		}
		// A frame or worker of a page acts in that page.
		parent := w.page
		if m.SessionID != "" {
			parent = w.sessions[m.SessionID]
		}
		if parent != "" {
			w.sessions[child] = parent
		}
	case m.Method == "Target.detachedFromTarget":
		delete(w.sessions, m.Params.SessionID)
	case m.Method == "" && m.SessionID == "":
		p, ok := w.pending[m.ID]
		if !ok {
			return
		}
		delete(w.pending, m.ID)
		switch {
		case p.create && m.Result.TargetID != "":
			w.f.Want(m.Result.TargetID, true) // a new tab the agent made
		case p.attach != "" && m.Result.SessionID != "" && len(w.sessions) < maxWatchedSessions:
			w.sessions[m.Result.SessionID] = p.attach
		}
	}
}
