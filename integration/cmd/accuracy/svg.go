package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// writeSVG draws over-admission (%) against sync rate, one line per node
// count, with the bound λ·T/L of the largest node count dashed.
func writeSVG(path string, rows []row, o *options) error {
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
