package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// printTable writes the results table.
func printTable(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "\nscenario %s%s: %s, %d gateway(s) per contender, theoretical max %.0f successes in %v (best of %d)\n",
		rep.Scenario.Name, map[bool]string{true: " (short)"}[rep.Short], loadWords(rep.Scenario.Load), rep.Scenario.fleet(),
		rep.TheoreticalMax, rep.Scenario.Load.Duration.D(), rep.Rounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "contender\tsuccesses\tof max\tof oracle\terrors\tp50 ms\tp99 ms\tp999 ms\tvs best peer\tidle permits\tbusy conns\t")
	for _, r := range rep.Records {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\tskipped\t-\t-\t\n", r.Contender)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f%%\t%s\t%d\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t\n",
			r.Contender, r.Successes, 100*r.Share, pct(r.ShareOfOracle), r.Errors, r.P50ms, r.P99ms, r.P999ms, ratio(r.RatioToBestPeer),
			pct2(r.IdlePermits), pct2(r.BusyConns))
	}
	tw.Flush()
	if q := queueingLine(rep); q != "" {
		fmt.Fprintln(w, q)
	}
	for _, l := range fleetLines(rep) {
		fmt.Fprintln(w, l)
	}
}

// fleetLines say, for each row whose gateways learned limits in fleet
// mode, how evenly they split the targets and how soon they settled.
func fleetLines(rep *Report) []string {
	var out []string
	for _, r := range rep.Records {
		f := r.FleetSplit
		if f == nil {
			continue
		}
		out = append(out, fmt.Sprintf("fleet of %d, %s: one gateway's mean limit on a target at most %.2fx another's; "+
			"after %d changes the summed limits came within ±%.0f%% of the permits in %.1f s (median; max %.1f s), %d never did",
			r.Gateways, r.Contender, f.MaxOverMin, f.Settled+f.Unsettled, 100*settleBand, f.SettleMedianS, f.SettleMaxS, f.Unsettled))
	}
	return out
}

// queueingLine says what the scenario forces on a queue
// (Scenario.ForcedWait), or "" where the permits always exceed the
// connections.
func queueingLine(rep *Report) string {
	q := rep.Queueing
	if q.MeanWait <= 0 {
		return ""
	}
	what := "the connections beyond the permits"
	if rep.Scenario.Load.open() {
		what = "the arrivals beyond the permits' rate (simulated: first come, first served, waiters leaving at the timeout)"
	}
	return fmt.Sprintf("Little's law: a balancer that refuses nothing holds %s in its queue, "+
		"%.1f ms a success here; spread evenly, that puts the p99 at %.1f ms against %.1f ms with no wait (+%.1f ms)",
		what, ms(q.MeanWait.D()), ms(q.P99Spread.D()), ms(q.P99.D()), ms(q.P99Spread.D()-q.P99.D()))
}

// pct writes a share as a percentage, or "-" when unknown (0).
func pct(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

// pct2 writes a diagnostic share with two decimals, or "-" when the
// scenario has no such phase (0).
func pct2(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*v)
}

// ratio writes a ratio, or "-" when unknown (0).
func ratio(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f", v)
}

// markdownTable is the table as docs/benchmarks.md shows it.
func markdownTable(rep *Report) string {
	var b strings.Builder
	b.WriteString("| contender | successes | of max | of oracle | errors | p50 ms | p99 ms | p999 ms | vs best peer | idle permits | busy conns |\n|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rep.Records {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "| %s | skipped | | | | | | | | | |\n", r.Contender)
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f%% | %s | %d | %.1f | %.1f | %.1f | %s | %s | %s |\n",
			r.Contender, r.Successes, 100*r.Share, pct(r.ShareOfOracle), r.Errors, r.P50ms, r.P99ms, r.P999ms, ratio(r.RatioToBestPeer),
			pct2(r.IdlePermits), pct2(r.BusyConns))
	}
	if q := queueingLine(rep); q != "" {
		b.WriteString("\n" + q + ".\n")
	}
	for _, l := range fleetLines(rep) {
		b.WriteString("\n" + l + ".\n")
	}
	return b.String()
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// palette: distinguishable colours; Fulcrum's rows come first and get the
// strong ones.
var palette = []string{
	"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
	"#ff7f0e", "#bcbd22", "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
}

// writeSVG draws successes per second over the run for every contender,
// with the theoretical maximum dashed and the warm-up shaded.
func writeSVG(path string, rep *Report) error {
	const W, H, left, right, top, bottom = 1000, 480, 60, 290, 30, 40
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	n := len(rep.MaxPerSecond)
	ymax := 0.0
	for _, v := range rep.MaxPerSecond {
		ymax = max(ymax, v)
	}
	for _, r := range rep.Records {
		for _, v := range r.PerSecond {
			ymax = max(ymax, v)
		}
	}
	if ymax == 0 || n == 0 {
		ymax, n = 1, 1
	}
	step := math.Pow(10, math.Floor(math.Log10(ymax)))
	if ymax/step < 3 {
		step /= 2
	}
	ymax = math.Ceil(ymax*1.05/step) * step
	x := func(s float64) float64 { return left + pw*s/float64(n) }
	y := func(v float64) float64 { return top + ph*(1-v/ymax) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">%s: successes per second (dashed: theoretical maximum; grey: warm-up)</text>`+"\n", left, esc(rep.Scenario.Name))
	warm := rep.Scenario.Load.Warmup.D().Seconds()
	fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%.1f" fill="#eeeeee"/>`+"\n", x(0), top, x(warm)-x(0), ph)
	for v := 0.0; v <= ymax+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#dddddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			left, left+pw, y(v), y(v), left-6, y(v)+4, v)
	}
	tick := max(1, n/15)
	for s := 0; s <= n; s += tick {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", x(float64(s)), H-bottom+16, s)
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%.0f" fill="none" stroke="#444444"/>`+"\n", left, top, pw, ph)
	// Each second's value is drawn at the middle of the second.
	line := func(vals []float64, color, extra string) {
		var pts []string
		for i, v := range vals {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(i)+0.5), y(v)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" %s points="%s"/>`+"\n", color, extra, strings.Join(pts, " "))
	}
	line(rep.MaxPerSecond, "#000000", `stroke-dasharray="6,4"`)
	ly := top + 6
	for i, r := range rep.Records {
		if r.Skipped != "" || len(r.PerSecond) == 0 {
			continue
		}
		c := palette[i%len(palette)]
		extra := ""
		if r.Kind == "peer" {
			extra = `stroke-dasharray="2,2"`
		}
		line(r.PerSecond, c, extra)
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3" %s/><text x="%d" y="%d">%s (%.1f%%)</text>`+"\n",
			W-right+10, W-right+34, ly, ly, c, extra, W-right+40, ly+4, esc(r.Contender), 100*r.Share)
		ly += 17
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// writeTimelineSVG draws rec's timeline: one panel per target, its limit
// (solid) against the provider's real permits (dashed) and the picks in
// flight (thin), over the run.
func writeTimelineSVG(path string, rep *Report, rec *Record) error {
	tl := rec.Timeline
	if tl == nil || len(tl.T) == 0 || len(tl.Targets) == 0 {
		return fmt.Errorf("%s: no timeline", rec.Contender)
	}
	const W, panelH, left, right, top, gap = 1000, 130, 60, 20, 40, 30
	H := top + len(tl.Targets)*(panelH+gap)
	tmax := rep.Scenario.Load.Warmup.D().Seconds() + rep.Scenario.Load.Duration.D().Seconds()
	pw := float64(W - left - right)
	x := func(t float64) float64 { return left + pw*t/tmax }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">%s, %s: limit (red) against the provider's permits (black, dashed) and picks in flight (blue), per target</text>`+"\n",
		left, esc(rep.Scenario.Name), esc(rec.Contender))
	for k, name := range tl.Targets {
		y0 := float64(top + k*(panelH+gap))
		vmax := 1.0
		for i := range tl.T {
			vmax = max(vmax, float64(tl.Limit[i][k]), float64(tl.Permits[i][k]), float64(tl.InFlight[i][k]))
		}
		vmax *= 1.1
		y := func(v float64) float64 { return y0 + panelH*(1-v/vmax) }
		fmt.Fprintf(&b, `<rect x="%d" y="%.0f" width="%.0f" height="%d" fill="none" stroke="#444444"/>`+"\n", left, y0, pw, panelH)
		fmt.Fprintf(&b, `<text x="%d" y="%.0f">%s</text><text x="%d" y="%.0f" text-anchor="end">%.0f</text><text x="%d" y="%.0f" text-anchor="end">0</text>`+"\n",
			left+4, y0-4, esc(name), left-6, y0+10, vmax, left-6, y0+panelH)
		for s := 0.0; s <= tmax; s += 2 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#888888">%.0fs</text>`+"\n", x(s), y0+panelH+14, s)
		}
		series := func(get func(i int) float64, color, extra string) {
			var pts []string
			for i, t := range tl.T {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(t), y(get(i))))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" %s points="%s"/>`+"\n", color, extra, strings.Join(pts, " "))
		}
		series(func(i int) float64 { return float64(tl.InFlight[i][k]) }, "#1f77b4", `stroke-width="1"`)
		series(func(i int) float64 { return float64(tl.Permits[i][k]) }, "#000000", `stroke-width="1.6" stroke-dasharray="6,4"`)
		series(func(i int) float64 { return float64(tl.Limit[i][k]) }, "#d62728", `stroke-width="1.6"`)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// loadAvg returns /proc/loadavg's first three fields, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// stageWindows splits the measured phase at the scenario's change points,
// in whole seconds (the per-second series' resolution: a change inside a
// second starts its window at the next whole one).
func stageWindows(rep *Report) [][2]int {
	sc := rep.Scenario
	from := int(sc.Load.Warmup.D() / time.Second)
	to := min(len(rep.MaxPerSecond), int((sc.Load.Warmup.D()+sc.Load.Duration.D())/time.Second))
	cuts := []int{from}
	for _, p := range sc.changePoints() {
		s := int((p + time.Second - 1) / time.Second)
		if s > cuts[len(cuts)-1] && s < to {
			cuts = append(cuts, s)
		}
	}
	var ws [][2]int
	for i, c := range cuts {
		end := to
		if i+1 < len(cuts) {
			end = cuts[i+1]
		}
		if end > c {
			ws = append(ws, [2]int{c, end})
		}
	}
	return ws
}

// stageRows is the per-stage view of the results: each contender's
// successes in each stage window, and against the best peer's in the
// same window. It says which stage a score was lost in: a drop answered
// late, a rise found late, or a level stretch where only the turnaround
// counts.
func stageRows(rep *Report) (head []string, rows [][]string) {
	ws := stageWindows(rep)
	sum := func(xs []float64, w [2]int) float64 {
		t := 0.0
		for i := w[0]; i < w[1] && i < len(xs); i++ {
			t += xs[i]
		}
		return t
	}
	best := make([]float64, len(ws))
	for _, r := range rep.Records {
		if r.Kind == "peer" && r.Skipped == "" {
			for i, w := range ws {
				best[i] = max(best[i], sum(r.PerSecond, w))
			}
		}
	}
	head = []string{"contender"}
	for _, w := range ws {
		head = append(head, fmt.Sprintf("%d-%ds", w[0], w[1]))
	}
	maxRow := []string{"theoretical max"}
	for _, w := range ws {
		maxRow = append(maxRow, fmt.Sprintf("%.0f", sum(rep.MaxPerSecond, w)))
	}
	rows = append(rows, maxRow)
	for _, r := range rep.Records {
		if r.Skipped != "" {
			continue
		}
		row := []string{r.Contender}
		for i, w := range ws {
			v := sum(r.PerSecond, w)
			cell := fmt.Sprintf("%.0f", v)
			if best[i] > 0 && r.Kind != "peer" {
				cell += fmt.Sprintf(" (%+.1f%%)", 100*(v/best[i]-1))
			}
			row = append(row, cell)
		}
		rows = append(rows, row)
	}
	return head, rows
}

// printStages writes the per-stage table.
func printStages(w io.Writer, rep *Report) {
	head, rows := stageRows(rep)
	if len(head) < 3 {
		return // one stage: the results table says it all
	}
	fmt.Fprintln(w, "\nsuccesses per stage (Fulcrum's rows: against the best peer in the same stage)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

// markdownStages is the per-stage table in Markdown ("" for one stage).
func markdownStages(rep *Report) string {
	head, rows := stageRows(rep)
	if len(head) < 3 {
		return ""
	}
	var b strings.Builder
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|---" + strings.Repeat("|--:", len(head)-1) + "|\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}
