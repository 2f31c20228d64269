package cdp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/coder/websocket"
)

// session is deskd's own browser-level DevTools connection (never an
// agent's): one command at a time, events skipped.
type session struct {
	c  *websocket.Conn
	id int
}

// dialBrowser connects to the browser target of the Chromium on port.
func dialBrowser(ctx context.Context, port int) (*session, error) {
	v, err := GetVersion(ctx, port)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(v.WebSocketDebuggerURL)
	if err != nil {
		return nil, fmt.Errorf("cdp: browser url: %w", err)
	}
	c, err := DialUpstream(ctx, port, u.Path)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(4 << 20)
	return &session{c: c}, nil
}

func (s *session) close() { s.c.Close(websocket.StatusNormalClosure, "") }

// call sends method with params and decodes its result into result.
func (s *session) call(ctx context.Context, method string, params, result any) error {
	s.id++
	msg, err := json.Marshal(map[string]any{"id": s.id, "method": method, "params": params})
	if err != nil {
		return err
	}
	if err := s.c.Write(ctx, websocket.MessageText, msg); err != nil {
		return fmt.Errorf("cdp: %s: %w", method, err)
	}
	for {
		_, b, err := s.c.Read(ctx)
		if err != nil {
			return fmt.Errorf("cdp: %s: %w", method, err)
		}
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(b, &r) != nil || r.ID != s.id {
			continue // an event
		}
		if r.Error != nil {
			return fmt.Errorf("cdp: %s: %s", method, r.Error.Message)
		}
		if result == nil {
			return nil
		}
		return json.Unmarshal(r.Result, result)
	}
}
