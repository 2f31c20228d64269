package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
)

// Config is the browser's way out as a start request or flags give it:
// an upstream proxy with credentials and the hosts that go direct. An
// empty Server means direct.
type Config struct {
	Server   string   `json:"server"`
	Username string   `json:"username,omitempty"`
	Password string   `json:"password,omitempty"`
	Bypass   []string `json:"bypass,omitempty"`
}

// bypassEntry is one host pattern of Chromium's --proxy-bypass-list
// (example.com, *.corp, 10.0.0.0/8, <local>, [::1]:8080).
var bypassEntry = regexp.MustCompile(`^(<local>|<-loopback>|[A-Za-z0-9.*:_\-\[\]/]{1,253})$`)

const maxBypass = 64

// Switch is the browser's current way out: direct, or through a Local
// proxy for an upstream. Chromium takes it at start (ChromiumFlags); a
// change calls for a restart of Chromium alone.
type Switch struct {
	log *slog.Logger

	mu     sync.Mutex
	local  *Local
	key    string // what the current setting is made of, to see changes
	bypass []string
}

// NewSwitch returns a Switch that goes direct.
func NewSwitch(log *slog.Logger) *Switch {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Switch{log: log}
}

// Set makes c the way out and reports whether that changed it (Chromium,
// if running, must then be restarted to take it).
func (s *Switch) Set(c Config) (changed bool, err error) {
	if len(c.Bypass) > maxBypass {
		return false, fmt.Errorf("proxy: %d bypass entries: at most %d", len(c.Bypass), maxBypass)
	}
	for _, b := range c.Bypass {
		if !bypassEntry.MatchString(b) {
			return false, fmt.Errorf("proxy: bypass entry %.64q: want a host pattern (example.com, *.corp, 10.0.0.0/8, <local>)", b)
		}
	}
	var up Upstream
	key := ""
	if c.Server != "" {
		creds := ""
		if c.Username != "" || c.Password != "" {
			if strings.Contains(c.Username, ":") {
				return false, errors.New("proxy: a username may not hold a colon")
			}
			creds = c.Username + ":" + c.Password
		}
		if up, err = ParseUpstream(c.Server, creds); err != nil {
			return false, err
		}
		key = up.String() + "\x00" + up.Username + "\x00" + up.Password + "\x00" + strings.Join(c.Bypass, ";")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == s.key {
		return false, nil
	}
	var l *Local
	if c.Server != "" {
		if l, err = Listen(up, s.log); err != nil {
			return false, err
		}
		s.log.Info("browser traffic goes through an upstream proxy", "proxy", up.String(), "credentials", up.Username != "", "local", l.Addr())
	} else {
		s.log.Info("browser traffic goes direct")
	}
	if s.local != nil {
		s.local.Close()
	}
	s.local, s.key, s.bypass = l, key, c.Bypass
	return true, nil
}

// ChromiumFlags are the flags that send Chromium's traffic the current
// way (none when direct). They name the local proxy, never a credential.
func (s *Switch) ChromiumFlags() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.local == nil {
		return nil
	}
	f := []string{"--proxy-server=http://" + s.local.Addr()}
	if len(s.bypass) > 0 {
		f = append(f, "--proxy-bypass-list="+strings.Join(s.bypass, ";"))
	}
	return f
}

// Status says where the browser's traffic goes and how that went, for
// deskd's status: "" when direct.
func (s *Switch) Status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.local == nil {
		return ""
	}
	st := s.local.Status()
	if st == "" {
		st = "not used yet"
	}
	return s.local.up.String() + ": " + st
}

// Close closes the local proxy, if any.
func (s *Switch) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.local != nil {
		s.local.Close()
		s.local = nil
	}
	s.key = ""
}
