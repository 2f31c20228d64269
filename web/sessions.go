package web

import (
	"sync"
	"time"
)

// sessions counts panel sessions: distinct tokens (or, without a panel
// secret, distinct clients) that made a request within the idle window or
// hold a connection open.
type sessions struct {
	idle time.Duration
	mu   sync.Mutex
	m    map[string]*session
}

type session struct {
	last time.Time
	open int // long-lived connections (WebSockets) in progress
}

// maxSessions bounds the table; past it the stalest entries go first.
const maxSessions = 4096

func newSessions(idle time.Duration) *sessions {
	return &sessions{idle: idle, m: map[string]*session{}}
}

func (s *sessions) seen(key string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e == nil {
		if len(s.m) >= maxSessions {
			s.expire(now)
		}
		e = &session{}
		s.m[key] = e
	}
	e.last = now
}

// hold marks a long-lived connection of key as open until the returned
// function is called.
func (s *sessions) hold(key string, now time.Time) (release func()) {
	s.seen(key, now)
	s.mu.Lock()
	s.m[key].open++
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if e := s.m[key]; e != nil {
			e.open--
			e.last = time.Now()
		}
	}
}

// active returns how many sessions are active at now, dropping the rest.
func (s *sessions) active(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire(now)
	return len(s.m)
}

func (s *sessions) expire(now time.Time) {
	for k, e := range s.m {
		if e.open <= 0 && now.Sub(e.last) > s.idle {
			delete(s.m, k)
		}
	}
	// Still full: drop the stalest idle entries so the table stays bounded.
	for len(s.m) >= maxSessions {
		var oldest string
		var t time.Time
		for k, e := range s.m {
			if e.open <= 0 && (oldest == "" || e.last.Before(t)) {
				oldest, t = k, e.last
			}
		}
		if oldest == "" {
			return
		}
		delete(s.m, oldest)
	}
}
