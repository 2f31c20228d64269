package web

import (
	"net/http"
	"time"

	"github.com/cubepod/deskd/desktop"
	"github.com/cubepod/deskd/term"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics is the server's own registry (no global state).
type metrics struct {
	reg         *prometheus.Registry
	activations *prometheus.CounterVec
}

func newMetrics(stack *desktop.Stack, ss *sessions, terminal *term.Manager) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		activations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cubepod_desktop_activations_total",
			Help: "Desktop start requests (API, CLI or first viewer/agent), by result.",
		}, []string{"result"}),
	}
	m.activations.WithLabelValues("ok")
	m.activations.WithLabelValues("error")
	m.reg.MustRegister(
		m.activations,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cubepod_panel_active_sessions",
			Help: "Panel sessions (distinct tokens, or clients without a panel secret) active in the idle window or holding a connection.",
		}, func() float64 { return float64(ss.active(time.Now())) }),
		&stackCollector{stack: stack},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cubepod_terminal_sessions",
			Help: "Terminal sessions alive (a session outlives its viewers until it is reaped).",
		}, func() float64 {
			if terminal == nil {
				return 0
			}
			return float64(terminal.Count())
		}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// stackCollector reports component state from the stack's status at
// scrape time, so the supervisor needs no metrics of its own.
type stackCollector struct{ stack *desktop.Stack }

var (
	upDesc = prometheus.NewDesc("cubepod_desktop_component_up",
		"Whether a desktop component is running (1) or not (0).", []string{"component"}, nil)
	restartsDesc = prometheus.NewDesc("cubepod_desktop_component_restarts_total",
		"Times a desktop component was restarted after it died.", []string{"component"}, nil)
)

func (c *stackCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- upDesc
	ch <- restartsDesc
}

func (c *stackCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stack.Status()
	for _, name := range []string{desktop.Xvfb, desktop.WM, desktop.Chromium} {
		up := 0.0
		if st.Pids[name] != 0 {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, up, name)
		ch <- prometheus.MustNewConstMetric(restartsDesc, prometheus.CounterValue, float64(st.Restarts[name]), name)
	}
}
