package plot

import (
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// Dash pattern of dashed lines, in pixels: the painted length and the gap
// between the round caps of consecutive dashes.
const (
	dashOn  = 7.0
	dashOff = 4.0
)

// rasterizer draws a figure onto an RGBA image with anti-aliased shapes.
type rasterizer struct {
	img *image.RGBA
	fs  *fontSet
	z   vector.Rasterizer
	// path collects closed polygons in image coordinates until fill.
	path [][]point
}

// writePNG rasterises f and encodes it as PNG.
func writePNG(w io.Writer, f *figure, fs *fontSet) error {
	img := renderImage(f, fs)
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	return enc.Encode(w, img)
}

// renderImage rasterises f onto a new white image.
func renderImage(f *figure, fs *fontSet) *image.RGBA {
	w, h := int(math.Ceil(f.w)), int(math.Ceil(f.h))
	ras := &rasterizer{img: image.NewRGBA(image.Rect(0, 0, max(1, w), max(1, h))), fs: fs}
	draw.Draw(ras.img, ras.img.Bounds(), image.White, image.Point{}, draw.Src)
	for _, p := range f.prims {
		switch p.kind {
		case primRect:
			ras.rect(p.x, p.y, p.w, p.h, p.col)
		case primCircle:
			ras.circle(p.x, p.y, p.w)
			ras.fill(p.col)
		case primPolyline:
			ras.stroke(p.pts, p.width, p.dash)
			ras.fill(p.col)
		case primText:
			ras.text(p.x, p.y, p.text, p.style)
		}
	}
	return ras.img
}

// rect fills a pixel-aligned rectangle (coordinates are rounded).
func (r *rasterizer) rect(x, y, w, h float64, c color.NRGBA) {
	if !finite(x) || !finite(y) || !finite(w) || !finite(h) {
		return
	}
	x0, y0 := int(math.Round(x)), int(math.Round(y))
	x1, y1 := int(math.Round(x+w)), int(math.Round(y+h))
	if x1 == x0 {
		x1++
	}
	if y1 == y0 {
		y1++
	}
	rr := image.Rect(x0, y0, x1, y1).Intersect(r.img.Bounds())
	draw.Draw(r.img, rr, image.NewUniform(c), image.Point{}, draw.Over)
}

// circle adds a disc to the current path. All polygons are wound the same
// way, so overlapping parts add up instead of cancelling out.
func (r *rasterizer) circle(cx, cy, rad float64) {
	n := max(12, int(rad*4))
	poly := make([]point, n)
	for i := range poly {
		a := -2 * math.Pi * float64(i) / float64(n)
		poly[i] = point{cx + rad*math.Cos(a), cy + rad*math.Sin(a)}
	}
	r.path = append(r.path, poly)
}

// segment adds a line from a to b of the given half width to the current
// path: a rectangle plus round caps.
func (r *rasterizer) segment(a, b point, hw float64) {
	dx, dy := b.x-a.x, b.y-a.y
	l := math.Hypot(dx, dy)
	if l > 1e-9 {
		nx, ny := -dy/l*hw, dx/l*hw
		r.path = append(r.path, []point{
			{a.x + nx, a.y + ny}, {b.x + nx, b.y + ny}, {b.x - nx, b.y - ny}, {a.x - nx, a.y - ny},
		})
	}
	r.circle(a.x, a.y, hw)
	r.circle(b.x, b.y, hw)
}

// stroke adds a polyline of the given width to the current path, split into
// dashes when dash is set.
func (r *rasterizer) stroke(pts []point, width float64, dash bool) {
	hw := width / 2
	if !dash {
		for i := 1; i < len(pts); i++ {
			r.segment(pts[i-1], pts[i], hw)
		}
		return
	}
	// Walk the path, alternating painted and blank stretches.
	on, left := true, dashOn
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		l := math.Hypot(b.x-a.x, b.y-a.y)
		pos := 0.0
		for pos < l {
			step := math.Min(left, l-pos)
			if on {
				t0, t1 := pos/l, (pos+step)/l
				r.segment(point{a.x + (b.x-a.x)*t0, a.y + (b.y-a.y)*t0}, point{a.x + (b.x-a.x)*t1, a.y + (b.y-a.y)*t1}, hw)
			}
			pos += step
			left -= step
			if left <= 1e-9 {
				on = !on
				left = dashOn
				if !on {
					left = dashOff + width
				}
			}
		}
	}
}

// fill paints the current path in colour c with anti-aliasing and clears it.
func (r *rasterizer) fill(c color.NRGBA) {
	defer func() { r.path = r.path[:0] }()
	minX, minY, maxX, maxY := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, poly := range r.path {
		for _, p := range poly {
			if !finite(p.x) || !finite(p.y) {
				return
			}
			minX, minY = math.Min(minX, p.x), math.Min(minY, p.y)
			maxX, maxY = math.Max(maxX, p.x), math.Max(maxY, p.y)
		}
	}
	bb := image.Rect(int(math.Floor(minX))-1, int(math.Floor(minY))-1, int(math.Ceil(maxX))+1, int(math.Ceil(maxY))+1)
	if minX > maxX {
		return
	}
	clip := bb.Intersect(r.img.Bounds())
	if clip.Empty() {
		return
	}
	// The rasterizer's origin is the clip rectangle's corner.
	ox, oy := float64(clip.Min.X), float64(clip.Min.Y)
	r.z.Reset(clip.Dx(), clip.Dy())
	for _, poly := range r.path {
		for i, p := range poly {
			x, y := float32(p.x-ox), float32(p.y-oy)
			if i == 0 {
				r.z.MoveTo(x, y)
			} else {
				r.z.LineTo(x, y)
			}
		}
		r.z.ClosePath()
	}
	r.z.DrawOp = draw.Over
	r.z.Draw(r.img, clip, image.NewUniform(c), image.Point{})
}

// text draws a label with its baseline at y, aligned on x by its anchor.
func (r *rasterizer) text(x, y float64, s string, st textStyle) {
	if !finite(x) || !finite(y) {
		return
	}
	face := r.fs.face(st.size, st.bold)
	w := r.fs.width(s, st.size, st.bold)
	shift := 0.0
	switch st.anchor {
	case anchorMiddle:
		shift = w / 2
	case anchorEnd:
		shift = w
	}
	src := image.NewUniform(st.color)
	if !st.vertical {
		d := font.Drawer{Dst: r.img, Src: src, Face: face, Dot: fixed.Point26_6{X: fixed.Int26_6(math.Round((x - shift) * 64)), Y: fixed.I(int(math.Round(y)))}}
		d.DrawString(s)
		return
	}
	// Vertical text: draw it horizontally into a mask, rotate the mask 90°
	// counter-clockwise and paint through it.
	m := face.Metrics()
	asc, desc := m.Ascent.Ceil(), m.Descent.Ceil()
	const pad = 2
	tw, th := int(math.Ceil(w))+2*pad, asc+desc+2*pad
	flat := image.NewAlpha(image.Rect(0, 0, tw, th))
	d := font.Drawer{Dst: flat, Src: image.Opaque, Face: face, Dot: fixed.P(pad, pad+asc)}
	d.DrawString(s)
	rot := image.NewAlpha(image.Rect(0, 0, th, tw))
	for v := 0; v < th; v++ {
		for u := 0; u < tw; u++ {
			rot.Pix[(tw-1-u)*rot.Stride+v] = flat.Pix[v*flat.Stride+u]
		}
	}
	// In the rotated mask the baseline is column pad+asc and the text
	// starts at row tw-1-pad, running upwards.
	ox := int(math.Round(x)) - (pad + asc)
	oy := int(math.Round(y+shift)) - (tw - 1 - pad)
	dst := image.Rect(ox, oy, ox+th, oy+tw)
	draw.DrawMask(r.img, dst, src, image.Point{}, rot, image.Point{}, draw.Over)
}
