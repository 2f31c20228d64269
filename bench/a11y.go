package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// docsPage is a typical page an agent reads: a navigation bar, headings,
// paragraphs with links, a table and a form (about 400 elements).
func docsPage() string {
	var b strings.Builder
	b.WriteString(`<!doctype html><title>Docs</title><body style="font:16px sans-serif;margin:16px"><nav>`)
	for i := range 12 {
		fmt.Fprintf(&b, `<a href="#s%d">Section %d</a> `, i, i)
	}
	b.WriteString(`</nav><main>`)
	for i := range 12 {
		fmt.Fprintf(&b, `<h2 id="s%d">Section %d</h2><p>Some text with <a href="#">a link</a> and <b>bold words</b>, then more text; <a href="#">another link</a>.</p>`, i, i)
		if i%4 == 0 {
			b.WriteString(`<table border=1><tr><th>Name</th><th>Value</th></tr>`)
			for r := range 5 {
				fmt.Fprintf(&b, `<tr><td>key %d</td><td>value %d</td></tr>`, r, r)
			}
			b.WriteString(`</table>`)
		}
	}
	b.WriteString(`<form><label>Search <input name=q></label> <select><option>All</option><option>Docs</option></select> <button type=button>Go</button></form></main></body>`)
	return "data:text/html," + url.PathEscape(b.String())
}

// a11yScenario: how long an agent waits for the list of what is on the
// screen. deskd: GET /computer/a11y (AT-SPI over the accessibility bus:
// the browser's own UI and the page, in screen coordinates). Peer: CDP's
// Accessibility.getFullAXTree of the same page over a direct connection
// (the page's tree only, without positions).
func a11yScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	dk, err := startDeskd(ctx, c)
	if err != nil {
		return nil, "", err
	}
	defer dk.stop()
	base := "http://" + dk.addr
	if _, err := startDesktop(ctx, dk, "about:blank"); err != nil {
		return nil, "", err
	}
	var targets []struct {
		Type                 string `json:"type"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := getJSON(ctx, base+"/cdp/json/list", &targets); err != nil {
		return nil, "", err
	}
	wsURL := ""
	for _, t := range targets {
		if t.Type == "page" {
			wsURL = t.WebSocketDebuggerURL
		}
	}
	if wsURL == "" {
		return nil, "", fmt.Errorf("no page among %d targets", len(targets))
	}
	ws, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		return nil, "", err
	}
	defer ws.CloseNow()
	ws.SetReadLimit(64 << 20)
	// The page is longer than a start request may be: it is navigated to.
	if _, err := cdpCall(ctx, ws, 1, "Page.navigate", map[string]any{"url": docsPage()}); err != nil {
		return nil, "", err
	}
	type list struct {
		Elements []struct{ Role, Name string }
		Visited  int
	}
	snap := func(q string) (list, time.Duration, error) {
		start := time.Now()
		var l list
		err := getJSON(ctx, base+"/computer/a11y?"+q, &l)
		return l, time.Since(start), err
	}
	// The page is listed once Chromium has built its tree.
	var l list
	if err := poll(ctx, 30*time.Second, "the docs page in the snapshot", func() error {
		var err error
		if l, _, err = snap(""); err != nil {
			return err
		}
		for _, e := range l.Elements {
			if e.Role == "link" && e.Name == "Section 11" {
				return nil
			}
		}
		return fmt.Errorf("%d elements, no link to section 11", len(l.Elements))
	}); err != nil {
		return nil, "", err
	}
	rounds := max(c.Rounds*4, 10)
	var dVisible, dInter, peer []float64
	nodes := 0
	last := l
	for i := range rounds {
		l, d, err := snap("")
		if err != nil {
			return nil, "", err
		}
		dVisible = append(dVisible, ms(d))
		_, d, err = snap("interactive=1")
		if err != nil {
			return nil, "", err
		}
		dInter = append(dInter, ms(d))
		start := time.Now()
		b, err := cdpCall(ctx, ws, i+2, "Accessibility.getFullAXTree", map[string]any{})
		if err != nil {
			return nil, "", err
		}
		peer = append(peer, ms(time.Since(start)))
		var r struct {
			Result struct {
				Nodes []json.RawMessage `json:"nodes"`
			} `json:"result"`
		}
		json.Unmarshal(b, &r)
		nodes = len(r.Result.Nodes)
		last = l
	}
	return []Figure{
		figure("snapshot of a docs page, visible elements (request to answer)", "ms", "lower", dVisible, peer),
		figure("snapshot of a docs page, interactive elements only", "ms", "lower", dInter, peer),
	}, fmt.Sprintf("deskd: %d elements listed (of %d objects asked about), browser UI included, with screen positions; peer: CDP Accessibility.getFullAXTree, %d nodes of the page alone, no positions; target: deskd <= 300 ms", len(last.Elements), last.Visited, nodes), nil
}
