package main

import (
	"slices"
	"time"
)

// Measurement is one measured operation: latencies of repeated requests, or a full scan.
type Measurement struct {
	Name string `json:"name"`
	// Latencies in milliseconds over Reps runs (nearest-rank percentiles).
	Reps     int     `json:"reps"`
	MinMs    float64 `json:"min_ms"`
	MedianMs float64 `json:"median_ms"`
	P90Ms    float64 `json:"p90_ms"`
	MaxMs    float64 `json:"max_ms"`
	// Scans only: keys listed per scan, pages per scan, and the rate. KeysPerSec is the
	// median over the scans of keys / wall time (client XML parsing included);
	// ServerKeysPerSec counts only the time from sending each request to having read its
	// whole response. The latency figures above are then per page, over every page.
	Keys             int     `json:"keys,omitempty"`
	Pages            int     `json:"pages,omitempty"`
	Scans            int     `json:"scans,omitempty"`
	ScanSeconds      float64 `json:"scan_seconds,omitempty"`
	KeysPerSec       float64 `json:"keys_per_sec,omitempty"`
	ServerKeysPerSec float64 `json:"server_keys_per_sec,omitempty"`
	ServerCPUSec     float64 `json:"server_cpu_seconds,omitempty"`
	// OpsPerSec is the rate of a measurement of concurrent requests (HEADs): requests
	// over wall time.
	OpsPerSec float64 `json:"ops_per_sec,omitempty"`
}

// Results is an ordered list of measurements.
type Results struct {
	List []*Measurement `json:"measurements"`
}

func (r *Results) add(m *Measurement) { r.List = append(r.List, m) }

func (r *Results) get(name string) *Measurement {
	for _, m := range r.List {
		if m.Name == name {
			return m
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the nearest-rank p-th percentile of sorted ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(float64(len(ds))*p+0.999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func latency(name string, ds []time.Duration) *Measurement {
	s := slices.Clone(ds)
	slices.Sort(s)
	m := &Measurement{Name: name, Reps: len(s)}
	if len(s) > 0 {
		m.MinMs, m.MedianMs, m.P90Ms, m.MaxMs = ms(s[0]), ms(pct(s, 0.5)), ms(pct(s, 0.9)), ms(s[len(s)-1])
	}
	return m
}

// scan summarises one full scan of keys keys in wall time, with per-page latencies pages.
func scan(name string, keys int, wall time.Duration, pages []time.Duration, cpu time.Duration) *Measurement {
	m := latency(name, pages)
	m.Keys, m.Pages, m.Scans, m.ScanSeconds = keys, len(pages), 1, wall.Seconds()
	m.KeysPerSec = float64(keys) / wall.Seconds()
	var sum time.Duration
	for _, d := range pages {
		sum += d
	}
	if sum > 0 {
		m.ServerKeysPerSec = float64(keys) / sum.Seconds()
	}
	m.ServerCPUSec = cpu.Seconds()
	return m
}

// mergeScans combines several scans of the same bucket: page latencies pooled, the rates
// and times the median scan's.
func mergeScans(name string, keys int, walls []time.Duration, pages [][]time.Duration, cpus []time.Duration) *Measurement {
	var all []time.Duration
	var sums []time.Duration
	for _, p := range pages {
		all = append(all, p...)
		var s time.Duration
		for _, d := range p {
			s += d
		}
		sums = append(sums, s)
	}
	m := latency(name, all)
	m.Keys, m.Scans = keys, len(walls)
	if len(pages) > 0 {
		m.Pages = len(pages[0])
	}
	w := slices.Clone(walls)
	slices.Sort(w)
	med := pct(w, 0.5)
	m.ScanSeconds = med.Seconds()
	m.KeysPerSec = float64(keys) / med.Seconds()
	slices.Sort(sums)
	if s := pct(sums, 0.5); s > 0 {
		m.ServerKeysPerSec = float64(keys) / s.Seconds()
	}
	c := slices.Clone(cpus)
	slices.Sort(c)
	m.ServerCPUSec = pct(c, 0.5).Seconds()
	return m
}
