package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress writes the live progress of a run: on a terminal one line rewritten in place
// every second, otherwise a plain line every few seconds and one at the end of each phase.
// Only one goroutine uses it at a time (phases run one after another).
type progress struct {
	w     io.Writer // nil: silent
	live  bool
	every time.Duration

	lastPrint time.Duration // phase time of the last plain line
	acc       []windowStats // counts since the last plain line
	accSecs   float64
	dirty     bool // a live line is on the screen
}

func newProgress(w io.Writer, live bool, every time.Duration) *progress {
	return &progress{w: w, live: live, every: every}
}

// update reports a tick: ws holds the last window's counts (over secs), sums the phase's
// counts so far.
func (p *progress) update(ph *phase, ws, sums []windowStats, secs float64, elapsed time.Duration) {
	if p.w == nil || secs <= 0 {
		return
	}
	if p.live {
		fmt.Fprintf(p.w, "\r%s\033[K", progressLine(ph, ws, secs, sums, elapsed, false))
		p.dirty = true
		return
	}
	if len(p.acc) != len(ws) || elapsed < p.lastPrint {
		p.acc, p.accSecs, p.lastPrint = make([]windowStats, len(ws)), 0, 0
	}
	for i := range ws {
		p.acc[i].count += ws[i].count
		p.acc[i].bytes += ws[i].bytes
		p.acc[i].errors += ws[i].errors
	}
	p.accSecs += secs
	if elapsed-p.lastPrint >= p.every {
		fmt.Fprintln(p.w, progressLine(ph, p.acc, p.accSecs, sums, elapsed, false))
		p.acc, p.accSecs, p.lastPrint = make([]windowStats, len(ws)), 0, elapsed
	}
}

// end reports the end of a phase, with its average rates.
func (p *progress) end(ph *phase, sums []windowStats, elapsed time.Duration) {
	p.acc, p.accSecs, p.lastPrint = nil, 0, 0
	if p.w == nil {
		return
	}
	line := progressLine(ph, sums, elapsed.Seconds(), sums, elapsed, true)
	if p.live {
		fmt.Fprintf(p.w, "\r%s\033[K\n", line)
		p.dirty = false
		return
	}
	fmt.Fprintln(p.w, line)
}

// printf writes a message line (below the live line, if one is showing).
func (p *progress) printf(format string, args ...any) {
	if p.w == nil {
		return
	}
	if p.dirty {
		fmt.Fprint(p.w, "\n")
		p.dirty = false
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// progressLine renders "label  12s/20s  GET 1234/s 4.8 MiB/s  PUT ...  errors 0  ETA 8s";
// rates are counts over secs, and done says the phase is over.
func progressLine(ph *phase, rates []windowStats, secs float64, sums []windowStats, elapsed time.Duration, done bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %s", ph.label, fmtDuration(elapsed))
	if ph.duration > 0 && !done {
		fmt.Fprintf(&b, "/%s", fmtDuration(ph.duration))
	}
	var n, errs int64
	for _, s := range sums {
		n += s.count + s.errors
		errs += s.errors
	}
	switch {
	case ph.work > 0:
		fmt.Fprintf(&b, "  %d/%d", n, ph.work)
	case ph.maxOps > 0:
		fmt.Fprintf(&b, "  %d/%d ops", n, ph.maxOps)
	}
	for i, op := range ph.ops {
		r := rates[i]
		fmt.Fprintf(&b, "  %s %.0f/s", op, float64(r.count)/secs)
		if sums[i].bytes > 0 {
			fmt.Fprintf(&b, " %.1f MiB/s", float64(r.bytes)/MiB/secs)
		}
	}
	fmt.Fprintf(&b, "  errors %d", errs)
	if done {
		return b.String() + "  done"
	}
	if eta, ok := phaseETA(ph, n, elapsed); ok {
		fmt.Fprintf(&b, "  ETA %s", fmtDuration(eta))
	}
	return b.String()
}

// phaseETA estimates the time left in a phase that has done n operations.
func phaseETA(ph *phase, n int64, elapsed time.Duration) (time.Duration, bool) {
	total := ph.work
	if ph.maxOps > 0 && (total == 0 || ph.maxOps < total) {
		total = ph.maxOps
	}
	var eta time.Duration
	known := false
	if ph.duration > 0 {
		eta, known = max(ph.duration-elapsed, 0), true
	}
	if total > 0 && n > 0 {
		byOps := time.Duration(float64(elapsed) * float64(total-n) / float64(n))
		if !known || byOps < eta {
			eta, known = max(byOps, 0), true
		}
	}
	return eta, known
}

// fmtDuration renders a duration to the second ("1m05s"), or tenths under ten seconds.
func fmtDuration(d time.Duration) string {
	switch {
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%.0fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
