package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/chainsync-go/chainsync/internal/bench"
)

func describeMachine(r report) string {
	m := r.Machine
	s := fmt.Sprintf("%s/%s, %d CPUs", m.GOOS, m.GOARCH, m.CPUs)
	if m.CPUModel != "" {
		s += " (" + m.CPUModel + ")"
	}
	if m.Kernel != "" {
		s += ", kernel " + m.Kernel
	}
	return s + ", " + m.GoVersion
}

func describeVersions(r report) string {
	keys := make([]string, 0, len(r.Versions))
	for k := range r.Versions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+" "+r.Versions[k])
	}
	return strings.Join(parts, ", ")
}

func writeText(w io.Writer, r report) {
	fmt.Fprintf(w, "machine: %s\nversions: %s\n%d rounds after %d warm-up, empty tasks, loopback\n\n", describeMachine(r), describeVersions(r), r.Rounds, r.Warmup)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "n\tsystem\tp50\tp90\tp99\tx ChainSync (p50)\tcompared with")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.2f\t%s\n", x.N, x.System, bench.FormatUS(x.Stats.Median),
			bench.FormatUS(x.Stats.P90), bench.FormatUS(x.Stats.P99), x.Ratio, x.Against)
	}
	tw.Flush()
}

func writeMarkdown(w io.Writer, r report) {
	fmt.Fprintf(w, "Machine: %s. Versions: %s. %d rounds after %d warm-up, empty tasks, loopback. Command: `%s`\n\n",
		describeMachine(r), describeVersions(r), r.Rounds, r.Warmup, r.Command)
	fmt.Fprintln(w, "| n | system | p50 | p90 | p99 | × ChainSync (p50) | compared with |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---|")
	for _, x := range r.Rows {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %.2f | %s |\n", x.N, x.System, bench.FormatUS(x.Stats.Median),
			bench.FormatUS(x.Stats.P90), bench.FormatUS(x.Stats.P99), x.Ratio, x.Against)
	}
}

// writeSVG plots each system's median latency against n.
func writeSVG(w io.Writer, r report, ns []int) error {
	xs := make([]float64, len(ns))
	for i, n := range ns {
		xs[i] = float64(n)
	}
	colors := []string{"#1f5fbf", "#c0392b", "#27ae60", "#8e44ad", "#e67e22", "#7f8c8d"}
	var systems []string
	for _, x := range r.Rows {
		if !slices.Contains(systems, x.System) {
			systems = append(systems, x.System)
		}
	}
	var series []bench.Series
	for i, sys := range systems {
		s := bench.Series{Label: sys, Color: colors[i%len(colors)], Dash: strings.Contains(sys, "floor")}
		for _, n := range ns {
			y := 0.0
			for _, x := range r.Rows {
				if x.System == sys && x.N == n {
					y = x.Stats.Median
				}
			}
			s.Y = append(s.Y, y)
		}
		series = append(series, s)
	}
	short := []string{}
	if v := r.Versions["go.etcd.io/etcd/server/v3"]; v != "" {
		short = append(short, "etcd "+v+" (embedded, fsync)")
	}
	if v := r.Versions["python"]; v != "" {
		short = append(short, v+" (reference implementation)")
	}
	return bench.Plot(w, "Median round latency: ChainSync and the alternatives", describeMachine(r)+"\n"+strings.Join(short, ", "),
		"nodes in the chain (n)", "round latency (p50)", xs, series, nil)
}
