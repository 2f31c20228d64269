package web

import (
	"context"
	"errors"
	"fmt"
	"image"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/cubepod/deskd/a11y"
	"github.com/cubepod/deskd/computer"
)

// GET computer/a11y: the accessible elements on the screen (AT-SPI), for
// view tokens too.
//
//	?interactive=1    only elements one acts on
//	&all=1            hidden elements too
//	&full=1           unnamed containers too
//	&region=x0,y0,x1,y1  only those overlapping it (screenshot pixels)
//	&max_nodes=N (1-20000, default 1000) &max_depth=N (1-256)
//	&timeout_ms=N (100-30000, default 5000) &format=json|text

// elements is the desktop's accessibility bus as computer.Elements: it
// dials the bus of the running stack, and again when that changed.
type elements struct {
	s *Server

	mu     sync.Mutex
	addr   string
	client *a11y.Client
}

// errNoA11y explains why there is no tree.
var errNoA11y = fmt.Errorf("%w: the browser runs with accessibility off; start the desktop with \"a11y\": \"complete\" (or --a11y=complete)", computer.ErrNoElements)

func (e *elements) get(ctx context.Context) (*a11y.Client, error) {
	addr, _ := e.s.cfg.Stack.A11y()
	if addr == "" {
		return nil, errNoA11y
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client != nil && (e.addr != addr || !e.client.Alive()) {
		e.client.Close()
		e.client = nil
	}
	if e.client == nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := a11y.Dial(dctx, addr)
		if err != nil {
			return nil, err
		}
		e.client, e.addr = c, addr
	}
	return e.client, nil
}

func (e *elements) Snapshot(ctx context.Context, o a11y.Options) (*a11y.Snapshot, error) {
	c, err := e.get(ctx)
	if err != nil {
		return nil, err
	}
	return c.Snapshot(ctx, o)
}

func (e *elements) Locate(ctx context.Context, id string) (image.Rectangle, error) {
	c, err := e.get(ctx)
	if err != nil {
		return image.Rectangle{}, err
	}
	return c.Locate(ctx, id)
}

func (e *elements) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.client != nil {
		e.client.Close()
		e.client = nil
	}
}

// a11yQuery parses a snapshot's options, with bounds; text reports
// format=text.
func a11yQuery(q url.Values) (o computer.ElementOptions, text bool, err error) {
	yes := func(k string) (bool, error) {
		switch q.Get(k) {
		case "", "0", "false":
			return false, nil
		case "1", "true":
			return true, nil
		}
		return false, fmt.Errorf("%s=%.20q: want 1 or 0", k, q.Get(k))
	}
	if o.Interactive, err = yes("interactive"); err != nil {
		return o, false, err
	}
	if o.All, err = yes("all"); err != nil {
		return o, false, err
	}
	if o.Full, err = yes("full"); err != nil {
		return o, false, err
	}
	num := func(k string, lo, hi int, dst *int) error {
		v := q.Get(k)
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
	if err := num("max_nodes", 1, a11y.MaxNodes, &o.MaxNodes); err != nil {
		return o, false, err
	}
	if err := num("max_depth", 1, a11y.MaxDepth, &o.MaxDepth); err != nil {
		return o, false, err
	}
	ms := 0
	if err := num("timeout_ms", 100, int(a11y.MaxTimeout/time.Millisecond), &ms); err != nil {
		return o, false, err
	}
	o.Timeout = time.Duration(ms) * time.Millisecond
	if v := q.Get("region"); v != "" {
		if o.Region, err = computer.ParseRegion(v); err != nil {
			return o, false, err
		}
	}
	switch f := q.Get("format"); f {
	case "", "json":
	case "text":
		text = true
	default:
		return o, false, fmt.Errorf("format=%.20q: want json or text", f)
	}
	return o, text, nil
}

func (s *Server) computerA11y(w http.ResponseWriter, r *http.Request) {
	o, text, err := a11yQuery(r.URL.Query())
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad a11y request: "+err.Error())
		return
	}
	// Snapshots share the screenshots' gate.
	c, release := s.gatedComputer(w, r)
	if c == nil {
		return
	}
	defer release()
	l, err := c.Elements(r.Context(), o)
	switch {
	case errors.Is(err, computer.ErrOutOfRange):
		apiError(w, http.StatusBadRequest, "bad a11y request: "+err.Error())
		return
	case errors.Is(err, computer.ErrNoElements):
		apiError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		apiError(w, http.StatusServiceUnavailable, "a11y: "+err.Error())
		return
	}
	if text {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Write([]byte(l.Text()))
		return
	}
	writeJSON(w, http.StatusOK, l)
}
