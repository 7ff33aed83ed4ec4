package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratesync/ratesync/ratelimiting"
)

// writeSVG draws over-admission (%) against sync rate, one line per node
// count, with the bound λ·T/L of the largest node count dashed; with a
// bucket among the algorithms, or -precision, writeRateSVG's charts; with
// leased runs of window limits, writeLeaseSVG's.
func writeSVG(path string, rows []row, o *options) error {
	if o.rates() {
		return writeRateSVG(path, rows, o)
	}
	if slices.ContainsFunc(rows, func(r row) bool { return r.leased }) {
		return writeLeaseSVG(path, rows, o)
	}
	const (
		w, h                   = 720, 420
		left, right, top, bott = 70, 150, 40, 60
	)
	var syncs []time.Duration
	byNodes := map[int][]row{}
	var nodes []int
	maxY := 10.0
	for _, r := range rows {
		if !slices.Contains(syncs, r.sync) {
			syncs = append(syncs, r.sync)
		}
		if _, ok := byNodes[r.nodes]; !ok {
			nodes = append(nodes, r.nodes)
		}
		byNodes[r.nodes] = append(byNodes[r.nodes], r)
		maxY = math.Max(maxY, math.Max(r.overPct, r.boundPct))
	}
	slices.Sort(syncs)
	slices.Sort(nodes)
	maxY = math.Ceil(maxY/10) * 10
	x := func(s time.Duration) float64 {
		i := slices.Index(syncs, s)
		if len(syncs) == 1 {
			return left + float64(w-left-right)/2
		}
		return left + float64(i)*float64(w-left-right)/float64(len(syncs)-1)
	}
	y := func(v float64) float64 { return top + (1-math.Max(v, 0)/maxY)*float64(h-top-bott) }
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	title := fmt.Sprintf("Over-admission vs sync rate (%s store, limit %g per %v, %g hits/s offered)", o.store, o.limit, o.window, o.rate)
	if o.nearLimit {
		title += ", near-limit"
	}
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", left, title)
	for i := 0; i <= 5; i++ {
		v := maxY * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g%%</text>`+"\n", left, w-right, y(v), y(v), left-6, y(v)+4, v)
	}
	for _, s := range syncs {
		label := s.String()
		if s == 0 {
			label = "0 (sync)"
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(s), h-bott+18, label)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">sync rate</text>`+"\n", left+(w-left-right)/2, h-15)
	fmt.Fprintf(&b, `<text x="15" y="%d" transform="rotate(-90 15 %d)" text-anchor="middle">max admitted per window over the limit</text>`+"\n", top+(h-top-bott)/2, top+(h-top-bott)/2)
	for i, n := range nodes {
		c := colors[i%len(colors)]
		var pts, bound []string
		for _, r := range byNodes[n] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(r.sync), y(r.overPct)))
			bound = append(bound, fmt.Sprintf("%.1f,%.1f", x(r.sync), y(r.boundPct)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		for _, p := range pts {
			var px, py float64
			fmt.Sscanf(p, "%f,%f", &px, &py)
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px, py, c)
		}
		ly := top + 20*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%d node(s)</text>`+"\n", w-right+15, w-right+40, ly, ly, c, w-right+45, ly+4, n)
		if i == len(nodes)-1 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="#555" stroke-dasharray="5,4" points="%s"/>`+"\n", strings.Join(bound, " "))
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#555" stroke-dasharray="5,4"/><text x="%d" y="%d">bound λ·T/L</text>`+"\n", w-right+15, w-right+40, ly+20, ly+20, w-right+45, ly+24)
		}
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// panel is one chart of writeRateSVG and writeLeaseSVG: a value of each
// row against sync rate, one polyline per algorithm, node count and lease.
type panel struct {
	x, y, w, h float64 // the plot area
	title      string
	value      func(row) float64
	keep       func(row) bool // the rows drawn; all when nil
	refs       []float64      // dotted horizontal lines, labelled
	lo, step   float64        // the axis starts at lo; ticks every step (0: about five ticks)
	log        bool           // a log scale from lo (> 0), ticks every power of ten
}

// writeLeaseSVG draws, against sync rate, the over-admission, the least
// admitted in a window and the store calls per 100 decisions of window
// limits, leased runs beside periodic and synchronous ones: one colour per
// node count, leased lines wide and pale with square marks.
func writeLeaseSVG(path string, rows []row, o *options) error {
	title := fmt.Sprintf("Leased, periodic and synchronous vs sync rate (%s store, limit %g per %v, %g hits/s offered, %s spread, %v per run)",
		o.store, o.limit, o.window, o.rate, o.spread, o.duration)
	panels := []panel{
		{title: "over-admission (% of the limit)", value: func(r row) float64 { return r.overPct }, refs: []float64{0}},
		{title: "least admitted in a window (% of the limit)", value: func(r row) float64 { return r.minPct }, refs: []float64{100}},
		{title: "store calls per 100 decisions (log)", value: func(r row) float64 { return r.calls }, refs: []float64{1}, lo: 0.01, log: true},
	}
	return writePanels(path, 1140, title, panels, rows)
}

// writePanels writes an SVG of w by 440 with title and panels side by
// side over rows, against sync rate, and the legend of the node counts.
func writePanels(path string, w int, title string, panels []panel, rows []row) error {
	const h = 440
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="60" y="20" font-size="14">%s</text>`+"\n", title)
	syncs := sortedSyncs(rows)
	for i, p := range panels {
		p.x, p.y, p.w, p.h = float64(60+380*i), 60, 280, 300
		p.draw(&b, rows, syncs)
	}
	rateLegend(&b, rows, 60, h-30)
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeRateSVG draws, against sync rate, the long-run rate of every
// algorithm, that of the buckets alone on a finer scale (when there are
// buckets), and the largest burst: one colour per node count, solid lines
// for buckets, dashed for window limits, dotted for sliding windows with a
// precision.
func writeRateSVG(path string, rows []row, o *options) error {
	w := 1140
	if !o.buckets() {
		w = 880
	}
	burst := ""
	if o.buckets() {
		burst = fmt.Sprintf(", burst %g", capacity(o.limitOf(spec{alg: ratelimiting.TokenBucket})))
	}
	title := fmt.Sprintf("Long-run rate and largest burst vs sync rate (%s store, limit %g per %v%s, %g hits/s offered, %v per run)",
		o.store, o.limit, o.window, burst, o.rate, o.duration)
	panels := []panel{
		{title: "long-run rate (× r)", value: func(r row) float64 { return r.longRun }, refs: []float64{1}, step: 0.5},
		{title: "long-run rate of the buckets (× r)", value: func(r row) float64 { return r.longRun },
			keep: func(r row) bool { return isBucket(r.alg) }, refs: []float64{1, 1.05}, lo: 0.95, step: 0.05},
		{title: "largest burst (× allowed in a window)", value: func(r row) float64 { return float64(r.maxAdm) / r.allowed }, refs: []float64{1}, step: 1},
	}
	if !o.buckets() {
		panels = slices.Delete(panels, 1, 2)
	}
	return writePanels(path, w, title, panels, rows)
}

// sortedSyncs returns the sync rates of rows, in order.
func sortedSyncs(rows []row) []time.Duration {
	var syncs []time.Duration
	for _, r := range rows {
		if !slices.Contains(syncs, r.sync) {
			syncs = append(syncs, r.sync)
		}
	}
	slices.Sort(syncs)
	return syncs
}

// nodeColor returns the colour of a node count: the i-th distinct count of
// rows, in order.
func nodeColor(rows []row, nodes int) string {
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"}
	var all []int
	for _, r := range rows {
		if !slices.Contains(all, r.nodes) {
			all = append(all, r.nodes)
		}
	}
	slices.Sort(all)
	return colors[slices.Index(all, nodes)%len(colors)]
}

// draw writes p's axes, reference lines and polylines.
func (p panel) draw(b *strings.Builder, rows []row, syncs []time.Duration) {
	var kept []row
	hi := math.Inf(-1)
	for _, r := range rows {
		if v := p.value(r); (p.keep == nil || p.keep(r)) && !math.IsNaN(v) {
			kept = append(kept, r)
			hi = math.Max(hi, v)
		}
	}
	x := func(s time.Duration) float64 {
		if len(syncs) == 1 {
			return p.x + p.w/2
		}
		return p.x + float64(slices.Index(syncs, s))*p.w/float64(len(syncs)-1)
	}
	y, ticks := p.scale(hi)
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-size="13">%s</text>`+"\n", p.x, p.y-12, p.title)
	for _, v := range ticks {
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.0f" y="%.1f" text-anchor="end">%g</text>`+"\n", p.x, p.x+p.w, y(v), y(v), p.x-6, y(v)+4, math.Round(v*100)/100)
	}
	for _, v := range p.refs {
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="1,3"/><text x="%.0f" y="%.1f" font-size="10">%g</text>`+"\n", p.x, p.x+p.w, y(v), y(v), p.x+p.w+3, y(v)+3, v)
	}
	for _, s := range syncs {
		label := s.String()
		if s == 0 {
			label = "0 (sync)"
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.0f" text-anchor="middle" font-size="10">%s</text>`+"\n", x(s), p.y+p.h+16, label)
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="middle">sync rate</text>`+"\n", p.x+p.w/2, p.y+p.h+34)
	type line struct {
		alg       ratelimiting.Algorithm
		precision time.Duration
		nodes     int
		leased    bool
	}
	type point struct{ x, y float64 }
	pts := map[line][]point{}
	var order []line
	for _, r := range kept {
		l := line{r.alg, r.precision, r.nodes, r.leased}
		if _, ok := pts[l]; !ok {
			order = append(order, l)
		}
		pts[l] = append(pts[l], point{x(r.sync), y(p.value(r))})
	}
	for _, l := range order {
		c := nodeColor(rows, l.nodes)
		var ps []string
		for _, pt := range pts[l] {
			ps = append(ps, fmt.Sprintf("%.1f,%.1f", pt.x, pt.y))
		}
		width := "2"
		if l.leased {
			width = `5" stroke-opacity="0.45`
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%s"%s points="%s"/>`+"\n", c, width, dash(l.alg, l.precision), strings.Join(ps, " "))
		for _, pt := range pts[l] {
			if l.leased {
				fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="7" height="7" fill="%s"/>`+"\n", pt.x-3.5, pt.y-3.5, c)
			} else {
				fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", pt.x, pt.y, c)
			}
		}
	}
}

// scale returns p's vertical scale for values up to hi, and its ticks:
// from lo, every step (about five ticks when step is 0), or with log every
// power of ten from lo (> 0) up.
func (p panel) scale(hi float64) (y func(float64) float64, ticks []float64) {
	if p.log {
		top := math.Pow(10, math.Ceil(math.Log10(math.Max(hi, p.lo*10))-1e-9))
		span := math.Log10(top) - math.Log10(p.lo)
		for v := p.lo; v <= top*1.001; v *= 10 {
			ticks = append(ticks, v)
		}
		return func(v float64) float64 { return p.y + (1-(math.Log10(math.Max(v, p.lo))-math.Log10(p.lo))/span)*p.h }, ticks
	}
	step := p.step
	if step == 0 {
		step = niceStep((hi - p.lo) / 5)
	}
	hi = math.Max(hi, p.lo+step)
	hi = p.lo + math.Ceil((hi-p.lo)/step-1e-9)*step
	for v := p.lo; v <= hi+step/2; v += step {
		ticks = append(ticks, v)
	}
	return func(v float64) float64 { return p.y + (1-(math.Max(v, p.lo)-p.lo)/(hi-p.lo))*p.h }, ticks
}

// niceStep returns the tick step of 1, 2 or 5 times a power of ten nearest
// above about (1 when about is not > 0).
func niceStep(about float64) float64 {
	if !(about > 0) || math.IsInf(about, 0) {
		return 1
	}
	e := math.Pow(10, math.Floor(math.Log10(about)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*e >= about {
			return m * e
		}
	}
	return 10 * e
}

// dash returns the stroke pattern of an algorithm's lines: solid for
// buckets, dashed for window limits, dotted with a precision.
func dash(a ratelimiting.Algorithm, precision time.Duration) string {
	switch {
	case isBucket(a):
		return ""
	case precision > 0:
		return ` stroke-dasharray="2,3"`
	}
	return ` stroke-dasharray="6,4"`
}

// rateLegend writes the legend of writeRateSVG at (x, y): the colour of
// each node count, and the line of each algorithm (and precision).
func rateLegend(b *strings.Builder, rows []row, x, y float64) {
	type alg struct {
		a ratelimiting.Algorithm
		p time.Duration
	}
	var nodes []int
	var algs []alg
	for _, r := range rows {
		if !slices.Contains(nodes, r.nodes) {
			nodes = append(nodes, r.nodes)
		}
		if a := (alg{r.alg, r.precision}); !slices.Contains(algs, a) {
			algs = append(algs, a)
		}
	}
	slices.Sort(nodes)
	for _, n := range nodes {
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="%s" stroke-width="3"/><text x="%.0f" y="%.0f">%d node(s)</text>`+"\n", x, x+20, y, y, nodeColor(rows, n), x+25, y+4, n)
		x += 95
	}
	for _, a := range algs {
		label := a.a.String()
		if a.p > 0 {
			label += ", precision " + a.p.String()
		}
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="#555" stroke-width="2"%s/><text x="%.0f" y="%.0f">%s</text>`+"\n", x+20, x+50, y, y, dash(a.a, a.p), x+55, y+4, label)
		x += max(170, 60+7*float64(len(label)))
	}
	if slices.ContainsFunc(rows, func(r row) bool { return r.leased }) {
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.0f" y2="%.0f" stroke="#555" stroke-width="5" stroke-opacity="0.45"/><rect x="%.0f" y="%.0f" width="7" height="7" fill="#555"/><text x="%.0f" y="%.0f">leased</text>`+"\n", x+20, x+50, y, y, x+31.5, y-3.5, x+55, y+4)
	}
}
