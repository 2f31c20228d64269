package web

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/cubepod/deskd/bridge"
	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/record"
)

// Desktop recording: when switched on (POST record/start {"desktop":
// true}, or --record=desktop), the desktop is recorded while it runs: a
// recording starts when it is running or next starts (recording never
// starts it) and ends when it stops. Its loop (deskRecLoop) owns the
// recorder; a switch, an activation or a recording's end pokes it.
type deskRec struct {
	mu   sync.Mutex
	on   bool
	cur  *record.DesktopRecorder
	poke chan struct{}
}

func (d *deskRec) nudge() {
	select {
	case d.poke <- struct{}{}:
	default:
	}
}

// setDesktopRecording switches desktop recording.
func (s *Server) setDesktopRecording(on bool) {
	s.deskRec.mu.Lock()
	s.deskRec.on = on
	s.deskRec.mu.Unlock()
	s.deskRec.nudge()
}

// desktopRecording says whether it is on and the recording being made.
func (s *Server) desktopRecording() (bool, string) {
	d := &s.deskRec
	d.mu.Lock()
	defer d.mu.Unlock()
	id := ""
	if d.cur != nil {
		select {
		case <-d.cur.Done():
		default:
			id = d.cur.ID()
		}
	}
	return d.on, id
}

// deskRecLoop starts and stops desktop recordings until ctx ends.
func (s *Server) deskRecLoop(ctx context.Context) {
	d := &s.deskRec
	defer func() {
		d.mu.Lock()
		cur := d.cur
		d.cur = nil
		d.mu.Unlock()
		if cur != nil {
			cur.Close()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.poke:
		}
		d.mu.Lock()
		on, cur := d.on, d.cur
		d.mu.Unlock()
		if cur != nil {
			select {
			case <-cur.Done():
				switch err := cur.Err(); {
				case errors.Is(err, record.ErrDesktopStopped):
					s.log.Info("desktop recording ended", "id", cur.ID(), "why", err)
				case err != nil:
					// The quota or a full disk: recording stops until
					// switched on again (no new file to fail at once).
					s.log.Warn("desktop recording stopped", "id", cur.ID(), "why", err)
					on = false
					d.mu.Lock()
					d.on = false
					d.mu.Unlock()
				}
				cur = nil
			default:
				if !on {
					cur.Close()
					cur = nil
				}
			}
			if cur == nil {
				d.mu.Lock()
				d.cur = nil
				d.mu.Unlock()
			}
		}
		if !on || cur != nil || s.cfg.Stack.Status().Status != desktop.StatusRunning {
			continue
		}
		f, err := s.cfg.Recordings.Create(record.Desktop)
		if err != nil {
			s.log.Warn("desktop recording not started", "err", err)
			continue
		}
		// It follows a viewer when there is one (dialRecorder), and
		// moves to one that comes (Better).
		rec, err := record.RecordDesktop(ctx, f, s.dialRecorder, record.DesktopOptions{Keyframe: s.cfg.RecordKeyframe, KeyframeBytes: s.cfg.RecordKeyframeBytes, Log: s.log,
			Better: s.followable})
		if err != nil {
			s.log.Warn("desktop recording not started", "err", err)
			continue
		}
		s.log.Info("desktop recording started", "id", rec.ID())
		d.mu.Lock()
		d.cur = rec
		d.mu.Unlock()
		go func() { // ends with the recording, which ends with ctx at the latest
			<-rec.Done()
			d.nudge()
		}()
	}
}

// followable says whether the running desktop has a viewer a recorder
// can follow (dialRecorder would tap it).
func (s *Server) followable() bool {
	h := &s.rfb
	h.mu.Lock()
	srv := h.srv
	h.mu.Unlock()
	return srv != nil && srv.Followable()
}

// errNoDesktop: the recorder does not start the desktop.
var errNoDesktop = errors.New("the desktop is not running")

// dialRecorder connects a recorder to the running desktop's RFB server:
// a tap of the viewer connected longest that it can follow, or else a
// connection of its own.
func (s *Server) dialRecorder(ctx context.Context) (net.Conn, error) {
	st := s.cfg.Stack.Status()
	if st.Status != desktop.StatusRunning || st.Display == "" {
		return nil, errNoDesktop
	}
	srv, err := s.rfbFor(st.Display)
	if err != nil {
		return nil, err
	}
	// Following a live viewer costs a copy of what it is sent; a
	// connection of its own encodes everything again.
	if conn, err := srv.Tap(ctx); err == nil {
		return conn, nil
	}
	if !s.handlers.TryAdd() {
		return nil, errShuttingDown
	}
	a, b := net.Pipe()
	go func() { // ends when the recorder closes its side, or with ctx
		defer s.handlers.Done()
		if err := srv.Serve(ctx, b, bridge.ConnOptions{Recorder: true}); err != nil {
			s.log.Debug("recorder connection ended", "err", err)
		}
	}()
	return a, nil
}

// waitDesktopRecording waits (5 s at most) for a switch to take effect,
// so the answer says it: on, the recording starts when the desktop
// runs (the answer names it); off, the recording is finished.
func (s *Server) waitDesktopRecording(ctx context.Context, on bool) {
	if on && s.cfg.Stack.Status().Status != desktop.StatusRunning {
		return // it starts with the desktop
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.deskRec.mu.Lock()
		cur, now := s.deskRec.cur, s.deskRec.on
		s.deskRec.mu.Unlock()
		if now != on || (on && cur != nil) || (!on && cur == nil) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
