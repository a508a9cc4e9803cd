package plot

import (
	"image/color"
	"math"
)

// Colours. The series palette is Okabe & Ito's colour-blind-safe set,
// ordered so that the low-contrast yellow comes last.
var (
	palette = []color.NRGBA{
		{0x00, 0x72, 0xB2, 0xff}, // blue
		{0xE6, 0x9F, 0x00, 0xff}, // orange
		{0x00, 0x9E, 0x73, 0xff}, // bluish green
		{0xD5, 0x5E, 0x00, 0xff}, // vermillion
		{0xCC, 0x79, 0xA7, 0xff}, // reddish purple
		{0x56, 0xB4, 0xE9, 0xff}, // sky blue
		{0x00, 0x00, 0x00, 0xff}, // black
		{0xC8, 0xB4, 0x00, 0xff}, // yellow, darkened for contrast on white
	}
	colText   = color.NRGBA{0x22, 0x22, 0x22, 0xff}
	colMuted  = color.NRGBA{0x66, 0x66, 0x66, 0xff}
	colAxis   = color.NRGBA{0x55, 0x55, 0x55, 0xff}
	colGrid   = color.NRGBA{0xE3, 0xE3, 0xE3, 0xff}
	colPanel  = color.NRGBA{0xCC, 0xCC, 0xCC, 0xff}
	colWhite  = color.NRGBA{0xff, 0xff, 0xff, 0xff}
	colHeader = color.NRGBA{0xF4, 0xF6, 0xF8, 0xff}
)

// seriesColor returns the colour of the i-th series and whether it should be
// dashed to stay distinguishable once the palette has been used up.
func seriesColor(i int) (color.NRGBA, bool) {
	return palette[i%len(palette)], (i/len(palette))%2 == 1
}

// withAlpha returns c with the given opacity.
func withAlpha(c color.NRGBA, a uint8) color.NRGBA {
	c.A = a
	return c
}

// Text sizes in pixels.
const (
	sizeTitle  = 20
	sizeSub    = 13
	sizePanel  = 15
	sizeAxis   = 13
	sizeTick   = 12
	sizeLegend = 12
	sizeValue  = 11
)

// panel is one chart of the figure, drawn into the rectangle (x, y, w, h).
// height returns how tall the panel wants to be at width w.
type panel interface {
	draw(f *figure, fs *fontSet, x, y, w, h float64)
	height(fs *fontSet, w float64) float64
}

// legendRowH is the height of one row of a legend.
const legendRowH = 18.0

// heightWithLegend grows the standard panel height by any legend rows beyond the first.
func heightWithLegend(fs *fontSet, es []legendEntry, w float64) float64 {
	return panelH + math.Max(0, drawLegend(nil, fs, es, 0, 0, w)-legendRowH)
}

// swatch is the kind of legend marker.
type swatch int

const (
	swatchLine swatch = iota
	swatchBox
	swatchDot
	swatchErrorBar
)

type legendEntry struct {
	label string
	col   color.NRGBA
	kind  swatch
	dash  bool
}

// drawLegend lays legend entries out left to right from (x, y), wrapping
// within width w, and returns the height used. With a nil figure it only
// measures.
func drawLegend(f *figure, fs *fontSet, es []legendEntry, x, y, w float64) float64 {
	if len(es) == 0 {
		return 0
	}
	const rowH, sw = legendRowH, 22.0
	cx, cy := x, y
	for _, e := range es {
		label := fs.truncate(e.label, sizeLegend, false, math.Max(20, w-sw-16))
		ew := sw + 6 + fs.width(label, sizeLegend, false) + 18
		if cx > x && cx+ew > x+w {
			cx, cy = x, cy+rowH
		}
		my := cy + rowH/2
		if f == nil {
			cx += ew
			continue
		}
		switch e.kind {
		case swatchBox:
			f.fillRect(cx+4, my-6, 14, 12, e.col)
		case swatchDot:
			f.dot(cx+sw/2, my, 3.5, e.col)
		case swatchErrorBar:
			mx := cx + sw/2
			f.polyline([]point{{mx, my - 7}, {mx, my + 7}}, e.col, 1.5, false)
			f.polyline([]point{{mx - 5, my - 7}, {mx + 5, my - 7}}, e.col, 1.5, false)
			f.polyline([]point{{mx - 5, my + 7}, {mx + 5, my + 7}}, e.col, 1.5, false)
		default:
			f.polyline([]point{{cx, my}, {cx + sw, my}}, e.col, 2.5, e.dash)
		}
		f.text(cx+sw+6, my+4, label, textStyle{size: sizeLegend, color: colText})
		cx += ew
	}
	return cy - y + rowH
}

// plotRect is the data area of a chart in pixels.
type plotRect struct{ x0, y0, x1, y1 float64 }

// px maps a value on the x axis to a pixel column.
func (r plotRect) px(a *axis, v float64) float64 { return r.x0 + a.frac(v)*(r.x1-r.x0) }

// py maps a value on the y axis to a pixel row.
func (r plotRect) py(a *axis, v float64) float64 { return r.y1 - a.frac(v)*(r.y1-r.y0) }

// yTickWidth returns the width of the widest y tick label.
func yTickWidth(fs *fontSet, a *axis) float64 {
	w := 0.0
	for _, l := range a.labels {
		w = math.Max(w, fs.width(l, sizeTick, false))
	}
	return w
}

// axisTitle returns the axis title with a note when the scale is logarithmic.
func axisTitle(a *axis) string {
	if a.isLog() {
		return a.title + " — log scale"
	}
	return a.title
}

// drawYAxis draws horizontal grid lines, y tick labels and the rotated y
// title for a chart whose panel starts at px.
func drawYAxis(f *figure, fs *fontSet, r plotRect, a *axis, px float64) {
	for i, t := range a.ticks {
		y := r.py(a, t)
		if y < r.y0-0.5 || y > r.y1+0.5 {
			continue
		}
		f.hline(r.x0, r.x1, y, colGrid)
		f.hline(r.x0-5, r.x0, y, colAxis)
		f.text(r.x0-8, y+4, fs.truncate(a.labels[i], sizeTick, false, 120), textStyle{size: sizeTick, anchor: anchorEnd, color: colText})
	}
	f.vline(r.x0, r.y0, r.y1+1, colAxis)
	title := fs.truncate(axisTitle(a), sizeAxis, false, r.y1-r.y0+40)
	f.text(px+20, (r.y0+r.y1)/2, title, textStyle{size: sizeAxis, anchor: anchorMiddle, vertical: true, color: colText})
}

// drawXAxis draws vertical grid lines, x tick labels and the x title.
func drawXAxis(f *figure, r plotRect, a *axis) {
	for i, t := range a.ticks {
		x := r.px(a, t)
		if x < r.x0-0.5 || x > r.x1+0.5 {
			continue
		}
		f.vline(x, r.y0, r.y1, colGrid)
		f.vline(x, r.y1, r.y1+5, colAxis)
		f.text(x, r.y1+19, a.labels[i], textStyle{size: sizeTick, anchor: anchorMiddle, color: colText})
	}
	f.hline(r.x0, r.x1+1, r.y1, colAxis)
	f.text((r.x0+r.x1)/2, r.y1+40, axisTitle(a), textStyle{size: sizeAxis, anchor: anchorMiddle, color: colText})
}

// drawPanelTitle draws the panel frame and title and returns the y below them.
func drawPanelTitle(f *figure, fs *fontSet, title string, x, y, w, h float64) float64 {
	f.frame(x, y, w, h, colPanel)
	f.text(x+14, y+24, fs.truncate(title, sizePanel, true, w-28), textStyle{size: sizePanel, bold: true, color: colText})
	return y + 34
}

// xy is one data point; lo and hi are the ends of its error bar when err is set.
type xy struct {
	x, y   float64
	lo, hi float64
	err    bool
}

// series is one line of an xyChart.
type series struct {
	name    string
	col     color.NRGBA
	dash    bool
	lines   bool // connect consecutive points
	markers bool // draw a dot at each point
	radius  float64
	pts     []xy
	legend  bool // show in the legend
	kind    swatch
	dx      float64 // horizontal offset in pixels (to set points beside others)
}

// xyChart is a line/scatter chart with numeric axes.
type xyChart struct {
	title  string
	x, y   axis
	series []series
	extra  []legendEntry // legend entries not tied to a series
}

// plotInset returns the offsets of the plot area from the panel's left and
// right edges: room for the y title and tick labels, and a right margin.
func plotInset(fs *fontSet, a *axis) (left, right float64) {
	return 34 + math.Min(yTickWidth(fs, a), 120), 20
}

// legend returns the chart's legend entries.
func (c *xyChart) legend() []legendEntry {
	var es []legendEntry
	for _, s := range c.series {
		if s.legend {
			es = append(es, legendEntry{label: s.name, col: s.col, kind: s.kind, dash: s.dash})
		}
	}
	return append(es, c.extra...)
}

// height returns the panel height, grown for a legend of several rows.
func (c *xyChart) height(fs *fontSet, w float64) float64 {
	l, r := plotInset(fs, &c.y)
	return heightWithLegend(fs, c.legend(), w-l-r)
}

// draw renders the chart into the panel rectangle.
func (c *xyChart) draw(f *figure, fs *fontSet, x, y, w, h float64) {
	top := drawPanelTitle(f, fs, c.title, x, y, w, h)
	l, rm := plotInset(fs, &c.y)
	left := x + l
	lh := drawLegend(f, fs, c.legend(), left, top, w-l-rm)
	r := plotRect{x0: left, y0: top + lh + 8, x1: x + w - rm, y1: y + h - 54}
	drawYAxis(f, fs, r, &c.y, x)
	drawXAxis(f, r, &c.x)
	for _, s := range c.series {
		c.drawSeries(f, r, s)
	}
}

// drawSeries draws one series' error bars, lines and markers inside r.
func (c *xyChart) drawSeries(f *figure, r plotRect, s series) {
	px := func(v float64) float64 { return math.Max(r.x0, math.Min(r.x1, r.px(&c.x, v)+s.dx)) }
	py := func(v float64) float64 { return math.Max(r.y0, math.Min(r.y1, r.py(&c.y, v))) }
	// Error bars first, so that lines and markers stay on top.
	for _, p := range s.pts {
		if !p.err || !c.x.valid(p.x) || !c.y.valid(p.lo) || !c.y.valid(p.hi) {
			continue
		}
		x, ylo, yhi := px(p.x), py(p.lo), py(p.hi)
		f.polyline([]point{{x, ylo}, {x, yhi}}, s.col, 1.5, false)
		f.polyline([]point{{x - 5, ylo}, {x + 5, ylo}}, s.col, 1.5, false)
		f.polyline([]point{{x - 5, yhi}, {x + 5, yhi}}, s.col, 1.5, false)
	}
	// Lines, broken where values cannot be drawn (gaps, zeros on log axes).
	var run []point
	flush := func() {
		if s.lines && len(run) >= 2 {
			f.polyline(run, s.col, 2, s.dash)
		} else if len(run) == 1 && !s.markers {
			f.dot(run[0].x, run[0].y, 2.5, s.col) // an isolated point would otherwise vanish
		}
		run = nil
	}
	for _, p := range s.pts {
		if !c.x.valid(p.x) || !c.y.valid(p.y) {
			flush()
			continue
		}
		run = append(run, point{px(p.x), py(p.y)})
	}
	flush()
	if !s.markers {
		return
	}
	rad := s.radius
	if rad <= 0 {
		rad = 3
	}
	for _, p := range s.pts {
		if c.x.valid(p.x) && c.y.valid(p.y) {
			f.dot(px(p.x), py(p.y), rad, s.col)
		}
	}
}

// barGroup is one bar per category, in one colour.
type barGroup struct {
	name string
	col  color.NRGBA
	cols []color.NRGBA // optional colour per category, overriding col
	vals []float64
}

// barChart draws grouped vertical bars, one group of bars per category.
type barChart struct {
	title       string
	cats        []string
	subs        []string // optional second label line per category
	groups      []barGroup
	y           axis
	valueLabels bool
}

// legend returns the chart's legend entries (none for a single group).
func (c *barChart) legend() []legendEntry {
	var es []legendEntry
	if len(c.groups) > 1 {
		for _, g := range c.groups {
			es = append(es, legendEntry{label: g.name, col: g.col, kind: swatchBox})
		}
	}
	return es
}

// height returns the panel height, grown for a legend of several rows.
func (c *barChart) height(fs *fontSet, w float64) float64 {
	l, r := plotInset(fs, &c.y)
	return heightWithLegend(fs, c.legend(), w-l-r)
}

// draw renders the chart into the panel rectangle.
func (c *barChart) draw(f *figure, fs *fontSet, x, y, w, h float64) {
	top := drawPanelTitle(f, fs, c.title, x, y, w, h)
	l, rm := plotInset(fs, &c.y)
	left := x + l
	lh := drawLegend(f, fs, c.legend(), left, top, w-l-rm)
	r := plotRect{x0: left, y0: top + lh + 8, x1: x + w - rm, y1: y + h - 54}
	drawYAxis(f, fs, r, &c.y, x)
	f.hline(r.x0, r.x1+1, r.y1, colAxis)
	n := len(c.cats)
	if n == 0 {
		return
	}
	band := (r.x1 - r.x0) / float64(n)
	inner := math.Min(band*0.75, 70*float64(max(1, len(c.groups))))
	bw := inner / float64(max(1, len(c.groups)))
	base := r.py(&c.y, c.y.base())
	for i, cat := range c.cats {
		cx := r.x0 + band*(float64(i)+0.5)
		f.text(cx, r.y1+18, fs.truncate(cat, sizeTick, true, band-6), textStyle{size: sizeTick, bold: true, anchor: anchorMiddle, color: colText})
		if i < len(c.subs) {
			f.text(cx, r.y1+34, fs.truncate(c.subs[i], sizeValue, false, band-6), textStyle{size: sizeValue, anchor: anchorMiddle, color: colMuted})
		}
		for j, g := range c.groups {
			if i >= len(g.vals) || !c.y.valid(g.vals[i]) {
				continue
			}
			v := g.vals[i]
			bx := cx - inner/2 + float64(j)*bw
			top := math.Max(r.y0, math.Min(base, r.py(&c.y, v)))
			if v > 0 && base-top < 1 {
				top = base - 1
			}
			col := g.col
			if i < len(g.cols) {
				col = g.cols[i]
			}
			f.fillRect(bx+1, top, bw-2, base-top, col)
			if c.valueLabels {
				label := fmtValue(v)
				if fs.width(label, sizeValue, false) <= bw+8 {
					f.text(bx+bw/2, top-5, label, textStyle{size: sizeValue, anchor: anchorMiddle, color: colText})
				}
			}
		}
	}
}

// messagePanel is a chart placeholder that only shows a message.
type messagePanel struct {
	title, msg string
}

// height returns the placeholder's height.
func (c *messagePanel) height(*fontSet, float64) float64 { return panelH / 2 }

// draw renders the placeholder into the panel rectangle.
func (c *messagePanel) draw(f *figure, fs *fontSet, x, y, w, h float64) {
	drawPanelTitle(f, fs, c.title, x, y, w, h)
	f.text(x+w/2, y+h/2+6, fs.truncate(c.msg, sizeAxis, false, w-40), textStyle{size: sizeAxis, anchor: anchorMiddle, color: colMuted})
}
