// Package plot renders a bench.Report as a chart: SVG, a self-contained HTML page, or PNG.
//
// The figure stacks 900-pixel-wide charts vertically: throughput (ops/s and,
// when bytes moved, MiB/s), p50/p99 latency and errors over time when the
// report has a timeline; rate and latency versus concurrency for ClawIO
// workloads (Levels); and always a summary of ops/s and latency
// percentiles per operation. All three formats are drawn from the same
// layout; PNG text uses the embedded Go fonts.
package plot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairnfs/cairn/internal/bench"
)

// Write renders r to path; the format follows the extension: .svg, .html (or .htm), .png.
// Any other extension is an error naming the supported ones.
func Write(path string, r *bench.Report) error {
	ext := strings.ToLower(filepath.Ext(path))
	format := strings.TrimPrefix(ext, ".")
	if !supported(format) {
		if ext == "" {
			return fmt.Errorf("plot: %s has no file extension; use .svg, .html (or .htm) or .png", path)
		}
		return fmt.Errorf("plot: unsupported file extension %q for %s; use .svg, .html (or .htm) or .png", ext, path)
	}
	// Render in memory first so that a failure leaves no half-written file.
	var buf bytes.Buffer
	if err := Render(&buf, format, r); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// supported reports whether format names an output format Render knows.
func supported(format string) bool {
	switch format {
	case "svg", "html", "htm", "png":
		return true
	}
	return false
}

// Render writes the chart in the given format ("svg", "html", "png") to w.
func Render(w io.Writer, format string, r *bench.Report) error {
	if r == nil {
		return errors.New("plot: no report to render")
	}
	format = strings.ToLower(strings.TrimPrefix(format, "."))
	if !supported(format) {
		return fmt.Errorf("plot: unsupported format %q; use svg, html or png", format)
	}
	fs, err := newFontSet()
	if err != nil {
		return fmt.Errorf("plot: loading fonts: %w", err)
	}
	switch format {
	case "svg":
		err = writeSVG(w, buildFigure(r, fs, true), true)
	case "png":
		err = writePNG(w, buildFigure(r, fs, true), fs)
	default:
		err = writeHTML(w, r, fs)
	}
	if err != nil {
		return fmt.Errorf("plot: writing %s: %w", format, err)
	}
	return nil
}
