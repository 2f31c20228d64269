package cdp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/coder/websocket"
)

// Health asks Chromium for Browser.getVersion over a connection of its
// own (never an agent's), proving the DevTools WebSocket works end to
// end, not only the HTTP endpoint.
func Health(ctx context.Context, port int) (string, error) {
	v, err := GetVersion(ctx, port)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(v.WebSocketDebuggerURL)
	if err != nil {
		return "", fmt.Errorf("cdp: health: %w", err)
	}
	c, err := DialUpstream(ctx, port, u.Path)
	if err != nil {
		return "", err
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"id":1,"method":"Browser.getVersion"}`)); err != nil {
		return "", fmt.Errorf("cdp: health: %w", err)
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return "", fmt.Errorf("cdp: health: %w", err)
		}
		var r struct {
			ID     int `json:"id"`
			Result struct {
				Product string `json:"product"`
			} `json:"result"`
			Error *struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(b, &r) != nil || r.ID != 1 {
			continue // an event
		}
		if r.Error != nil {
			return "", fmt.Errorf("cdp: health: %s", r.Error.Message)
		}
		c.Close(websocket.StatusNormalClosure, "")
		return r.Result.Product, nil
	}
}
