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
	last string // the latest recording's id
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
				if err := cur.Err(); err != nil {
					s.log.Info("desktop recording ended", "id", cur.ID(), "why", err)
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
		// noVNC's default quality and compression, as the panel's viewer
		// asks by default: the recorder shares its encoding.
		rec, err := record.RecordDesktop(ctx, f, s.dialRecorder, record.DesktopOptions{Keyframe: s.cfg.RecordKeyframe, Log: s.log})
		if err != nil {
			s.log.Warn("desktop recording not started", "err", err)
			continue
		}
		s.log.Info("desktop recording started", "id", rec.ID())
		d.mu.Lock()
		d.cur, d.last = rec, rec.ID()
		d.mu.Unlock()
		go func() { // ends with the recording, which ends with ctx at the latest
			<-rec.Done()
			d.nudge()
		}()
	}
}

// errNoDesktop: the recorder does not start the desktop.
var errNoDesktop = errors.New("the desktop is not running")

// dialRecorder connects a recorder to the running desktop's RFB server.
func (s *Server) dialRecorder(ctx context.Context) (net.Conn, error) {
	st := s.cfg.Stack.Status()
	if st.Status != desktop.StatusRunning || st.Display == "" {
		return nil, errNoDesktop
	}
	srv, err := s.rfbFor(st.Display)
	if err != nil {
		return nil, err
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

// waitDesktopRecording waits (3 s at most) for the recording that a
// switch on starts when the desktop runs, so the answer names it.
func (s *Server) waitDesktopRecording(ctx context.Context) {
	if s.cfg.Stack.Status().Status != desktop.StatusRunning {
		return // it starts with the desktop
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if on, id := s.desktopRecording(); !on || id != "" {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
