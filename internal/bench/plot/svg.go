package plot

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
)

// svgFontFamily lists Go (the font the layout was measured with) first.
const svgFontFamily = "Go, 'Go Regular', 'DejaVu Sans', Helvetica, Arial, sans-serif"

// num formats a coordinate for SVG: at most two decimals, never NaN or Inf.
func num(v float64) string {
	if !finite(v) {
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

// hexColor formats the RGB part of c as #rrggbb.
func hexColor(c color.NRGBA) string {
	return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B)
}

// svgWriter accumulates the first write error so the drawing code stays linear.
type svgWriter struct {
	w   *bufio.Writer
	err error
}

func (s *svgWriter) str(v string) {
	if s.err == nil {
		_, s.err = s.w.WriteString(v)
	}
}

// escaped writes text with XML special characters escaped.
func (s *svgWriter) escaped(v string) {
	if s.err == nil {
		s.err = xml.EscapeText(s.w, []byte(v))
	}
}

// paint writes a fill or stroke colour attribute, with opacity if needed.
func (s *svgWriter) paint(attr string, c color.NRGBA) {
	s.str(" " + attr + `="` + hexColor(c) + `"`)
	if c.A != 0xff {
		s.str(" " + attr + `-opacity="` + num(float64(c.A)/255) + `"`)
	}
}

// writeSVG writes f as an SVG document. standalone adds the XML declaration
// and namespace needed for a .svg file; inline SVG in HTML needs neither.
func writeSVG(w io.Writer, f *figure, standalone bool) error {
	s := &svgWriter{w: bufio.NewWriter(w)}
	if standalone {
		s.str(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
		s.str(`<svg xmlns="http://www.w3.org/2000/svg"`)
	} else {
		s.str(`<svg`)
	}
	s.str(` width="` + num(f.w) + `" height="` + num(f.h) + `" viewBox="0 0 ` + num(f.w) + " " + num(f.h) + `"`)
	s.str(` role="img" font-family="` + svgFontFamily + `">` + "\n")
	s.str("<title>")
	s.escaped(f.title)
	s.str("</title>\n")
	for _, p := range f.prims {
		switch p.kind {
		case primRect:
			s.str(`<rect x="` + num(p.x) + `" y="` + num(p.y) + `" width="` + num(p.w) + `" height="` + num(p.h) + `"`)
			s.paint("fill", p.col)
			s.str("/>\n")
		case primCircle:
			s.str(`<circle cx="` + num(p.x) + `" cy="` + num(p.y) + `" r="` + num(p.w) + `"`)
			s.paint("fill", p.col)
			s.str("/>\n")
		case primPolyline:
			s.str(`<polyline fill="none" points="`)
			for i, pt := range p.pts {
				if i > 0 {
					s.str(" ")
				}
				s.str(num(pt.x) + "," + num(pt.y))
			}
			s.str(`"`)
			s.paint("stroke", p.col)
			s.str(` stroke-width="` + num(p.width) + `" stroke-linejoin="round" stroke-linecap="round"`)
			if p.dash {
				s.str(` stroke-dasharray="` + num(dashOn) + " " + num(dashOff+p.width) + `"`)
			}
			s.str("/>\n")
		case primText:
			st := p.style
			s.str(`<text x="` + num(p.x) + `" y="` + num(p.y) + `" font-size="` + num(st.size) + `"`)
			switch st.anchor {
			case anchorMiddle:
				s.str(` text-anchor="middle"`)
			case anchorEnd:
				s.str(` text-anchor="end"`)
			}
			if st.bold {
				s.str(` font-weight="bold"`)
			}
			if st.vertical {
				s.str(` transform="rotate(-90 ` + num(p.x) + " " + num(p.y) + `)"`)
			}
			s.paint("fill", st.color)
			s.str(">")
			s.escaped(p.text)
			s.str("</text>\n")
		}
	}
	s.str("</svg>\n")
	if s.err != nil {
		return s.err
	}
	return s.w.Flush()
}
