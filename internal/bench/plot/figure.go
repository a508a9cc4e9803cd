package plot

import (
	"image/color"
	"math"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
)

// A figure is a backend-neutral display list: the charts are laid out once
// into primitives in pixel coordinates (origin top left, y down), which the
// SVG writer and the PNG rasteriser then render identically.
type figure struct {
	w, h  float64
	title string // accessible name of the whole figure
	prims []prim
}

// point is a position in pixels.
type point struct{ x, y float64 }

// anchor is the horizontal alignment of a text relative to its position.
type anchor int

const (
	anchorStart anchor = iota
	anchorMiddle
	anchorEnd
)

// textStyle describes how a text primitive is drawn. A vertical text reads
// bottom to top (rotated 90° counter-clockwise around its position).
type textStyle struct {
	size     float64
	bold     bool
	anchor   anchor
	vertical bool
	color    color.NRGBA
}

type primKind int

const (
	primRect     primKind = iota // filled axis-aligned rectangle x, y, w, h
	primPolyline                 // open polyline pts, stroke width, optionally dashed
	primCircle                   // filled disc centred on x, y with radius w
	primText                     // text whose baseline starts/centres/ends at x, y
)

// prim is one drawing primitive.
type prim struct {
	kind       primKind
	x, y, w, h float64
	pts        []point
	col        color.NRGBA
	width      float64
	dash       bool
	text       string
	style      textStyle
}

// fillRect adds a filled rectangle.
func (f *figure) fillRect(x, y, w, h float64, c color.NRGBA) {
	if w <= 0 || h <= 0 {
		return
	}
	f.prims = append(f.prims, prim{kind: primRect, x: x, y: y, w: w, h: h, col: c})
}

// hline adds a crisp one-pixel horizontal line.
func (f *figure) hline(x0, x1, y float64, c color.NRGBA) {
	f.fillRect(x0, math.Floor(y), x1-x0, 1, c)
}

// vline adds a crisp one-pixel vertical line.
func (f *figure) vline(x, y0, y1 float64, c color.NRGBA) {
	f.fillRect(math.Floor(x), y0, 1, y1-y0, c)
}

// frame adds a one-pixel rectangle outline.
func (f *figure) frame(x, y, w, h float64, c color.NRGBA) {
	f.hline(x, x+w, y, c)
	f.hline(x, x+w, y+h-1, c)
	f.vline(x, y, y+h, c)
	f.vline(x+w-1, y, y+h, c)
}

// polyline adds a stroked open path.
func (f *figure) polyline(pts []point, c color.NRGBA, width float64, dash bool) {
	if len(pts) < 2 {
		return
	}
	f.prims = append(f.prims, prim{kind: primPolyline, pts: pts, col: c, width: width, dash: dash})
}

// dot adds a filled disc.
func (f *figure) dot(x, y, r float64, c color.NRGBA) {
	f.prims = append(f.prims, prim{kind: primCircle, x: x, y: y, w: r, col: c})
}

// text adds a text label.
func (f *figure) text(x, y float64, s string, st textStyle) {
	if s == "" {
		return
	}
	f.prims = append(f.prims, prim{kind: primText, x: x, y: y, text: s, style: st})
}

// fonts are the parsed Go fonts used for measuring and rasterising text.
// The SVG output names the same family first, so layouts match closely.
var fonts = sync.OnceValues(func() ([2]*opentype.Font, error) {
	var fs [2]*opentype.Font
	var err error
	if fs[0], err = opentype.Parse(goregular.TTF); err != nil {
		return fs, err
	}
	fs[1], err = opentype.Parse(gobold.TTF)
	return fs, err
})

type faceKey struct {
	size float64
	bold bool
}

// fontSet hands out font faces by size; faces are not safe for concurrent
// use, so each rendering owns its own fontSet.
type fontSet struct {
	fonts [2]*opentype.Font
	faces map[faceKey]font.Face
}

// newFontSet returns a fontSet backed by the embedded Go fonts.
func newFontSet() (*fontSet, error) {
	fs, err := fonts()
	if err != nil {
		return nil, err
	}
	return &fontSet{fonts: fs, faces: map[faceKey]font.Face{}}, nil
}

// face returns the face for a pixel size and weight.
func (s *fontSet) face(size float64, bold bool) font.Face {
	k := faceKey{size, bold}
	if f, ok := s.faces[k]; ok {
		return f
	}
	i := 0
	if bold {
		i = 1
	}
	f, err := opentype.NewFace(s.fonts[i], &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		// Only possible for nonsensical sizes; fall back to the default size.
		f, _ = opentype.NewFace(s.fonts[i], &opentype.FaceOptions{Size: 12, DPI: 72, Hinting: font.HintingFull})
	}
	s.faces[k] = f
	return f
}

// width returns the advance width of s in pixels.
func (s *fontSet) width(text string, size float64, bold bool) float64 {
	return float64(font.MeasureString(s.face(size, bold), text)) / 64
}

// truncate shortens text with an ellipsis so that it fits in maxWidth pixels.
func (s *fontSet) truncate(text string, size float64, bold bool, maxWidth float64) string {
	if s.width(text, size, bold) <= maxWidth {
		return text
	}
	r := []rune(text)
	lo, hi := 0, len(r) // binary search for the longest prefix that fits
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if s.width(string(r[:mid])+"…", size, bold) <= maxWidth {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo == 0 {
		return ""
	}
	return string(r[:lo]) + "…"
}
