// Package metrics holds cairn's Prometheus metrics. A Metrics value owns its own registry
// (no package globals) and implements the observer hooks of the S3 API and the store.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the set of a node's metrics.
type Metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	bytesIn     prometheus.Counter
	bytesOut    prometheus.Counter
	commitBatch prometheus.Histogram
	segSyncs    prometheus.Counter
	volOps      *prometheus.CounterVec
	volBytes    *prometheus.CounterVec
	volLatency  *prometheus.HistogramVec
}

// New creates the metrics and registers them, with Go runtime and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_s3_requests_total", Help: "S3 requests by operation and HTTP status.",
	}, []string{"op", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cairn_s3_request_duration_seconds",
		Help:    "S3 request latency by operation, until the handler returned.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"op"})
	m.bytesIn = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_s3_received_bytes_total", Help: "Object bytes received."})
	m.bytesOut = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_s3_sent_bytes_total", Help: "Response bytes sent."})
	m.commitBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cairn_store_commit_batch_size",
		Help:    "Index batches made durable by one synced commit (group commit).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	m.segSyncs = prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_store_segment_syncs_total", Help: "Segment group syncs requested by writers."})
	m.volOps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_volume_ops_total", Help: "Block volume I/O served by this node (the volume's lease holder), by volume, operation (read, write, trim, zero, flush) and result (ok, error).",
	}, []string{"volume", "op", "result"})
	m.volBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cairn_volume_bytes_total", Help: "Bytes read from and written to block volumes through this node, by volume and operation.",
	}, []string{"volume", "op"})
	m.volLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cairn_volume_op_duration_seconds",
		Help:    "Block volume I/O latency on this node (every copy written, for writes), by volume and operation.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30},
	}, []string{"volume", "op"})
	m.reg.MustRegister(m.requests, m.latency, m.bytesIn, m.bytesOut, m.commitBatch, m.segSyncs, m.volOps, m.volBytes, m.volLatency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveRequest implements s3api.Observer.
func (m *Metrics) ObserveRequest(op string, status int, d time.Duration, in, out int64) {
	m.requests.WithLabelValues(op, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(op).Observe(d.Seconds())
	m.bytesIn.Add(float64(in))
	m.bytesOut.Add(float64(out))
}

// ObserveVolume records one block volume operation (volume.Config.Observe).
func (m *Metrics) ObserveVolume(volume, op string, bytes int64, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.volOps.WithLabelValues(volume, op, result).Inc()
	if err == nil && bytes > 0 {
		m.volBytes.WithLabelValues(volume, op).Add(float64(bytes))
	}
	m.volLatency.WithLabelValues(volume, op).Observe(d.Seconds())
}

// ObserveCommit records the size of one group commit.
func (m *Metrics) ObserveCommit(batches int) { m.commitBatch.Observe(float64(batches)) }

// ObserveSegmentSync counts segment syncs.
func (m *Metrics) ObserveSegmentSync(int) { m.segSyncs.Inc() }

// DiskStats are the engine's disk figures (see store.Stats).
type DiskStats struct {
	SegmentBytes, LiveBytes, GarbageBytes, IndexBytes, FreeBytes, SpareBytes int64
	Segments                                                                 int
}

// WatchDisk exports the disk figures stats returns, read at scrape time.
func (m *Metrics) WatchDisk(stats func() DiskStats) {
	gauge := func(name, help string, f func(DiskStats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			return float64(f(stats()))
		})
	}
	m.reg.MustRegister(
		gauge("cairn_disk_used_bytes", "Bytes used by segment files and the index.", func(st DiskStats) int64 { return st.SegmentBytes + st.IndexBytes }),
		gauge("cairn_disk_free_bytes", "Free bytes on the data disk.", func(st DiskStats) int64 { return st.FreeBytes }),
		gauge("cairn_disk_garbage_bytes", "Bytes in segment files held by deleted or overwritten data, reclaimable by compaction.", func(st DiskStats) int64 { return st.GarbageBytes }),
		gauge("cairn_disk_live_bytes", "Bytes of live chunk records in segment files.", func(st DiskStats) int64 { return st.LiveBytes }),
		gauge("cairn_disk_spare_bytes", "Bytes of emptied segment files kept for new segments to reuse (counted in cairn_disk_free_bytes).", func(st DiskStats) int64 { return st.SpareBytes }),
		gauge("cairn_index_bytes", "Bytes used by the metadata index.", func(st DiskStats) int64 { return st.IndexBytes }),
		gauge("cairn_segments", "Number of segment files.", func(st DiskStats) int64 { return int64(st.Segments) }),
	)
}

// CounterFunc registers a counter whose value fn reads (fn must be safe for concurrent use).
func (m *Metrics) CounterFunc(name, help string, fn func() float64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, fn))
}

// LabeledCounterFunc registers one counter series per value of label (name{label="v"}),
// each read by its fn (safe for concurrent use).
func (m *Metrics) LabeledCounterFunc(name, help, label string, fns map[string]func() float64) {
	for v, fn := range fns {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{label: v}}, fn))
	}
}

// GaugeFunc registers a gauge whose value fn reads.
func (m *Metrics) GaugeFunc(name, help string, fn func() float64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn))
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}
