package bench

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// The crowd: crowdTerms shells, each printing a line stamped with its
// clock every crowdEvery, each watched by crowdViewers viewers; a line's
// latency is its arrival at a viewer less its stamp.
const (
	crowdTerms   = 16
	crowdViewers = 2
	crowdEvery   = 5 * time.Millisecond
)

// crowdTime is how long a crowd warms up, then is measured.
type crowdTime struct{ warm, measure time.Duration }

var crowdRun = crowdTime{2 * time.Second, 10 * time.Second}

// crowdLoop prints "T<seconds.micros> " and 100 characters, then waits
// crowdEvery for input that never comes (read -t: a builtin, no fork).
var crowdLoop = fmt.Sprintf("stty -echo; F=%s; while :; do echo \"T$EPOCHREALTIME $F\"; read -t %.3f; done\r",
	strings.Repeat("x", 100), crowdEvery.Seconds())

type crowdResult struct {
	p50, p99 float64 // ms
	cpu      float64 // server CPU, % of a core
	lines    int     // lines timed
}

func (r crowdResult) String() string {
	return fmt.Sprintf("%d lines, p50 %.2f ms, p99 %.2f ms, server CPU %.1f%%", r.lines, r.p50, r.p99, r.cpu)
}

// crowd opens terms shells with viewers viewers each (more than one
// needs deskd's ?session=), starts crowdLoop in each, and times the lines
// every viewer receives after a warm-up.
func (e endpoint) crowd(ctx context.Context, terms, viewers int, ct crowdTime) (crowdResult, error) {
	ctx, cancel := context.WithTimeout(ctx, ct.warm+ct.measure+time.Minute)
	defer cancel()
	var conns []*ttyClient
	defer func() {
		for _, tc := range conns {
			tc.c.CloseNow()
		}
	}()
	var writers []*ttyClient
	for range terms {
		var first *ttyClient
		id := ""
		for v := range viewers {
			var tc *ttyClient
			var err error
			if viewers == 1 {
				tc, err = e.dial(ctx)
			} else {
				tc, id, err = dialSession(ctx, e.url, id)
			}
			if err != nil {
				return crowdResult{}, fmt.Errorf("viewer %d: %w", len(conns), err)
			}
			conns = append(conns, tc)
			if v == 0 {
				first = tc
			}
		}
		writers = append(writers, first)
	}
	for _, w := range writers {
		if err := w.input(ctx, crowdLoop); err != nil {
			return crowdResult{}, err
		}
	}
	var (
		mu      sync.Mutex
		lat     []float64
		measure bool
		ending  bool // the shells are told to exit: their viewers close
	)
	g, gctx := errgroup.WithContext(ctx)
	rctx, stop := context.WithCancel(gctx)
	for _, tc := range conns {
		g.Go(func() error { // ends with rctx
			var tail []byte
			var mine []float64
			for {
				_, b, err := tc.c.Read(rctx)
				if err != nil {
					mu.Lock()
					lat = append(lat, mine...)
					end := ending
					mu.Unlock()
					if end || rctx.Err() != nil {
						return nil
					}
					return err
				}
				now := time.Now()
				if len(b) == 0 || b[0] != '0' {
					continue
				}
				tail = append(tail, b[1:]...)
				for {
					i := bytes.IndexByte(tail, '\n')
					if i < 0 {
						break
					}
					if ts, ok := lineStamp(tail[:i]); ok {
						mu.Lock()
						on := measure
						mu.Unlock()
						if on {
							mine = append(mine, float64(now.Sub(ts).Microseconds())/1000)
						}
					}
					tail = tail[i+1:]
				}
				if len(tail) > 4096 { // no newline in sight: not ours
					tail = tail[:0]
				}
			}
		})
	}
	sleep(ctx, ct.warm)
	mu.Lock()
	measure = true
	mu.Unlock()
	cpu0, t0 := cpuOf(e.pid), time.Now()
	sleep(ctx, ct.measure)
	cpu := float64(cpuOf(e.pid)-cpu0) / float64(time.Since(t0)) * 100
	mu.Lock()
	measure, ending = false, true
	mu.Unlock()
	// Stop the shells (deskd's outlive their viewers), then the readers.
	for _, w := range writers {
		w.input(ctx, "\x03") // an interrupt flushes what is typed after it
	}
	sleep(ctx, 300*time.Millisecond)
	for _, w := range writers {
		w.input(ctx, "exit\r")
	}
	sleep(ctx, 500*time.Millisecond)
	stop()
	if err := g.Wait(); err != nil {
		return crowdResult{}, err
	}
	if len(lat) == 0 {
		return crowdResult{}, fmt.Errorf("no line arrived")
	}
	slices.Sort(lat)
	p50, p99 := percentiles(lat)
	return crowdResult{p50: round(p50, 3), p99: round(p99, 3), cpu: round(cpu, 1), lines: len(lat)}, nil
}

// lineStamp parses the stamp crowdLoop puts at a line's start
// ("T1733570000.123456 "; a locale may write a comma).
func lineStamp(line []byte) (time.Time, bool) {
	line = bytes.TrimRight(line, "\r")
	if len(line) < 2 || line[0] != 'T' {
		return time.Time{}, false
	}
	f, _, _ := bytes.Cut(line[1:], []byte(" "))
	sec, frac, ok := bytes.Cut(bytes.ReplaceAll(f, []byte(","), []byte(".")), []byte("."))
	if !ok || len(frac) != 6 || !digits(sec) || !digits(frac) {
		return time.Time{}, false
	}
	s, err1 := strconv.ParseInt(string(sec), 10, 64)
	us, err2 := strconv.ParseInt(string(frac), 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, false
	}
	return time.Unix(s, us*1000), true
}

func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
