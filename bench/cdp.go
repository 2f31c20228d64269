package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// cdpScenario: CDP round trips and large replies through deskd's relay
// against the same Chromium's DevTools port directly.
func cdpScenario(ctx context.Context, c Config) ([]Figure, string, error) {
	dk, err := startDeskd(ctx, c)
	if err != nil {
		return nil, "", err
	}
	defer dk.stop()
	relay := "http://" + dk.addr + "/cdp"
	// The first request starts the desktop; then both paths reach one Chromium.
	var ver struct {
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	if err := getJSON(ctx, relay+"/json/version", &ver); err != nil {
		return nil, "", fmt.Errorf("relay discovery: %w", err)
	}
	var st struct{ Ports map[string]int }
	if err := getJSON(ctx, "http://"+dk.addr+"/api/desktop/status", &st); err != nil {
		return nil, "", err
	}
	direct := "http://127.0.0.1:" + strconv.Itoa(st.Ports["cdp"])

	var d50, d99, p50, p99, dMB, pMB []float64
	rounds := max(1, min(c.Rounds, 5))
	for i := range rounds {
		for _, side := range []struct {
			base     string
			p50, p99 *[]float64
			mb       *[]float64
		}{{relay, &d50, &d99, &dMB}, {direct, &p50, &p99, &pMB}} {
			a, b, mbps, err := cdpRun(ctx, side.base)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", side.base, err)
			}
			*side.p50, *side.p99, *side.mb = append(*side.p50, a), append(*side.p99, b), append(*side.mb, mbps)
		}
		fmt.Fprintf(c.Log, "  round %d: relay p50 %.3f p99 %.3f ms %.0f MB/s; direct p50 %.3f p99 %.3f ms %.0f MB/s\n",
			i, d50[i], d99[i], dMB[i], p50[i], p99[i], pMB[i])
	}
	return []Figure{
		figure("round trip p50 (Runtime.evaluate)", "ms", "lower", d50, p50),
		figure("round trip p99 (Runtime.evaluate)", "ms", "lower", d99, p99),
		figure("large replies (8 MiB each)", "MB/s", "higher", dMB, pMB),
	}, "peer: the same Chromium's DevTools port, directly", nil
}

func getJSON(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// cdpRun opens a page target at base (PUT /json/new), then times 500
// small Runtime.evaluate round trips and 20 replies of 8 MiB.
func cdpRun(ctx context.Context, base string) (p50, p99, mbps float64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, base+"/json/new?about:blank", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, 0, err
	}
	var target struct {
		ID                   string `json:"id"`
		WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
	}
	err = json.NewDecoder(resp.Body).Decode(&target)
	resp.Body.Close()
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() {
		if r, err := http.Get(base + "/json/close/" + url.PathEscape(target.ID)); err == nil {
			r.Body.Close()
		}
	}()
	c, _, err := websocket.Dial(ctx, target.WebSocketDebuggerURL, nil)
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	id := 0
	call := func(expr string) (int, error) {
		id++
		return evaluate(ctx, c, id, expr)
	}
	for range 20 { // warm up
		if _, err := call("1"); err != nil {
			return 0, 0, 0, err
		}
	}
	var ms []float64
	for i := range 500 {
		t0 := time.Now()
		if _, err := call(strconv.Itoa(i) + "+1"); err != nil {
			return 0, 0, 0, err
		}
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
	}
	slices.Sort(ms)
	const big = 8 << 20
	t0 := time.Now()
	total := 0
	for range 20 {
		n, err := call(`"x".repeat(` + strconv.Itoa(big) + `)`)
		if err != nil {
			return 0, 0, 0, err
		}
		total += n
	}
	p50, p99 = percentiles(ms)
	return p50, p99, float64(total) / time.Since(t0).Seconds() / 1e6, nil
}

// evaluate sends Runtime.evaluate as command id on c and returns the size
// of its reply, skipping events and other replies.
func evaluate(ctx context.Context, c *websocket.Conn, id int, expr string) (int, error) {
	b, err := cdpCall(ctx, c, id, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	return len(b), err
}

// cdpCall sends method as command id on c and returns its reply,
// skipping events and other replies.
func cdpCall(ctx context.Context, c *websocket.Conn, id int, method string, params any) ([]byte, error) {
	msg, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
		return nil, err
	}
	want := []byte(`{"id":` + strconv.Itoa(id) + `,`)
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			return nil, err
		}
		if bytes.HasPrefix(b, want) {
			return b, nil
		}
	}
}
