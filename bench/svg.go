package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// SVG draws each figure's deskd/peer ratio as a bar on a log scale around
// 1 (left of the line: deskd is smaller), labelled with both values.
func (r Report) SVG() string {
	type row struct {
		label string
		f     Figure
	}
	var rows []row
	for _, name := range scenarioOrder(r) {
		for _, f := range r.Scenarios[name].Figures {
			rows = append(rows, row{name + ": " + f.Metric, f})
		}
	}
	const w, left, barH, gap, top = 760, 250, 22, 14, 48
	h := top + len(rows)*(barH+gap) + 40
	mid := left + (w-left-20)/2
	span := float64(w-left-20) / 2 / 2 // pixels per factor of 10 (two decades each way)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="14" font-weight="bold">deskd / peer (log scale; %s, %d cores)</text>`+"\n", html.EscapeString(r.Machine.CPU), r.Machine.Cores)
	fmt.Fprintf(&b, `<text x="%d" y="38" text-anchor="middle" fill="#555">1× (same as peer)</text>`+"\n", mid)
	for i, rw := range rows {
		y := top + i*(barH+gap)
		ratio := rw.f.Ratio
		if ratio <= 0 {
			ratio = 1
		}
		x := float64(mid) + math.Log10(ratio)*span
		x = math.Max(float64(left), math.Min(float64(w-20), x))
		good := (ratio < 1) == (rw.f.Better == "lower")
		color := "#d93025"
		switch {
		case rw.f.Better == "info": // neither way is better (shown for reference)
			color = "#9aa0a6"
		case good || ratio == 1:
			color = "#1e8e3e"
		}
		x0, x1 := math.Min(x, float64(mid)), math.Max(x, float64(mid))
		fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`+"\n", y+15, html.EscapeString(rw.label))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", x0, y, math.Max(x1-x0, 1), barH, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#333">%.3g× (deskd %.4g %s, peer %.4g %s)</text>`+"\n",
			left, y+barH+11, rw.f.Ratio, rw.f.Deskd, rw.f.Unit, rw.f.Peer, rw.f.Unit)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#000"/>`+"\n", mid, top-4, mid, h-30)
	b.WriteString("</svg>\n")
	return b.String()
}
