package main

import (
	"fmt"
	"io"
	"strings"
)

func mib(b int64) string    { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
func kibMiB(k int64) string { return fmt.Sprintf("%.1f MiB", float64(k)/1024) }

// thousands formats v rounded with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func (r *Report) print(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	m := r.Machine
	p("listbench: listing %s objects in bucket %q, %s", thousands(float64(r.Objects)), bucketName, r.Date)
	p("machine:   %d cores, %s, %s RAM; linux %s; %s %s; data on %s", m.Cores, m.CPUModel,
		fmt.Sprintf("%.1f GiB", float64(m.MemBytes)/(1<<30)), m.Kernel, m.GoVersion, m.OSArch, orNA(m.DataFS))
	p("cairn:     %s (%s)", r.CairnBin, orNA(r.CairnVersion))
	p("")
	l := r.Load
	if l.Skipped {
		p("load:      skipped (--reuse); data dir %s, index %s", mib(l.DiskBytes), mib(l.IndexBytes))
	} else {
		p("load:      %s objects (%s of bodies, 0-100 B, inline) with %d writers in %.1fs = %s objects/s; store close %.2fs",
			thousands(float64(l.Objects)), mib(l.BodyBytes), l.Workers, l.Seconds, thousands(l.PerSecond), l.CloseSec)
		p("           %s synced index commits, %.1f writes per commit; data dir %s, of which index %s",
			thousands(float64(l.Commits)), l.PerCommit, mib(l.DiskBytes), mib(l.IndexBytes))
	}
	p("")
	p("%-44s %5s %9s %9s %9s", "latency (ms)", "reps", "median", "p90", "max")
	section := func(title string, res Results) {
		p("%s", title)
		for _, m := range res.List {
			if m.Scans > 0 {
				continue
			}
			p("  %-42s %5d %9.2f %9.2f %9.2f", m.Name, m.Reps, m.MedianMs, m.P90Ms, m.MaxMs)
			if m.OpsPerSec > 0 {
				p("    %d at a time: %s/s", headWorkers, thousands(m.OpsPerSec))
			}
		}
		for _, m := range res.List {
			if m.Scans == 0 {
				continue
			}
			p("  %-42s %5d %9.2f %9.2f %9.2f  (per page)", m.Name, m.Reps, m.MedianMs, m.P90Ms, m.MaxMs)
			if m.Keys > 0 {
				line := fmt.Sprintf("    %s keys, %d pages: %.2fs = %s keys/s", thousands(float64(m.Keys)), m.Pages, m.ScanSeconds, thousands(m.KeysPerSec))
				if m.ServerKeysPerSec > 0 && m.Scans > 0 && m.Reps > 0 && m.ServerCPUSec > 0 {
					line += fmt.Sprintf(" (request time only: %s keys/s); server CPU %.2fs", thousands(m.ServerKeysPerSec), m.ServerCPUSec)
				}
				if m.Scans > 1 {
					line += fmt.Sprintf("; median of %d scans", m.Scans)
				}
				p("%s", line)
			}
		}
	}
	if l.Skipped {
		section("in-process store.List (no HTTP; the reused store, reopened)", r.InProcess)
	} else {
		section("in-process store.List (no HTTP; the same store, right after the load)", r.InProcess)
	}
	section(fmt.Sprintf("HTTP ListObjectsV2, server with %s objects", thousands(float64(r.Objects))), r.Full.Results)
	section("HTTP ListObjectsV2, server with an empty bucket (baseline)", r.Empty.Results)
	p("")
	p("%-22s %8s %10s %12s %14s %12s %10s %9s", "server", "startup", "RSS ready", "RSS settled", "RSS after list", "peak RSS", "idle CPU", "list CPU")
	row := func(name string, s *ServerRun) {
		p("%-22s %7.2fs %10s %12s %14s %12s %9.2fs %8.2fs", name, s.StartupSec, kibMiB(s.MemReady.RSSKiB), kibMiB(s.MemStartup.RSSKiB),
			kibMiB(s.MemAfter.RSSKiB), kibMiB(s.MemAfter.PeakKiB), s.SettleCPUSec, s.ListingCPUSec)
	}
	row(thousands(float64(r.Objects))+" objects", r.Full)
	row("empty", r.Empty)
	p("%-22s %8s %10s %12s %14s %12s", "ratio", "", "", fmt.Sprintf("%.2fx", r.RSSRatio.Startup), fmt.Sprintf("%.2fx", r.RSSRatio.After), fmt.Sprintf("%.2fx", r.RSSRatio.Peak))
	p("  (after listing, with objects: anon %s, file-backed %s; empty: anon %s, file-backed %s)",
		kibMiB(r.Full.MemAfter.AnonKiB), kibMiB(r.Full.MemAfter.FileKiB), kibMiB(r.Empty.MemAfter.AnonKiB), kibMiB(r.Empty.MemAfter.FileKiB))
	p("  (Go runtime after listing, with objects: heap in use %s, sys %s; empty: heap in use %s, sys %s)",
		mib(r.Full.GoMemAfter.HeapInuse), mib(r.Full.GoMemAfter.Sys), mib(r.Empty.GoMemAfter.HeapInuse), mib(r.Empty.GoMemAfter.Sys))
	var steps []string
	for _, st := range r.Full.MemSteps {
		steps = append(steps, fmt.Sprintf("%s: %s", st.After, kibMiB(st.RSSKiB)))
	}
	if len(steps) > 0 {
		p("  (RSS with objects, after each measurement: %s)", strings.Join(steps, "; "))
	}
	p("  (data dir with objects after the server stopped: %s, of which index %s)", mib(r.Full.DataDirBytes), mib(r.Full.IndexDirBytes))
	p("  (idle CPU: used during the %v after startup; stop took %.2fs and %.2fs)", r.Full.settleDuration, r.Full.StopSec, r.Empty.StopSec)
	for _, s := range []*ServerRun{r.Full, r.Empty} {
		if s.StopError != "" {
			p("  stop of the server on %s: %s", s.DataDir, s.StopError)
		}
		for i, l := range s.LogProblems {
			if i == 5 {
				p("  ... and %d more warnings/errors", len(s.LogProblems)-5)
				break
			}
			p("  server log (%s): %s", s.DataDir, l)
		}
	}
	p("")
	p("goals")
	for _, g := range r.Goals {
		v := fmt.Sprintf("%.2f %s", g.Value, g.Unit)
		goal := fmt.Sprintf("%g %s", g.Goal, g.Unit)
		if g.Unit == "keys/s" {
			v, goal = thousands(g.Value)+" keys/s", thousands(g.Goal)+" keys/s"
		} else if g.Unit == "B" || g.Unit == "MiB" {
			v, goal = fmt.Sprintf("%.1f %s", g.Value, g.Unit), fmt.Sprintf("%g %s", g.Goal, g.Unit)
		} else if g.Unit == "x" {
			v, goal = fmt.Sprintf("%.2fx", g.Value), fmt.Sprintf("%gx", g.Goal)
		}
		status := "met"
		if !g.Met {
			status = "MISSED"
		}
		p("  %-66s %16s  %s", g.Name+" "+goal, v, status)
	}
}

func orNA(s string) string {
	if s == "" {
		return "n/a"
	}
	return s
}
