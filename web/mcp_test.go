package web

import (
	"context"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A panic inside a tool is the caller's isError result and a log line,
// not the end of the daemon (the SDK does not recover), and the handler
// keeps working afterwards.
func TestMCPToolPanicIsAnError(t *testing.T) {
	s := New(Config{})
	defer s.Close()
	calls := 0
	h := s.recovered("boom", func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		calls++
		if calls == 1 {
			var b []byte
			_ = b[7] // index out of range, as a screenshot past its buffer did
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "fine"}}}, nil
	})
	res, err := h(t.Context(), &mcp.CallToolRequest{})
	if err != nil || res == nil || !res.IsError {
		t.Fatalf("panicking tool: %+v %v", res, err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, "internal error in boom") || !strings.Contains(text, "index out of range") {
		t.Fatalf("panicking tool says %q", text)
	}
	if res, err := h(t.Context(), &mcp.CallToolRequest{}); err != nil || res.IsError {
		t.Fatalf("after the panic: %+v %v", res, err)
	}
}
