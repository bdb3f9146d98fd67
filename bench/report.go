package main

import (
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// runReport reads results files and writes the Markdown tables and the
// failover chart.
func runReport(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	md := fs.String("md", "", "write the tables to this file (default: standard output)")
	png := fs.String("png", "", "write the crash-failover chart to this PNG file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("report: want one or more results files")
	}
	res, err := loadResults(fs.Args())
	if err != nil {
		return err
	}
	w := io.Writer(os.Stdout)
	if *md != "" {
		f, err := os.Create(*md)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		defer f.Close()
		w = f
	}
	writeTables(w, res)
	if *png != "" {
		if err := failoverChart(res.Crash, *png); err != nil {
			return fmt.Errorf("report: chart: %w", err)
		}
	}
	return nil
}

// stat is a summary of some trials: how many measured something, and the
// p50 and p99 (nearest rank: with five trials the p99 is the worst).
type stat struct {
	ok, all  int
	p50, p99 float64
}

func summarizeTrials(xs []float64, all int) stat {
	s := stat{ok: len(xs), all: all, p50: math.NaN(), p99: math.NaN()}
	if len(xs) > 0 {
		xs = slices.Sorted(slices.Values(xs))
		s.p50, s.p99 = percentile(xs, 0.5), percentile(xs, 0.99)
	}
	return s
}

// trialStats summarises f over the trials of system at ttl that measured
// something.
func trialStats(trials []FailoverTrial, system string, ttl float64, f func(FailoverTrial) float64) stat {
	var xs []float64
	all := 0
	for _, t := range trials {
		if t.System != system || t.TTL != ttl {
			continue
		}
		all++
		if t.Error == "" {
			xs = append(xs, f(t))
		}
	}
	return summarizeTrials(xs, all)
}

func ttlsOf(trials []FailoverTrial) []float64 {
	var out []float64
	for _, t := range trials {
		if !slices.Contains(out, t.TTL) {
			out = append(out, t.TTL)
		}
	}
	slices.Sort(out)
	return out
}

func s3(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.2f s", x)
}

func ratio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// writeTables writes one Markdown table per benchmark.
func writeTables(w io.Writer, r *Results) {
	fmt.Fprintf(w, "Run of %s, tenure %s, timing %s, %.0f s in all: `%s`.\nMachine: %s.\n\n",
		r.Started.Format("2006-01-02"), r.Commit, r.Timing, r.Seconds, r.Command, r.Machine)
	if len(r.Crash) > 0 {
		fmt.Fprintln(w, "### Crash failover (SIGKILL of the leader)")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| TTL | system | trials | failover p50 | p99 | safety floor p50 | p99 | failover − floor p50 | p99 |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, ttl := range ttlsOf(r.Crash) {
			var rows [2][3]stat
			for i, sys := range []string{"tenure", "etcd"} {
				rows[i][0] = trialStats(r.Crash, sys, ttl, func(t FailoverTrial) float64 { return t.Failover })
				rows[i][1] = trialStats(r.Crash, sys, ttl, func(t FailoverTrial) float64 { return t.Floor })
				rows[i][2] = trialStats(r.Crash, sys, ttl, func(t FailoverTrial) float64 { return t.Failover - t.Floor })
				fmt.Fprintf(w, "| %.0f s | %s | %d/%d | %s | %s | %s | %s | %s | %s |\n", ttl, sys, rows[i][0].ok, rows[i][0].all,
					s3(rows[i][0].p50), s3(rows[i][0].p99), s3(rows[i][1].p50), s3(rows[i][1].p99), s3(rows[i][2].p50), s3(rows[i][2].p99))
			}
			fmt.Fprintf(w, "| %.0f s | tenure / etcd | | %s | %s | %s | %s | %s | %s |\n", ttl,
				ratio(rows[0][0].p50, rows[1][0].p50), ratio(rows[0][0].p99, rows[1][0].p99),
				ratio(rows[0][1].p50, rows[1][1].p50), ratio(rows[0][1].p99, rows[1][1].p99),
				ratio(rows[0][2].p50, rows[1][2].p50), ratio(rows[0][2].p99, rows[1][2].p99))
		}
		fmt.Fprintln(w)
	}
	if len(r.Graceful) > 0 {
		fmt.Fprintln(w, "### Graceful hand-over (SIGTERM of the leader)")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| TTL | tenure p50 | p99 | etcd p50 | p99 | ratio p50 | p99 | trials (tenure, etcd) |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
		for _, ttl := range ttlsOf(r.Graceful) {
			t := trialStats(r.Graceful, "tenure", ttl, func(t FailoverTrial) float64 { return t.Failover })
			e := trialStats(r.Graceful, "etcd", ttl, func(t FailoverTrial) float64 { return t.Failover })
			fmt.Fprintf(w, "| %.0f s | %s | %s | %s | %s | %s | %s | %d/%d, %d/%d |\n", ttl, ms(t.p50), ms(t.p99), ms(e.p50), ms(e.p99),
				ratio(t.p50, e.p50), ratio(t.p99, e.p99), t.ok, t.all, e.ok, e.all)
		}
		fmt.Fprintln(w)
	}
	if len(r.Queries) > 0 {
		fmt.Fprintln(w, "### Leader queries (closed loop)")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| clients | tenure q/s | p50 | p99 | etcd q/s | p50 | p99 | ratio q/s | ratio p50 |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		var ns []int
		for _, q := range r.Queries {
			if !slices.Contains(ns, q.Clients) {
				ns = append(ns, q.Clients)
			}
		}
		for _, n := range ns {
			var t, e QueryResult
			for _, q := range r.Queries {
				if q.Clients == n && q.System == "tenure" {
					t = q
				} else if q.Clients == n {
					e = q
				}
			}
			fmt.Fprintf(w, "| %d | %.0f | %.0f µs | %.0f µs | %.0f | %.0f µs | %.0f µs | %s | %s |\n", n, t.QPS, t.P50, t.P99, e.QPS, e.P50, e.P99,
				ratio(t.QPS, e.QPS), ratio(t.P50, e.P50))
		}
		fmt.Fprintln(w)
	}
	writeMessages(w, r)
	writeFleets(w, r)
}

func ms(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.0f ms", 1000*x)
}

// writeMessages compares the peer messages of a crash failover with the
// classic bully algorithm's best case (the next node announces itself to
// the n − 2 others) and worst case (the lowest node starts: n(n−1)/2
// ELECTIONs and ANSWERs), for five agents from the crash trials at the
// fleets' TTL and for the fleets.
func writeMessages(w io.Writer, r *Results) {
	type row struct {
		n      int
		src    string
		msgs   float64
		bully  float64
		bytes  float64
		ok, of int
	}
	var rows []row
	for _, ttl := range ttlsOf(r.Crash) {
		var m, b, e []float64
		all := 0
		for _, t := range r.Crash {
			if t.System == "tenure" && t.TTL == ttl {
				all++
				if t.Traffic != nil && t.Error == "" {
					m, b, e = append(m, float64(t.Traffic.Messages)), append(b, float64(t.Traffic.RequestBytes)), append(e, float64(t.Traffic.ElectionMessages))
				}
			}
		}
		if len(m) > 0 {
			rows = append(rows, row{5, fmt.Sprintf("crash trials, TTL %.0f s (median)", ttl),
				summarizeTrials(m, all).p50, summarizeTrials(e, all).p50, summarizeTrials(b, all).p50, len(m), all})
		}
	}
	for _, f := range r.Fleets {
		if f.System == "tenure" {
			if f.Traffic == nil {
				rows = append(rows, row{f.N, "fleet: no failover measured", math.NaN(), math.NaN(), math.NaN(), 0, 1})
				continue
			}
			rows = append(rows, row{f.N, fmt.Sprintf("fleet, %d voters", f.Voters), float64(f.Traffic.Messages),
				float64(f.Traffic.ElectionMessages), float64(f.Traffic.RequestBytes), 1, 1})
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "### Peer messages per crash failover (tenure) against the classic bully")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| n | from | tenure messages (all) | of them election messages | request bytes | bully best n−2 | bully worst n(n−1)/2 | all / best |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, x := range rows {
		best, worst := float64(x.n-2), float64(x.n*(x.n-1)/2)
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %.0f | %.0f | %s |\n", x.n, x.src, num(x.msgs), num(x.bully), num(x.bytes), best, worst, ratio(x.msgs, best))
	}
	fmt.Fprintln(w)
}

func num(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.0f", x)
}

// writeFleets writes the idle cost and the time to agree of each fleet
// size: tenure's n agents against etcd's n candidates plus its 3 members.
func writeFleets(w io.Writer, r *Results) {
	if len(r.Fleets) == 0 {
		return
	}
	byN := map[int][2]*FleetResult{}
	var ns []int
	for i := range r.Fleets {
		f := &r.Fleets[i]
		pair := byN[f.N]
		if f.System == "tenure" {
			pair[0] = f
		} else {
			pair[1] = f
		}
		byN[f.N] = pair
		if !slices.Contains(ns, f.N) {
			ns = append(ns, f.N)
		}
	}
	slices.Sort(ns)
	fmt.Fprintln(w, "### Idle cost per agent, and the whole fleet")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "etcd: n candidate processes (a session and an Observe each), plus the 3 members they use.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| n | tenure RSS per agent (max) | tenure CPU per agent | etcd candidate RSS | candidate CPU | etcd member RSS | member CPU | RSS all, tenure / etcd | CPU all, tenure / etcd |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, n := range ns {
		t, e := byN[n][0], byN[n][1]
		cells := []string{fmt.Sprint(n), "—", "—", "—", "—", "—", "—", "—", "—"}
		if t != nil {
			cells[1] = fmt.Sprintf("%.1f MiB (%.1f)", t.Idle.RSSMiB, t.Idle.RSSMaxMiB)
			cells[2] = fmt.Sprintf("%.2f %%", t.Idle.CPUPct) + star(t)
		}
		if e != nil && e.Members != nil {
			cells[3] = fmt.Sprintf("%.1f MiB", e.Idle.RSSMiB)
			cells[4] = fmt.Sprintf("%.2f %%", e.Idle.CPUPct)
			cells[5] = fmt.Sprintf("%.1f MiB", e.Members.RSSMiB)
			cells[6] = fmt.Sprintf("%.2f %%", e.Members.CPUPct)
		}
		if t != nil && e != nil && e.Members != nil {
			er, ec := e.Idle.RSSTotalMiB+e.Members.RSSTotalMiB, e.Idle.CPUTotalPct+e.Members.CPUTotalPct
			cells[7] = fmt.Sprintf("%.0f / %.0f MiB = %s", t.Idle.RSSTotalMiB, er, ratio(t.Idle.RSSTotalMiB, er))
			cells[8] = fmt.Sprintf("%.1f / %.1f %% = %s", t.Idle.CPUTotalPct, ec, ratio(t.Idle.CPUTotalPct, ec))
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "### Time to agree on one leader, and a crash failover in the fleet (TTL 10 s)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "tenure's time runs from the first agent's start (bootstrap included); etcd's from the candidates' start, on a cluster that took %.1f s to serve.\n\n", r.EtcdStart)
	fmt.Fprintln(w, "| n | tenure agree | etcd agree | ratio | tenure failover (all agree) | etcd failover (all observe) | load before → after (tenure) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, n := range ns {
		t, e := byN[n][0], byN[n][1]
		cells := []string{fmt.Sprint(n), "—", "—", "—", "—", "—", "—"}
		if t != nil {
			cells[1], cells[4] = agreeCell(t.Agree, t.Wait), agreeCell(t.Failover, 0)
			cells[6] = t.Load[0] + " → " + t.Load[1]
		}
		if e != nil {
			cells[2], cells[5] = agreeCell(e.Agree, e.Wait), agreeCell(e.Failover, 0)
		}
		if t != nil && e != nil && t.Agree >= 0 && e.Agree >= 0 {
			cells[3] = ratio(t.Agree, e.Agree)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	for _, f := range r.Fleets {
		if f.Note != "" {
			fmt.Fprintf(w, "- %s, n = %d: %s\n", f.System, f.N, f.Note)
		}
	}
	fmt.Fprintln(w)
}

// star marks an idle figure taken while the fleet had not agreed (so it
// was not idle).
func star(f *FleetResult) string {
	if f.Agree < 0 {
		return "*"
	}
	return ""
}

func agreeCell(s, wait float64) string {
	if s < 0 {
		if wait > 0 {
			return fmt.Sprintf("none in %.0f s", wait)
		}
		return "—"
	}
	return fmt.Sprintf("%.1f s", s)
}

// failoverChart plots each crash trial's failover against its safety
// floor, one panel per TTL; the diagonal is the floor itself, so the
// height of a point above it is the time the system took beyond what the
// dead leader's lease forced.
func failoverChart(trials []FailoverTrial, path string) error {
	ttls := ttlsOf(trials)
	if len(ttls) == 0 {
		return fmt.Errorf("no crash trials")
	}
	styles := map[string]struct {
		c     color.Color
		shape draw.GlyphDrawer
	}{
		"tenure": {color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, draw.CircleGlyph{}},
		"etcd":   {color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}, draw.TriangleGlyph{}},
	}
	var row []*plot.Plot
	for _, ttl := range ttls {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("crash failover, TTL %.0f s", ttl)
		p.X.Label.Text = "safety floor: until the dead leader's lease can end (s)"
		p.Y.Label.Text = "failover: until another node leads (s)"
		p.Legend.Top, p.Legend.Left = false, false // bottom right: below the diagonal, where no trial can be
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, sys := range []string{"tenure", "etcd"} {
			var xys plotter.XYs
			for _, t := range trials {
				if t.System == sys && t.TTL == ttl && t.Error == "" {
					xys = append(xys, plotter.XY{X: t.Floor, Y: t.Failover})
					lo, hi = min(lo, t.Floor, t.Failover), max(hi, t.Floor, t.Failover)
				}
			}
			if len(xys) == 0 {
				continue
			}
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return err
			}
			sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = styles[sys].c, styles[sys].shape, vg.Points(3.5)
			p.Add(sc)
			p.Legend.Add(sys, sc)
		}
		if math.IsInf(lo, 1) {
			lo, hi = 0, ttl
		}
		lo, hi = max(0, lo-0.1*ttl), hi+0.1*ttl
		diag, err := plotter.NewLine(plotter.XYs{{X: lo, Y: lo}, {X: hi, Y: hi}})
		if err != nil {
			return err
		}
		diag.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		diag.LineStyle.Color = color.Gray{Y: 0x80}
		p.Add(diag)
		p.Legend.Add("failover = floor", diag)
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = lo, hi, lo, hi
		p.Add(plotter.NewGrid())
		row = append(row, p)
	}
	const panel = 5 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(panel*vg.Length(len(row)), panel), vgimg.UseDPI(96))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 4,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
