package cdp

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// wanted is the target a Follower would bring forward next.
func wanted(f *Follower) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.want
}

func TestWatcher(t *testing.T) {
	tests := []struct {
		name string
		page string // a page connection's target
		msgs []string
		want string
	}{
		{name: "input in an attached session",
			msgs: []string{
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"S1","targetInfo":{"targetId":"T1","type":"page"},"waitingForDebugger":false}}`,
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"S2","targetInfo":{"targetId":"T2","type":"page"},"waitingForDebugger":false}}`,
				`>{"id":7,"method":"Input.dispatchMouseEvent","params":{"type":"mousePressed","x":1,"y":2},"sessionId":"S2"}`,
			}, want: "T2"},
		{name: "a weak act elsewhere right after a strong one moves nothing",
			msgs: []string{
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"S1","targetInfo":{"targetId":"T1","type":"page"}}}`,
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"S2","targetInfo":{"targetId":"T2","type":"page"}}}`,
				`>{"id":1,"method":"Page.navigate","params":{"url":"about:blank"},"sessionId":"S1"}`,
				`>{"id":2,"method":"Runtime.evaluate","params":{"expression":"document.title"},"sessionId":"S2"}`,
			}, want: "T1"},
		{name: "attach answer maps the session",
			msgs: []string{
				`>{"id":3,"method":"Target.attachToTarget","params":{"targetId":"T9","flatten":true}}`,
				`<{"id":3,"result":{"sessionId":"S9"}}`,
				`>{"id":4,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"S9"}`,
			}, want: "T9"},
		{name: "a new tab the agent makes",
			msgs: []string{
				`>{"id":5,"method":"Target.createTarget","params":{"url":"about:blank"}}`,
				`<{"id":5,"result":{"targetId":"TN"}}`,
			}, want: "TN"},
		{name: "a new popup",
			msgs: []string{
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"SP","targetInfo":{"targetId":"TP","type":"page","openerId":"T1"},"waitingForDebugger":true}}`,
			}, want: "TP"},
		{name: "an old popup found at connect is not followed",
			msgs: []string{
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"SP","targetInfo":{"targetId":"TP","type":"page","openerId":"T1"},"waitingForDebugger":false}}`,
			}, want: ""},
		{name: "a frame acts in its page",
			msgs: []string{
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"S1","targetInfo":{"targetId":"T1","type":"page"}}}`,
				`<{"method":"Target.attachedToTarget","sessionId":"S1","params":{"sessionId":"SF","targetInfo":{"targetId":"F1","type":"iframe"}}}`,
				`>{"id":8,"method":"Input.insertText","params":{"text":"x"},"sessionId":"SF"}`,
			}, want: "T1"},
		{name: "a page connection acts in its page",
			page: "TPAGE",
			msgs: []string{`>{"id":1,"method":"Input.dispatchKeyEvent","params":{"type":"keyDown"}}`},
			want: "TPAGE"},
		{name: "a detached session acts nowhere",
			msgs: []string{
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"S1","targetInfo":{"targetId":"T1","type":"page"}}}`,
				`<{"method":"Target.detachedFromTarget","params":{"sessionId":"S1"}}`,
				`>{"id":9,"method":"Input.dispatchMouseEvent","params":{},"sessionId":"S1"}`,
			}, want: ""},
		{name: "reads and browser commands act nowhere",
			msgs: []string{
				`<{"method":"Target.attachedToTarget","params":{"sessionId":"S1","targetInfo":{"targetId":"T1","type":"page"}}}`,
				`>{"id":1,"method":"Page.captureScreenshot","params":{},"sessionId":"S1"}`,
				`>{"id":2,"method":"Target.getTargets"}`,
				`>{"id":3,"method":"Input.dispatchMouseEvent","params":{}}`,
			}, want: ""},
		{name: "hostile: not JSON, wrong types, a lying answer",
			msgs: []string{
				`>{"id":"x","method":7}`, `>not json`, `<{"method":"Target.attachedToTarget","params":"x"}`,
				`<{"id":99,"result":{"targetId":"NOBODY-ASKED"}}`, `>{"method":"Input.x","sessionId":"unknown"}`,
			}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := NewFollower(FollowConfig{})
			defer f.Close()
			w := f.Watch(tt.page)
			for _, m := range tt.msgs {
				if m[0] == '>' {
					w.FromAgent([]byte(m[1:]))
				} else {
					w.FromBrowser([]byte(m[1:]))
				}
			}
			if got := wanted(f); got != tt.want {
				t.Fatalf("wants %q, want %q", got, tt.want)
			}
		})
	}
}

// Off, paused or held, nothing is brought forward; a person's hold drops
// the wish (the agent's next act asks again).
func TestFollowerGates(t *testing.T) {
	input := time.Now()
	f := NewFollower(FollowConfig{LastInput: func() time.Time { return input }, Hold: time.Hour, Off: true})
	defer f.Close()
	f.Want("T1", true)
	if wanted(f) != "" {
		t.Fatal("an off Follower took a wish")
	}
	f.SetOn(true)
	f.SetPaused(true)
	f.Want("T1", true)
	if wanted(f) != "" {
		t.Fatal("a paused Follower took a wish")
	}
	f.SetPaused(false)
	f.Want("T1", true)
	time.Sleep(FollowDelay + 200*time.Millisecond)
	if st := f.State(); wanted(f) != "" || st.Tab != "" || !st.On {
		t.Fatalf("held: want %q, state %+v", wanted(f), st)
	}
}

// A Watcher's maps stay bounded however many sessions an agent makes.
func TestWatcherBounds(t *testing.T) {
	f := NewFollower(FollowConfig{Off: true})
	defer f.Close()
	w := f.Watch("")
	for i := range maxWatchedSessions + 100 {
		w.FromBrowser(fmt.Appendf(nil, `{"method":"Target.attachedToTarget","params":{"sessionId":"S%d","targetInfo":{"targetId":"T%d","type":"page"}}}`, i, i))
		w.FromAgent(fmt.Appendf(nil, `{"id":%d,"method":"Target.createTarget","params":{}}`, i))
	}
	if len(w.sessions) > maxWatchedSessions || len(w.pending) > maxPendingCalls {
		t.Fatalf("%d sessions, %d pending calls kept", len(w.sessions), len(w.pending))
	}
}

func FuzzWatcher(f *testing.F) {
	f.Add([]byte(`{"method":"Target.attachedToTarget","params":{"sessionId":"S","targetInfo":{"targetId":"T","type":"page","openerId":"O"},"waitingForDebugger":true}}`), true)
	f.Add([]byte(`{"id":1,"method":"Input.dispatchMouseEvent","sessionId":"S"}`), false)
	f.Add([]byte(`{"id":1,"result":{"sessionId":"S","targetId":"T"}}`), true)
	f.Fuzz(func(t *testing.T, b []byte, fromBrowser bool) {
		fl := NewFollower(FollowConfig{})
		defer fl.Close()
		w := fl.Watch("P")
		w.FromAgent([]byte(`{"id":1,"method":"Target.attachToTarget","params":{"targetId":"T"}}`))
		if fromBrowser {
			w.FromBrowser(b)
		} else {
			w.FromAgent(b)
		}
		if got := wanted(fl); got != "" && got != "P" && !strings.Contains(string(b), got) {
			t.Fatalf("wants %q, named by nothing in %q", got, b)
		}
	})
}

// What a person put in front since the last switch is theirs: the agent's
// next act in the tab the Follower brought forward before brings it back.
func TestFollowerForgetsFrontAfterInput(t *testing.T) {
	var input time.Time
	f := NewFollower(FollowConfig{LastInput: func() time.Time { return input }, Hold: time.Millisecond})
	defer f.Close()
	f.mu.Lock()
	f.front, f.frontAt = "T1", time.Now() // as if it brought T1 forward
	f.mu.Unlock()
	f.Want("T1", true)
	f.mu.Lock()
	armed, front := f.armed, f.front
	f.mu.Unlock()
	if armed {
		t.Fatal("a switch to the tab already in front was scheduled")
	}
	input = time.Now().Add(time.Millisecond) // a person used the desktop since
	time.Sleep(2 * time.Millisecond)
	f.Want("T1", true)
	f.mu.Lock()
	armed, front = f.armed, f.front
	f.mu.Unlock()
	if !armed || front != "" {
		t.Fatalf("after a person's input: armed %v, front %q; want a switch scheduled and front unknown", armed, front)
	}
}
