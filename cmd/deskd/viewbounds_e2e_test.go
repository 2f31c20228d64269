package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/panel"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What a view link may do costs the agent nothing and deskd little:
//   - 32 concurrent screenshots of a 2560x1600 screen (they once peaked at
//     547-930 MiB of heap) raise deskd's peak RSS by under 160 MiB; those
//     past the budget get 503 with Retry-After;
//   - an MCP wait from a view token does not hold up the agent's actions
//     (it once took the action lock for its whole length), and waits 5 s
//     at most;
//   - the lease lasts LeaseTTL after a run longer than LeaseTTL ends.
func TestViewerBounds(t *testing.T) {
	e := newInstall(t, "--resolution", "2560x1600x24", "--max-resolution", "2560x1600x24")
	deskd := serveDeskd(t, e)
	full, view := panelURL(t, deskd, panel.ScopeFull), panelURL(t, deskd, panel.ScopeView)
	code, body := post(t, full+"/api/desktop/start")
	if code != 200 {
		t.Fatalf("start: %d %s", code, body)
	}
	var st desktop.Status
	json.Unmarshal(body, &st)
	pid := st.Pids["deskd"]
	if pid == 0 {
		t.Fatalf("no deskd pid in %s", body)
	}
	shot := func(base string) (int, string) {
		resp, err := http.Get(base + "/computer/screenshot")
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	if code, _ := shot(view); code != 200 { // warm: the capture buffer, the X connection
		t.Fatalf("view screenshot: %d", code)
	}
	base := vmHWM(t, pid)
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil { // reset the peak
		t.Logf("cannot reset the peak RSS (%v): measuring from the start", err)
	} else {
		base = vmRSS(t, pid)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]int{}
	for range 32 {
		wg.Go(func() {
			code, retry := shot(view)
			mu.Lock()
			codes[fmt.Sprintf("%d retry-after=%q", code, retry)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	peak := vmHWM(t, pid)
	t.Logf("32 concurrent view screenshots at 2560x1600: %v; peak RSS %d MiB over %d MiB", codes, (peak-base)>>10, base>>10)
	if grown := (peak - base) >> 10; grown > 160 {
		t.Errorf("peak RSS grew by %d MiB, want under 160", grown)
	}
	for k := range codes {
		if k != `200 retry-after=""` && k != `503 retry-after="1"` {
			t.Errorf("answer %s: want 200, or 503 with Retry-After", k)
		}
	}
	if codes[`200 retry-after=""`] == 0 {
		t.Error("no view screenshot succeeded")
	}

	// A view token's MCP wait and the agent's actions.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cl := mcp.NewClient(&mcp.Implementation{Name: "deskd-e2e", Version: "1"}, nil)
	vs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: view + "/mcp", DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer vs.Close()
	if r, err := vs.CallTool(ctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"duration": 6}}); err != nil || !r.IsError {
		t.Errorf("a view token waited 6 s: %+v %v", r, err)
	}
	waited := make(chan time.Duration, 1)
	go func() {
		t0 := time.Now()
		vs.CallTool(ctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"duration": 4}})
		waited <- time.Since(t0)
	}()
	time.Sleep(300 * time.Millisecond) // the wait has begun
	t0 := time.Now()
	env := &computerEnv{t: t, base: full}
	env.act(`[{"action":"mouse_move","coordinate":[10,10]},{"action":"key","text":"shift"}]`)
	took := time.Since(t0)
	if took > 2*time.Second {
		t.Errorf("the agent's actions took %v during a view token's 4 s wait", took)
	}
	t.Logf("agent's actions during a view wait: %v; the wait: %v", took.Round(time.Millisecond), (<-waited).Round(time.Millisecond))

	// The lease outlives a run longer than LeaseTTL by LeaseTTL (it once
	// expired LeaseTTL after the run began, so at its end here).
	code, v := env.post("/computer/actions", `{"actions":[{"action":"mouse_move","coordinate":[20,20]},{"action":"wait","duration":10.5}]}`)
	if code != 200 || v["ok"] != true {
		t.Fatalf("the long run: %d %v", code, v)
	}
	code, v = env.post("/computer/actions", `{"actions":[{"action":"mouse_move","coordinate":[30,30]}]}`, "X-Agent-Id", "next-agent")
	if code != http.StatusConflict {
		t.Fatalf("another agent right after a 10.5 s run: %d %v; want 409 (the lease lasts 10 s after the run)", code, v)
	}
}

// vmHWM and vmRSS are a process's peak and current resident memory, KiB.
func vmHWM(t *testing.T, pid int) int { return procStatusKiB(t, pid, "VmHWM") }
func vmRSS(t *testing.T, pid int) int { return procStatusKiB(t, pid, "VmRSS") }

func procStatusKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
