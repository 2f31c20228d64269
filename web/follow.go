package web

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/cubepod/deskd/cdp"
)

// followHold is how long after a person's input on the desktop tab-follow
// leaves the visible tab alone.
const followHold = 3 * time.Second

func (s *Server) newFollower() *cdp.Follower {
	port := func() int { return 0 }
	if s.cfg.Stack != nil {
		port = s.cfg.Stack.CDPPort
	}
	return cdp.NewFollower(cdp.FollowConfig{
		Port:      port,
		LastInput: s.human.at,
		Hold:      followHold,
		Off:       !s.cfg.TabFollow,
		Logger:    s.log.With("part", "tab-follow"),
		OnCommand: s.logCDP,
	})
}

// pageTarget is the target of a page connection's path, "" otherwise.
var pageTarget = regexp.MustCompile(`^/devtools/page/([A-Za-z0-9._-]{1,128})$`)

// watch is tab-follow's view of one agent connection to path.
func (s *Server) watch(path string) *cdp.Watcher {
	page := ""
	if m := pageTarget.FindStringSubmatch(path); m != nil {
		page = m[1]
	}
	return s.follow.Watch(page)
}

// followAnswer is tab-follow's state as the panel and agents see it.
type followAnswer struct {
	On     bool         `json:"on"`
	Paused bool         `json:"paused"`
	Tab    *followedTab `json:"tab,omitempty"`
}

type followedTab struct {
	ID    string `json:"id"`
	URL   string `json:"url,omitempty"`
	Title string `json:"title,omitempty"`
}

// followState is the state, with the followed tab's URL and title when
// Chromium still has it.
func (s *Server) followState(ctx context.Context) followAnswer {
	st := s.follow.State()
	a := followAnswer{On: st.On, Paused: st.Paused}
	if st.Tab == "" {
		return a
	}
	a.Tab = &followedTab{ID: st.Tab}
	if s.cfg.Stack == nil {
		return a
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cdp.Ask(ctx, s.cfg.Stack.CDPPort(), http.MethodGet, "/json/list", "")
	if err != nil {
		return a
	}
	defer resp.Body.Close()
	var list []followedTab
	if json.NewDecoder(io.LimitReader(resp.Body, cdp.MaxDiscovery)).Decode(&list) != nil {
		return a
	}
	for _, t := range list {
		if t.ID == st.Tab {
			a.Tab = &t
		}
	}
	return a
}

func (s *Server) apiFollow(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.followState(r.Context()))
}

// apiFollowSet pauses or resumes tab-follow: {"paused": bool}.
func (s *Server) apiFollowSet(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Paused *bool `json:"paused"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAPIBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Paused == nil {
		if err == nil || errors.Is(err, io.EOF) {
			err = errors.New(`want {"paused": true|false}`)
		}
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad tab-follow request: " + err.Error()})
		return
	}
	s.follow.SetPaused(*req.Paused)
	writeJSON(w, http.StatusOK, s.followState(r.Context()))
}
