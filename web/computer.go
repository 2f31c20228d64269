package web

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubepod/deskd/computer"
	"github.com/cubepod/deskd/x11"
)

// Computer-use routes (under the panel like everything else):
//
//	GET  computer/info                 geometry, cursor position, lease
//	GET  computer/screenshot?format=png|jpeg&quality=&max_long_edge=&cursor=1&region=x0,y0,x1,y1&settle_ms=&encoding=json
//	GET  computer/a11y?interactive=1&region=&max_nodes=&format=json|text  accessible elements (a11y.go)
//	POST computer/actions              {actions: [Anthropic actions], screenshot: "after"|"none", settle_ms, ...}
//	POST computer/compat/openai        {actions: [OpenAI actions], ...}
//	POST computer/compat/aio           one AIO action, or {actions: [...]}
//	GET  computer/clipboard, PUT computer/clipboard {text}
//
// A view token may read info and take screenshots; everything else needs
// a full one. The first call starts the desktop.

// computerHolder keeps one Computer per X display, over an X connection
// of its own (its damage tells when the screen settles).
type computerHolder struct {
	mu      sync.Mutex
	display string
	screen  *x11.Screen
	comp    *computer.Computer
}

func (h *computerHolder) close() {
	if h.comp != nil {
		h.comp.Close()
		h.screen.Close()
		h.comp, h.screen, h.display = nil, nil, ""
	}
}

// computer starts the desktop if needed and returns the Computer for its
// display.
func (s *Server) computer(ctx context.Context) (*computer.Computer, error) {
	display, err := s.display(ctx)
	if err != nil {
		return nil, err
	}
	h := &s.comp
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.comp != nil && h.display == display {
		select {
		case <-h.comp.Done(): // its X connection died: start over
		default:
			return h.comp, nil
		}
	}
	h.close()
	scr, err := x11.OpenScreenWith(display, s.keyboard(display), s.log.With("part", "computer"))
	if err != nil {
		return nil, err
	}
	h.display, h.screen, h.comp = display, scr, computer.New(scr, computer.Config{Logger: s.log.With("part", "computer"), Cores: s.cfg.Cores, Elements: &s.elems})
	return h.comp, nil
}

// lease lets one agent at a time drive the pointer and keyboard. It is
// held for the whole of each run, however long, and for LeaseTTL after
// the last run ends.
type lease struct {
	mu      sync.Mutex
	holder  agent
	running int // runs of the holder in progress
	until   time.Time
}

// LeaseTTL is how long an agent keeps the desktop after its last action.
const LeaseTTL = 10 * time.Second

// agent is who drives: key is the panel session (the token's hash, or
// the client's address in loopback mode) and the X-Agent-Id, so an agent
// cannot take another's lease by sending its X-Agent-Id; name is what
// others are told.
type agent struct{ key, name string }

// take gives the lease to a for a run unless another agent holds it; it
// returns the other holder's name and the time left otherwise (0 while
// that holder's run goes on). Each successful take needs a done.
func (l *lease) take(a agent, now time.Time) (string, time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder.key != "" && l.holder.key != a.key && (l.running > 0 || now.Before(l.until)) {
		left := time.Duration(0)
		if l.running == 0 {
			left = l.until.Sub(now)
		}
		return l.holder.name, left, false
	}
	if l.holder.key != a.key {
		l.running = 0
	}
	l.holder = a
	l.running++
	return "", 0, true
}

// done ends a run of a: the lease then lasts ttl from now.
func (l *lease) done(a agent, now time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder.key != a.key {
		return
	}
	if l.running > 0 {
		l.running--
	}
	l.until = now.Add(ttl)
}

// state is the holder's name ("" when free) and the time left (0 while
// it runs).
func (l *lease) state(now time.Time) (string, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder.key == "" || (l.running == 0 && !now.Before(l.until)) {
		return "", 0
	}
	if l.running > 0 {
		return l.holder.name, 0
	}
	return l.holder.name, l.until.Sub(now)
}

// agentOf names the caller for the lease: its panel session and its
// X-Agent-Id (printable, at most 64 bytes), if any.
func agentOf(r *http.Request) agent {
	key := sessionKeyFrom(r)
	if id := r.Header.Get("X-Agent-Id"); id != "" && len(id) <= 64 && printable(id) {
		return agent{key: key + "/" + id, name: id}
	}
	return agent{key: key, name: key}
}

func printable(s string) bool {
	for _, c := range s {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// shotGate bounds the screenshots in progress, waiting ones included,
// per scope: a view link's watchers (4) cannot queue up work that holds
// up the agent's (8); past its budget a caller gets 503 with
// Retry-After at once. Encoding itself is two at a time (computer), so
// memory stays bounded however many ask.
type shotGate struct{ view, full chan struct{} }

func newShotGate() shotGate {
	return shotGate{view: make(chan struct{}, 4), full: make(chan struct{}, 8)}
}

// enter takes a place for a screenshot; ok is false when the scope's
// budget is spent.
func (g *shotGate) enter(view bool) (release func(), ok bool) {
	ch := g.full
	if view {
		ch = g.view
	}
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, true
	default:
		return nil, false
	}
}

// errShotsBusy is what a caller past the screenshot budget is told.
const errShotsBusy = "busy: too many screenshots in progress; retry in a second"

// maxViewWait bounds what a view token's wait (an MCP tool it may call)
// sleeps: a watcher has no business holding a request open for minutes.
const maxViewWait = 5 * time.Second

// humanInput records when a desktop viewer last typed or moved the pointer.
type humanInput struct{ last atomic.Int64 }

func (h *humanInput) note()                  { h.last.Store(time.Now().UnixNano()) }
func (h *humanInput) since(t time.Time) bool { return h.last.Load() >= t.UnixNano() }

// at is when a viewer last typed or pointed (zero: never).
func (h *humanInput) at() time.Time {
	if n := h.last.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func (s *Server) computerRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /computer/info", s.computerInfo)
	mux.HandleFunc("GET /computer/screenshot", s.computerScreenshot)
	mux.HandleFunc("GET /computer/a11y", s.computerA11y)
	mux.HandleFunc("POST /computer/actions", s.requireFull(requireJSON(s.computerActions("anthropic"))))
	mux.HandleFunc("POST /computer/compat/openai", s.requireFull(requireJSON(s.computerActions("openai"))))
	mux.HandleFunc("POST /computer/compat/aio", s.requireFull(requireJSON(s.computerActions("aio"))))
	mux.HandleFunc("GET /computer/clipboard", s.requireFull(s.computerClipboard))
	mux.HandleFunc("PUT /computer/clipboard", s.requireFull(requireJSON(s.computerClipboard)))
	mux.HandleFunc("GET /computer/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such computer endpoint: " + r.URL.Path})
	})
}

func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// computerOr answers 503 when the desktop cannot be had.
func (s *Server) computerOr(w http.ResponseWriter, r *http.Request) *computer.Computer {
	c, err := s.computer(r.Context())
	if err != nil {
		apiError(w, http.StatusServiceUnavailable, "desktop not available: "+err.Error())
		return nil
	}
	return c
}

// gatedComputer takes a place in the screenshot gate of the request's
// kind of token, then the desktop's Computer. When either cannot be had
// it has answered the request (503) and returns nil; otherwise release
// gives the place back.
func (s *Server) gatedComputer(w http.ResponseWriter, r *http.Request) (c *computer.Computer, release func()) {
	claims, _ := ClaimsFrom(r.Context())
	release, ok := s.shots.enter(claims.ReadOnly())
	if !ok {
		w.Header().Set("Retry-After", "1")
		apiError(w, http.StatusServiceUnavailable, errShotsBusy)
		return nil, nil
	}
	if c = s.computerOr(w, r); c == nil {
		release()
		return nil, nil
	}
	return c, release
}

type infoAnswer struct {
	computer.Geometry
	Cursor []int  `json:"cursor"`
	Lease  string `json:"lease_holder,omitempty"`
	LeaseS int    `json:"lease_expires_in_ms,omitempty"`
	// Follow is tab-follow's state and the tab it brought to the front
	// (the one a screenshot shows, unless a person switched since).
	Follow followAnswer `json:"tab_follow"`
	// A11y is the running browser's accessibility mode: "off" means
	// computer/a11y has nothing to list.
	A11y string `json:"a11y"`
}

func (s *Server) computerInfo(w http.ResponseWriter, r *http.Request) {
	c := s.computerOr(w, r)
	if c == nil {
		return
	}
	p, err := c.CursorPosition()
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	a := infoAnswer{Geometry: c.Geometry(), Cursor: []int{p.X, p.Y}}
	holder, left := s.lease.state(time.Now())
	a.Lease, a.LeaseS = holder, int(left/time.Millisecond)
	a.Follow = s.followState(r.Context())
	_, a.A11y = s.cfg.Stack.A11y()
	writeJSON(w, http.StatusOK, a)
}

// shotQuery parses the screenshot options of a query, with bounds.
func shotQuery(q map[string][]string) (computer.ShotOptions, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	o := computer.ShotOptions{Format: get("format"), Cursor: get("cursor") == "1" || get("cursor") == "true"}
	if o.Format == "jpg" {
		o.Format = "jpeg"
	}
	if o.Format != "" && o.Format != "png" && o.Format != "jpeg" {
		return o, fmt.Errorf("format=%.20q: want png or jpeg", o.Format)
	}
	num := func(k string, lo, hi int, dst *int) error {
		v := get(k)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("%s=%.20q: want %d-%d", k, v, lo, hi)
		}
		*dst = n
		return nil
	}
	if err := num("quality", 1, 100, &o.Quality); err != nil {
		return o, err
	}
	if err := num("max_long_edge", 16, x11.MaxDimension, &o.MaxLongEdge); err != nil {
		return o, err
	}
	if err := num("max_pixels", 256, x11.MaxDimension*x11.MaxDimension, &o.MaxPixels); err != nil {
		return o, err
	}
	if v := get("region"); v != "" {
		reg, err := computer.ParseRegion(v)
		if err != nil {
			return o, err
		}
		o.Region = reg
	}
	return o, nil
}

// shotJSON is a screenshot in a JSON answer.
type shotJSON struct {
	Format string  `json:"format"`
	Width  int     `json:"width"`
	Height int     `json:"height"`
	Scale  float64 `json:"scale"`
	Data   []byte  `json:"data"` // base64
}

func toShotJSON(s *computer.Shot) *shotJSON {
	if s == nil || s.Data == nil {
		return nil
	}
	return &shotJSON{Format: s.Format, Width: s.ImageWidth, Height: s.ImageHeight, Scale: s.Scale, Data: s.Data}
}

func (s *Server) computerScreenshot(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	o, err := shotQuery(q)
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad screenshot request: "+err.Error())
		return
	}
	settle := 0
	if v := q.Get("settle_ms"); v != "" {
		if settle, err = strconv.Atoi(v); err != nil || settle < 0 || settle > 10000 {
			apiError(w, http.StatusBadRequest, "bad screenshot request: settle_ms: want 0-10000")
			return
		}
	}
	c, release := s.gatedComputer(w, r)
	if c == nil {
		return
	}
	defer release()
	settled := true
	if settle > 0 {
		settled = c.Settle(r.Context(), time.Time{}, time.Duration(settle)*time.Millisecond, 0)
	}
	shot, err := c.Screenshot(o)
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, computer.ErrOutOfRange) || strings.Contains(err.Error(), "format") || strings.Contains(err.Error(), "quality") {
			code = http.StatusBadRequest
		}
		apiError(w, code, "screenshot: "+err.Error())
		return
	}
	if q.Get("encoding") == "json" {
		writeJSON(w, http.StatusOK, map[string]any{"image": toShotJSON(&shot), "screen_width": shot.ScreenWidth,
			"screen_height": shot.ScreenHeight, "settled": settled})
		return
	}
	h := w.Header()
	h.Set("Content-Type", shot.MIME())
	h.Set("Cache-Control", "no-store")
	h.Set("X-Screen-Width", strconv.Itoa(shot.ScreenWidth))
	h.Set("X-Screen-Height", strconv.Itoa(shot.ScreenHeight))
	h.Set("X-Image-Width", strconv.Itoa(shot.ImageWidth))
	h.Set("X-Image-Height", strconv.Itoa(shot.ImageHeight))
	h.Set("X-Scale", strconv.FormatFloat(shot.Scale, 'f', 6, 64))
	h.Set("X-Settled", strconv.FormatBool(settled))
	w.Write(shot.Data)
}

// maxActionsBody bounds an actions request (typed text is 64 KiB at most
// per action).
const maxActionsBody = 1 << 20

// actionsRequest is the body of the actions endpoints; Actions is in the
// vocabulary of the endpoint.
type actionsRequest struct {
	Actions     json.RawMessage `json:"actions"`
	Screenshot  string          `json:"screenshot,omitempty"` // "after" or "none" (default)
	SettleMs    int             `json:"settle_ms,omitempty"`
	SettleMaxMs int             `json:"settle_max_ms,omitempty"`
	Format      string          `json:"format,omitempty"`
	Quality     int             `json:"quality,omitempty"`
	Cursor      bool            `json:"cursor,omitempty"`
}

// ActionsAnswer is what the actions endpoints return.
type ActionsAnswer struct {
	OK         bool              `json:"ok"`
	Error      string            `json:"error,omitempty"`
	Results    []actionResult    `json:"results"`
	Screenshot *shotJSON         `json:"screenshot,omitempty"`
	Settled    *bool             `json:"settled,omitempty"`
	HumanInput bool              `json:"human_input"` // a desktop viewer typed or pointed meanwhile
	Geometry   computer.Geometry `json:"geometry"`
}

type actionResult struct {
	computer.Result
	Image *shotJSON `json:"image,omitempty"`
}

// decoded is an actions request whose JSON is read; planning it needs
// the screen's geometry, so the desktop.
type decoded struct {
	req       actionsRequest
	anthropic []computer.Action
	openai    []computer.OpenAIAction
	aio       []computer.AIOAction
}

func (d *decoded) plan(c *computer.Computer) (computer.Plan, error) {
	switch {
	case d.openai != nil:
		return c.PlanOpenAI(d.openai)
	case d.aio != nil:
		return c.PlanAIO(d.aio)
	}
	return c.PlanActions(d.anthropic)
}

// decodeActions reads body's actions in the endpoint's vocabulary and
// checks what can be checked without the desktop.
func decodeActions(vocab string, body []byte) (*decoded, error) {
	d := &decoded{}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, err
	}
	if _, list := probe["actions"]; vocab == "aio" && !list { // one AIO action
		as, err := computer.UnmarshalAIO(body)
		if err != nil {
			return nil, err
		}
		d.aio = as
		return d, nil
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d.req); err != nil {
		return nil, err
	}
	if len(d.req.Actions) == 0 {
		return nil, errors.New("actions is required")
	}
	var err error
	switch vocab {
	case "openai":
		err = json.Unmarshal(d.req.Actions, &d.openai)
		if d.openai == nil {
			d.openai = []computer.OpenAIAction{}
		}
	case "aio":
		err = json.Unmarshal(d.req.Actions, &d.aio)
		if d.aio == nil {
			d.aio = []computer.AIOAction{}
		}
	default:
		err = json.Unmarshal(d.req.Actions, &d.anthropic)
	}
	if err != nil {
		return nil, fmt.Errorf("actions: %w", err)
	}
	r := &d.req
	switch {
	case r.Screenshot != "" && r.Screenshot != "after" && r.Screenshot != "none":
		return nil, errors.New(`screenshot: want "after" or "none"`)
	case r.SettleMs < 0 || r.SettleMs > 10000 || r.SettleMaxMs < 0 || r.SettleMaxMs > 30000:
		return nil, errors.New("settle_ms 0-10000, settle_max_ms 0-30000")
	}
	if r.Format == "jpg" {
		r.Format = "jpeg"
	}
	if r.Format != "" && r.Format != "png" && r.Format != "jpeg" || r.Quality < 0 || r.Quality > 100 {
		return nil, errors.New("format png or jpeg, quality 1-100")
	}
	return d, nil
}

func (s *Server) computerActions(vocab string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionsBody))
		if err != nil {
			apiError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("actions request over %d bytes", maxActionsBody))
			return
		}
		d, err := decodeActions(vocab, body) // before anything starts
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad actions request: "+err.Error())
			return
		}
		c := s.computerOr(w, r)
		if c == nil {
			return
		}
		plan, err := d.plan(c)
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad actions request: "+err.Error())
			return
		}
		req := d.req
		so := computer.ShotOptions{Format: req.Format, Quality: req.Quality, Cursor: req.Cursor}
		ans, code := s.runPlan(r.Context(), c, agentOf(r), false, plan, so, req.Screenshot == "after",
			time.Duration(req.SettleMs)*time.Millisecond, time.Duration(req.SettleMaxMs)*time.Millisecond)
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeJSON(w, code, ans)
	}
}

// runPlan runs plan under the lease for holder, then takes the settled
// screenshot when asked. The code is 409 when another agent holds the
// lease, 503 past the screenshot budget of the caller's scope (view),
// else 200 (a failed action is reported in the answer).
func (s *Server) runPlan(ctx context.Context, c *computer.Computer, holder agent, view bool, plan computer.Plan, so computer.ShotOptions,
	shotAfter bool, settle, settleMax time.Duration) (ActionsAnswer, int) {
	ans := ActionsAnswer{Geometry: c.Geometry(), Results: []actionResult{}}
	if shotAfter || plan.Captures() {
		release, ok := s.shots.enter(view)
		if !ok {
			ans.Error = errShotsBusy
			return ans, http.StatusServiceUnavailable
		}
		defer release()
	}
	if !plan.ReadOnly() {
		if other, left, ok := s.lease.take(holder, time.Now()); !ok {
			if left > 0 {
				ans.Error = fmt.Sprintf("busy: agent %q drives the desktop for %v more", other, left.Round(time.Millisecond))
			} else {
				ans.Error = fmt.Sprintf("busy: agent %q drives the desktop (a run in progress, then %v)", other, LeaseTTL)
			}
			return ans, http.StatusConflict
		}
		// Held through the run, then LeaseTTL from its end.
		defer func() { s.lease.done(holder, time.Now(), LeaseTTL) }()
	}
	start := time.Now()
	res, err := c.Run(ctx, plan, so)
	s.logComputer(holder.name, plan, err)
	ans.OK = err == nil
	if err != nil {
		ans.Error = err.Error()
	}
	for _, r := range res {
		ans.Results = append(ans.Results, actionResult{Result: r, Image: toShotJSON(r.Shot)})
	}
	if shotAfter && err == nil {
		settled := c.Settle(ctx, time.Now(), settle, settleMax)
		ans.Settled = &settled
		if shot, err := c.Screenshot(so); err == nil {
			ans.Screenshot = toShotJSON(&shot)
		} else {
			ans.OK, ans.Error = false, "screenshot after: "+err.Error()
		}
	}
	ans.HumanInput = s.human.since(start)
	return ans, http.StatusOK
}

func (s *Server) computerClipboard(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPut {
		var body struct {
			Text *string `json:"text"`
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, x11.MaxClipboard+1024))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil || body.Text == nil {
			apiError(w, http.StatusBadRequest, fmt.Sprintf(`bad clipboard request: want {"text": "..."} of at most %d bytes`, x11.MaxClipboard))
			return
		}
		c := s.computerOr(w, r)
		if c == nil {
			return
		}
		if err := c.SetClipboard(r.Context(), *body.Text); err != nil {
			apiError(w, http.StatusInternalServerError, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"ok": true})
		return
	}
	c := s.computerOr(w, r)
	if c == nil {
		return
	}
	text, known := c.Clipboard()
	writeJSON(w, http.StatusOK, map[string]any{"text": text, "known": known})
}
