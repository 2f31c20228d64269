package cdp

import (
	"context"
	"fmt"
)

// Health asks Chromium for Browser.getVersion over a connection of its
// own (never an agent's), proving the DevTools WebSocket works end to
// end, not only the HTTP endpoint.
func Health(ctx context.Context, port int) (string, error) {
	s, err := dialBrowser(ctx, port)
	if err != nil {
		return "", fmt.Errorf("cdp: health: %w", err)
	}
	defer s.close()
	var r struct {
		Product string `json:"product"`
	}
	if err := s.call(ctx, "Browser.getVersion", nil, &r); err != nil {
		return "", fmt.Errorf("cdp: health: %w", err)
	}
	return r.Product, nil
}

// FitWindows makes every browser window fill a w×h screen: a window
// manager does not resize windows when RANDR resizes the screen (and
// there may be none), so deskd does it after each resize.
func FitWindows(ctx context.Context, port, w, h int) error {
	s, err := dialBrowser(ctx, port)
	if err != nil {
		return fmt.Errorf("cdp: fit windows: %w", err)
	}
	defer s.close()
	var targets struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	if err := s.call(ctx, "Target.getTargets", nil, &targets); err != nil {
		return err
	}
	seen := map[int]bool{}
	for _, t := range targets.TargetInfos {
		if t.Type != "page" {
			continue
		}
		var win struct {
			WindowID int `json:"windowId"`
		}
		if err := s.call(ctx, "Browser.getWindowForTarget", map[string]any{"targetId": t.TargetID}, &win); err != nil {
			continue // a page without a window (closing, say)
		}
		if seen[win.WindowID] {
			continue
		}
		seen[win.WindowID] = true
		// A maximized window takes no bounds: make it normal first.
		if err := s.call(ctx, "Browser.setWindowBounds", map[string]any{"windowId": win.WindowID,
			"bounds": map[string]any{"windowState": "normal"}}, nil); err != nil {
			return err
		}
		if err := s.call(ctx, "Browser.setWindowBounds", map[string]any{"windowId": win.WindowID,
			"bounds": map[string]any{"left": 0, "top": 0, "width": w, "height": h}}, nil); err != nil {
			return err
		}
	}
	return nil
}

// CloseBrowser asks Chromium to quit as a person closing it would
// (Browser.close): unlike SIGTERM, that path writes the cookies set in
// the last seconds to the profile before the browser exits.
func CloseBrowser(ctx context.Context, port int) error {
	s, err := dialBrowser(ctx, port)
	if err != nil {
		return fmt.Errorf("cdp: close: %w", err)
	}
	defer s.c.CloseNow()
	if err := s.call(ctx, "Browser.close", nil, nil); err != nil {
		return fmt.Errorf("cdp: close: %w", err)
	}
	return nil
}
