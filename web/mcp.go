package web

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/cubepod/deskd/a11y"
	"github.com/cubepod/deskd/computer"
	"github.com/cubepod/deskd/term"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP server at /mcp (Streamable HTTP, stateless, JSON answers): one
// tool per computer action, with Anthropic's names and inputs, plus
// shell_exec and browser_cdp_url. A view token lists and calls only the
// tools that look.

// Property schemas of the action tools' inputs.
var mcpProps = map[string]string{
	"coordinate":       `{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2,"description":"[x, y] in screenshot pixels"}`,
	"start_coordinate": `{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2,"description":"[x, y] where the drag starts (default: where the pointer is)"}`,
	"text":             `{"type":"string"}`,
	"scroll_direction": `{"type":"string","enum":["up","down","left","right"]}`,
	"scroll_amount":    `{"type":"integer","minimum":0,"maximum":100,"description":"wheel steps (default 3)"}`,
	"duration":         `{"type":"number","minimum":0,"maximum":60,"description":"seconds"}`,
	"repeat":           `{"type":"integer","minimum":1,"maximum":100}`,
	"region":           `{"type":"array","items":{"type":"integer"},"minItems":4,"maxItems":4,"description":"[x0, y0, x1, y1] in screenshot pixels"}`,
	"mode":             `{"type":"string","enum":["keys","paste"],"description":"keys (default) types key by key; paste goes through the clipboard"}`,
	"element":          `{"type":"string","maxLength":24,"description":"an element id from a11y_snapshot (e.g. \"e12\"), instead of a coordinate: the action goes to its centre"}`,
}

type mcpTool struct {
	name, desc string
	props      []string
	required   []string
	look       bool // only looks: a view token may call it
}

var mcpActionTools = []mcpTool{
	{"screenshot", "Take a screenshot of the whole screen (PNG, scaled to at most 1568 px / 1.15 MP; action coordinates are in its pixels).", nil, nil, true},
	{"zoom", "Screenshot a region at full resolution.", []string{"region"}, []string{"region"}, true},
	{"cursor_position", "Where the pointer is, in screenshot pixels.", nil, nil, true},
	{"mouse_move", "Move the pointer (to coordinate, or to an element's centre).", []string{"coordinate", "element"}, nil, false},
	{"left_click", "Click the left button (at coordinate or on element, else where the pointer is); text names modifier keys to hold, e.g. \"shift\" or \"ctrl+alt\".", []string{"coordinate", "element", "text"}, nil, false},
	{"right_click", "Click the right button.", []string{"coordinate", "element", "text"}, nil, false},
	{"middle_click", "Click the middle button.", []string{"coordinate", "element", "text"}, nil, false},
	{"double_click", "Double-click the left button.", []string{"coordinate", "element", "text"}, nil, false},
	{"triple_click", "Triple-click the left button.", []string{"coordinate", "element", "text"}, nil, false},
	{"left_click_drag", "Drag with the left button from start_coordinate to coordinate.", []string{"start_coordinate", "coordinate", "text"}, []string{"coordinate"}, false},
	{"left_mouse_down", "Press the left button.", []string{"coordinate"}, nil, false},
	{"left_mouse_up", "Release the left button.", []string{"coordinate"}, nil, false},
	{"scroll", "Scroll with the wheel; text names modifier keys to hold.", []string{"coordinate", "element", "scroll_direction", "scroll_amount", "text"}, []string{"scroll_direction"}, false},
	{"type", "Type text (any Unicode); with element, click that element first.", []string{"text", "mode", "element"}, []string{"text"}, false},
	{"key", "Press a key or combination, xdotool style: \"Return\", \"ctrl+s\", \"ctrl+a Delete\".", []string{"text", "repeat"}, []string{"text"}, false},
	{"hold_key", "Hold a key or combination for duration seconds.", []string{"text", "duration"}, []string{"text", "duration"}, false},
	{"wait", "Wait duration seconds (default 1).", []string{"duration"}, nil, true},
}

func mcpSchema(t mcpTool) json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{`)
	for i, p := range t.props {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%s", p, mcpProps[p])
	}
	b.WriteString(`}`)
	if len(t.required) > 0 {
		r, _ := json.Marshal(t.required)
		b.WriteString(`,"required":`)
		b.Write(r)
	}
	b.WriteString(`}`)
	return json.RawMessage(b.String())
}

func (s *Server) mcpHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(s.mcpServer, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		// deskd checks Host (loopback mode) and the panel token itself;
		// behind the gateway requests carry its Host, which the SDK's own
		// check would refuse.
		DisableLocalhostProtection: true,
		Logger:                     s.log.With("part", "mcp"),
	})
}

func mcpError(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// mcpServer builds the server for one request: its tools depend on the
// token's scope, and act for that caller.
func (s *Server) mcpServer(r *http.Request) *mcp.Server {
	claims, _ := ClaimsFrom(r.Context())
	full := !claims.ReadOnly()
	holder := agentOf(r)
	holder.name = "mcp:" + holder.name
	srv := mcp.NewServer(&mcp.Implementation{Name: "deskd", Title: "deskd computer use", Version: "1"}, nil)
	for _, t := range mcpActionTools {
		if !full && !t.look {
			continue
		}
		srv.AddTool(&mcp.Tool{Name: t.name, Description: t.desc, InputSchema: mcpSchema(t),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: t.look}}, s.recovered(t.name, s.mcpAction(t.name, holder, !full)))
	}
	srv.AddTool(&mcp.Tool{Name: "a11y_snapshot", Description: "List the elements on the screen as assistive technology sees them (the browser's tabs, address bar, dialogs, page content, other windows): " +
		"id, role, name, value, states and centre in screenshot pixels, indented by depth. Take one before acting: click an element by its id (element) or its centre (coordinate). " +
		"interactive_only lists only what one acts on; region limits to [x0, y0, x1, y1].",
		InputSchema: json.RawMessage(`{"type":"object","properties":{` +
			`"interactive_only":{"type":"boolean","description":"only buttons, fields, links, tabs and other focusable elements"},` +
			`"region":` + mcpProps["region"] + `,` +
			`"max_nodes":{"type":"integer","minimum":1,"maximum":20000,"description":"elements listed at most (default 1000)"}}}`),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		s.recovered("a11y_snapshot", s.mcpA11y))
	if !full {
		return srv
	}
	cdpURL := s.cdpPublic(r)
	srv.AddTool(&mcp.Tool{Name: "browser_cdp_url", Description: "The Chrome DevTools Protocol WebSocket URL of the desktop's Chromium (for Playwright connectOverCDP, Puppeteer, chromedp).",
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		s.recovered("browser_cdp_url", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			u := cdpURL.Scheme + "://" + cdpURL.Host + cdpURL.Prefix + "/cdp"
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: u}}}, nil
		}))
	srv.AddTool(&mcp.Tool{Name: "browser_followed_tab", Description: "Tab-follow: whether the desktop follows the tab you act on over CDP, and the tab it brought to the front (id, url, title): the one screenshots show unless a person switched since.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{}}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		s.recovered("browser_followed_tab", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			b, err := json.Marshal(s.followState(ctx))
			if err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}}, nil
		}))
	if s.cfg.Terminal != nil {
		srv.AddTool(&mcp.Tool{Name: "shell_exec", Description: "Run a shell command as the desktop's user in a fresh terminal (PTY); returns its output (first 256 KiB) and exit code.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number","minimum":0,"maximum":600,"description":"seconds (default 30)"}},"required":["command"]}`)},
			s.recovered("shell_exec", s.mcpShell))
	}
	return srv
}

// recovered turns a panic in a tool into an isError result and a log
// line: the SDK does not recover, and a panic would end the daemon.
func (s *Server) recovered(name string, h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("mcp tool panicked", "tool", name, "panic", p, "stack", string(debug.Stack()))
				res, err = mcpError("internal error in %s: %v", name, p), nil
			}
			if s.actions.Load() != nil {
				s.logAction("mcp", map[string]any{"tool": name, "ok": err == nil && res != nil && !res.IsError})
			}
		}()
		return h(ctx, req)
	}
}

func (s *Server) mcpAction(name string, holder agent, view bool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var a computer.Action
		if len(req.Params.Arguments) > 0 {
			if err := json.Unmarshal(req.Params.Arguments, &a); err != nil {
				return mcpError("bad input: %v", err), nil
			}
		}
		a.Action = name
		c, err := s.computer(ctx)
		if err != nil {
			return mcpError("desktop not available: %v", err), nil
		}
		plan, err := c.PlanActions([]computer.Action{a})
		if err != nil {
			return mcpError("%v", err), nil
		}
		if view && plan.Waits() > maxViewWait {
			return mcpError("wait: a view-only token waits %v at most", maxViewWait), nil
		}
		// Like Anthropic's reference tool, an action that changes the
		// screen answers with a screenshot taken once it settled.
		after := !plan.ReadOnly()
		ans, code := s.runPlan(ctx, c, holder, view, plan, computer.ShotOptions{}, after, 0, 0)
		if code != http.StatusOK || !ans.OK {
			return mcpError("%s", ans.Error), nil
		}
		res := &mcp.CallToolResult{}
		r := ans.Results[0]
		switch {
		case r.Image != nil:
			res.Content = append(res.Content, &mcp.ImageContent{Data: r.Image.Data, MIMEType: "image/" + r.Image.Format})
		case r.Coordinate != nil:
			res.Content = append(res.Content, &mcp.TextContent{Text: fmt.Sprintf("X=%d,Y=%d", r.Coordinate[0], r.Coordinate[1])})
			res.StructuredContent = map[string]any{"coordinate": r.Coordinate}
		default:
			text := "ok"
			if ans.HumanInput {
				text = "ok (a person used the desktop meanwhile)"
			}
			res.Content = append(res.Content, &mcp.TextContent{Text: text})
		}
		if ans.Screenshot != nil {
			res.Content = append(res.Content, &mcp.ImageContent{Data: ans.Screenshot.Data, MIMEType: "image/" + ans.Screenshot.Format})
		}
		return res, nil
	}
}

// mcpA11y answers a11y_snapshot with the text listing (and the JSON as
// structured content).
func (s *Server) mcpA11y(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Interactive bool  `json:"interactive_only"`
		Region      []int `json:"region"`
		MaxNodes    int   `json:"max_nodes"`
	}
	if len(req.Params.Arguments) > 0 {
		if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
			return mcpError("bad input: %v", err), nil
		}
	}
	if in.MaxNodes < 0 || in.MaxNodes > a11y.MaxNodes {
		return mcpError("max_nodes %d: want 1-%d", in.MaxNodes, a11y.MaxNodes), nil
	}
	o := computer.ElementOptions{Options: a11y.Options{Interactive: in.Interactive, MaxNodes: in.MaxNodes}}
	if in.Region != nil {
		if len(in.Region) != 4 {
			return mcpError("region: want [x0, y0, x1, y1]"), nil
		}
		o.Region = image.Rect(in.Region[0], in.Region[1], in.Region[2], in.Region[3])
	}
	c, err := s.computer(ctx)
	if err != nil {
		return mcpError("desktop not available: %v", err), nil
	}
	l, err := c.Elements(ctx, o)
	if err != nil {
		return mcpError("%v", err), nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: l.Text()}}, StructuredContent: l}, nil
}

// mcpShellOutput bounds shell_exec's answer.
const mcpShellOutput = 256 << 10

func (s *Server) mcpShell(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Command string  `json:"command"`
		Timeout float64 `json:"timeout"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
		return mcpError("bad input: %v", err), nil
	}
	if in.Timeout == 0 {
		in.Timeout = 30
	}
	if in.Timeout < 0 || in.Timeout > term.MaxExecTimeout.Seconds() {
		return mcpError("timeout %v: want 0-%v seconds", in.Timeout, term.MaxExecTimeout.Seconds()), nil
	}
	r, err := s.cfg.Terminal.Exec(ctx, in.Command, time.Duration(in.Timeout*float64(time.Second)), mcpShellOutput)
	if err != nil {
		return mcpError("%v", err), nil
	}
	text := r.Output
	if r.Truncated {
		text += fmt.Sprintf("\n[output truncated at %d bytes]", mcpShellOutput)
	}
	if r.TimedOut {
		text += fmt.Sprintf("\n[timed out after %v s; killed]", in.Timeout)
	}
	text += fmt.Sprintf("\n[exit code %d]", r.ExitCode)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: r, IsError: r.ExitCode != 0}, nil
}
