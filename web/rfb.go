package web

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/cubepod/deskd/bridge"
	"github.com/cubepod/deskd/cdp"
	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/x11"
)

// rfbHolder keeps one RFB server per X display: viewers share it, and a
// restarted Xvfb (a new display) gets a new one.
type rfbHolder struct {
	mu      sync.Mutex
	display string
	screen  *x11.Screen
	srv     *bridge.Server
}

func (h *rfbHolder) close() {
	if h.srv != nil {
		h.srv.Close()
		h.screen.Close()
		h.srv, h.screen, h.display = nil, nil, ""
	}
}

// size is the screen size of display when an RFB server watches it
// (viewers may have resized it since Xvfb started).
func (h *rfbHolder) size(display string) (int, int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.screen == nil || h.display != display {
		return 0, 0, false
	}
	w, ht := h.screen.Size()
	return w, ht, true
}

// display starts the desktop if needed and returns its X display.
func (s *Server) display(ctx context.Context) (string, error) {
	st := s.cfg.Stack.Status()
	if st.Status != desktop.StatusRunning {
		ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		defer cancel()
		var err error
		if st, err = s.Activate(ctx, desktop.StartOptions{}); err != nil {
			return "", err
		}
	}
	if st.Display == "" {
		return "", fmt.Errorf("desktop has no display")
	}
	return st.Display, nil
}

// rfbServer starts the desktop if needed and returns the RFB server for
// its display.
func (s *Server) rfbServer(ctx context.Context) (*bridge.Server, error) {
	display, err := s.display(ctx)
	if err != nil {
		return nil, err
	}
	return s.rfbFor(display)
}

// rfbFor returns the RFB server for display, made if needed.
func (s *Server) rfbFor(display string) (*bridge.Server, error) {
	h := &s.rfb
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.srv != nil && h.display == display {
		select {
		case <-h.srv.Done(): // its X connection died: start over
		default:
			return h.srv, nil
		}
	}
	h.close()
	scr, err := x11.OpenScreenWith(display, s.keyboard(display), s.log.With("part", "x11"))
	if err != nil {
		return nil, err
	}
	srv, err := bridge.NewServer(scr, bridge.Config{Name: "deskd " + display, Password: s.cfg.VNCPassword,
		Logger: s.log.With("part", "rfb"), OnResize: s.fitBrowser, MaxViewers: s.cfg.MaxViewers, OnInput: s.viewerInput, Cores: s.cfg.Cores, Video: s.cfg.Video})
	if err != nil {
		scr.Close()
		return nil, err
	}
	h.display, h.screen, h.srv = display, scr, srv
	return srv, nil
}

// keyboards keeps the one keyboard mapping of the desktop's display that
// the RFB server's and the computer API's X connections share.
type keyboards struct {
	mu      sync.Mutex
	display string
	kb      *x11.Keyboard
}

// keyboard is display's shared Keyboard (a new one for a new display).
func (s *Server) keyboard(display string) *x11.Keyboard {
	k := &s.kbd
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kb == nil || k.display != display {
		k.display, k.kb = display, x11.NewKeyboard()
	}
	return k.kb
}

// browserFit resizes Chromium's windows to the screen after a resize,
// one call at a time, always to the newest size.
type browserFit struct {
	mu      sync.Mutex
	w, h    int
	running bool
}

// fitBrowser makes Chromium's windows fill a w×h screen, in the
// background (it is called from the RFB capture loop).
func (s *Server) fitBrowser(w, h int) {
	f := &s.fit
	f.mu.Lock()
	f.w, f.h = w, h
	running := f.running
	f.running = true
	f.mu.Unlock()
	if running {
		return // the running call picks the new size up
	}
	if !s.handlers.TryAdd() {
		f.mu.Lock()
		f.running = false
		f.mu.Unlock()
		return
	}
	go func() { // ends when the newest size has been applied
		defer s.handlers.Done()
		for {
			f.mu.Lock()
			w, h := f.w, f.h
			f.mu.Unlock()
			ctx, cancel := context.WithTimeout(s.base, 10*time.Second)
			if err := cdp.FitWindows(ctx, s.cfg.Stack.CDPPort(), w, h); err != nil {
				s.log.Info("browser window not fitted to the screen", "w", w, "h", h, "err", err)
			}
			cancel()
			f.mu.Lock()
			if f.w == w && f.h == h {
				f.running = false
				f.mu.Unlock()
				return
			}
			f.mu.Unlock()
		}
	}()
}

// websockify serves RFB over a WebSocket (subprotocol "binary" when the
// viewer offers it, as noVNC and websockify do), lazily starting the
// desktop on the first viewer. A view-scope token gets a view-only viewer.
func (s *Server) websockify(w http.ResponseWriter, r *http.Request) {
	if !s.checkWS(w, r) { // before the desktop is started for it
		return
	}
	srv, err := s.rfbServer(r.Context())
	if err != nil {
		http.Error(w, "desktop not available: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	// RFB over WebSocket is a byte stream (websocket.NetConn lifts the
	// message size limit): bridge bounds each RFB message instead.
	c, ctx, done, err := s.upgrade(w, r, wsOptions{subprotocols: []string{"binary"}, readLimit: -1, ping: true})
	if err != nil {
		return
	}
	defer done()
	claims, _ := ClaimsFrom(r.Context())
	conn := websocket.NetConn(ctx, c, websocket.MessageBinary)
	if err := srv.Serve(ctx, conn, bridge.ConnOptions{ViewOnly: claims.ReadOnly()}); err != nil {
		s.log.Debug("rfb viewer ended", "err", err)
	}
}

// ServeVNC serves native VNC viewers on l (a loopback TCP listener) until
// it is closed.
func (s *Server) ServeVNC(l net.Listener) error {
	for {
		conn, err := l.Accept()
		if err != nil {
			return err
		}
		if !s.handlers.TryAdd() {
			conn.Close()
			return errShuttingDown
		}
		go func() { // ends when the viewer leaves or at Close
			defer s.handlers.Done()
			defer conn.Close()
			srv, err := s.rfbServer(s.base)
			if err != nil {
				s.log.Warn("vnc viewer refused", "err", err)
				return
			}
			if err := srv.Serve(s.base, conn, bridge.ConnOptions{}); err != nil {
				s.log.Debug("vnc viewer ended", "err", err)
			}
		}()
	}
}
