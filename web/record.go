package web

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"

	"github.com/cubepod/deskd/record"
)

// Recording routes (under the panel; full tokens, and view tokens may
// list and download when Config.RecordView says so):
//
//	GET    record/          the recordings, newest first, and what is being recorded
//	GET    record/{id}      download one (asciicast v2 for a terminal)
//	GET    record/{id}/mp4  a desktop recording as an MP4 video, ?fps=1-30 (recexport.go)
//	DELETE record/{id}      delete a finished one
//	POST   record/start     {"desktop": true, "terminal": true, "input": false, "actions": true}:
//	                        record the desktop while it runs, terminal sessions (running and
//	                        new), and/or start the action log
//	POST   record/stop      {"desktop": true, "terminal": true, "actions": true}: finish those

func (s *Server) recordRoutes(mux *http.ServeMux) {
	look := s.requireFull
	if s.cfg.RecordView {
		look = func(h http.HandlerFunc) http.HandlerFunc { return h }
	}
	mux.HandleFunc("GET /record/{$}", look(s.recordList))
	mux.HandleFunc("GET /record/{id}", look(s.recordGet))
	mux.HandleFunc("GET /record/{id}/mp4", look(s.recordMP4))
	mux.HandleFunc("DELETE /record/{id}", s.requireFull(s.recordDelete))
	mux.HandleFunc("POST /record/start", s.requireFull(requireJSON(s.recordSwitch(true))))
	mux.HandleFunc("POST /record/stop", s.requireFull(requireJSON(s.recordSwitch(false))))
}

// recordState is what is being recorded.
type recordState struct {
	Desktop       bool   `json:"desktop"`
	DesktopID     string `json:"desktop_id,omitempty"` // the desktop recording being written
	Terminal      bool   `json:"terminal"`
	TerminalInput bool   `json:"terminal_input"`
	Actions       string `json:"actions,omitempty"` // the action log being written
	Bytes         int64  `json:"bytes"`             // the recordings' space in use
	MP4           bool   `json:"mp4"`               // record/{id}/mp4 can export (x264 is there)
}

func (s *Server) recordState() recordState {
	st := recordState{Bytes: s.cfg.Recordings.Bytes(), MP4: s.cfg.ExportVideo != nil}
	st.Desktop, st.DesktopID = s.desktopRecording()
	if a := s.actions.Load(); a != nil {
		st.Actions = a.ID()
	}
	if s.cfg.Terminal != nil {
		st.Terminal = s.cfg.Terminal.Recording()
	}
	if s.cfg.TerminalRecorder != nil {
		st.TerminalInput = s.cfg.TerminalRecorder.Input.Load()
	}
	return st
}

func (s *Server) recordList(w http.ResponseWriter, r *http.Request) {
	list, err := s.cfg.Recordings.List()
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if list == nil {
		list = []record.Info{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"recordings": list, "recording": s.recordState()})
}

// openRecording opens the recording the path names, or answers why it
// cannot (404, or 400 for a bad id) and returns false.
func (s *Server) openRecording(w http.ResponseWriter, r *http.Request) (*os.File, record.Info, bool) {
	f, info, err := s.cfg.Recordings.Get(r.PathValue("id"))
	switch {
	case errors.Is(err, record.ErrNotFound):
		apiError(w, http.StatusNotFound, err.Error())
		return nil, info, false
	case err != nil:
		apiError(w, http.StatusBadRequest, err.Error())
		return nil, info, false
	}
	return f, info, true
}

func (s *Server) recordGet(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	f, info, ok := s.openRecording(w, r)
	if !ok {
		return
	}
	defer f.Close()
	h := w.Header()
	name, media := record.FileName(id)
	h.Set("Content-Type", media)
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if !info.Active { // a recording in progress grows while it is read
		h.Set("Content-Length", strconv.FormatInt(info.Size, 10))
		io.CopyN(w, f, info.Size)
		return
	}
	io.Copy(w, f)
}

func (s *Server) recordDelete(w http.ResponseWriter, r *http.Request) {
	switch err := s.cfg.Recordings.Remove(r.PathValue("id")); {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]string{"deleted": r.PathValue("id")})
	case errors.Is(err, record.ErrNotFound):
		apiError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, record.ErrActive):
		apiError(w, http.StatusConflict, err.Error())
	default:
		apiError(w, http.StatusBadRequest, err.Error())
	}
}

// recordRequest switches recordings; absent fields change nothing.
type recordRequest struct {
	Desktop  *bool `json:"desktop,omitempty"`
	Terminal *bool `json:"terminal,omitempty"`
	Input    *bool `json:"input,omitempty"` // terminal keystrokes (start only)
	Actions  *bool `json:"actions,omitempty"`
}

func (s *Server) recordSwitch(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req recordRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAPIBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			apiError(w, http.StatusBadRequest, "bad record request: "+err.Error())
			return
		}
		if req.Desktop == nil && req.Terminal == nil && req.Actions == nil {
			apiError(w, http.StatusBadRequest, `bad record request: say what to record: {"desktop": true}, {"terminal": true}, {"actions": true}, or several`)
			return
		}
		if req.Desktop != nil && *req.Desktop {
			s.setDesktopRecording(on)
			s.waitDesktopRecording(r.Context(), on)
		}
		if req.Actions != nil && *req.Actions {
			if on {
				if err := s.startActions(); err != nil {
					apiError(w, http.StatusInsufficientStorage, "action log: "+err.Error())
					return
				}
			} else {
				s.stopActions()
			}
		}
		if req.Input != nil && !on {
			apiError(w, http.StatusBadRequest, "bad record request: input is set when starting")
			return
		}
		if req.Terminal != nil && *req.Terminal {
			if s.cfg.Terminal == nil || s.cfg.TerminalRecorder == nil {
				apiError(w, http.StatusConflict, "this deskd has no terminal to record")
				return
			}
			if req.Input != nil {
				if s.cfg.Terminal.Recording() && s.cfg.TerminalRecorder.Input.Load() != *req.Input {
					// Recordings in progress keep their setting: finish them.
					s.cfg.Terminal.SetRecording(false)
				}
				s.cfg.TerminalRecorder.Input.Store(*req.Input)
			}
			s.cfg.Terminal.SetRecording(on)
		}
		writeJSON(w, http.StatusOK, s.recordState())
	}
}
