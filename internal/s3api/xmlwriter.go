package s3api

import (
	"bytes"
	"encoding/xml"
	"io"
	"net/http"
	"strconv"
	"time"
)

// xmlWriter builds an XML document without reflection, for responses whose size grows with
// the page (listings): encoding/xml.Marshal spent half of a 1,000-key page's time.
type xmlWriter struct {
	buf bytes.Buffer
}

func newXMLWriter() *xmlWriter {
	x := &xmlWriter{}
	x.buf.Grow(64 << 10)
	x.buf.WriteString(xml.Header)
	return x
}

// open writes <name attrs>; attrs is written verbatim (callers pass constants).
func (x *xmlWriter) open(name, attrs string) {
	x.buf.WriteByte('<')
	x.buf.WriteString(name)
	if attrs != "" {
		x.buf.WriteByte(' ')
		x.buf.WriteString(attrs)
	}
	x.buf.WriteByte('>')
}

func (x *xmlWriter) close(name string) {
	x.buf.WriteString("</")
	x.buf.WriteString(name)
	x.buf.WriteByte('>')
}

// elem writes <name>text</name> with text escaped as encoding/xml does.
func (x *xmlWriter) elem(name, text string) {
	x.open(name, "")
	xml.EscapeText(&x.buf, []byte(text))
	x.close(name)
}

func (x *xmlWriter) elemInt(name string, v int64) {
	x.open(name, "")
	x.buf.Write(strconv.AppendInt(x.buf.AvailableBuffer(), v, 10))
	x.close(name)
}

func (x *xmlWriter) elemBool(name string, v bool) {
	x.open(name, "")
	x.buf.Write(strconv.AppendBool(x.buf.AvailableBuffer(), v))
	x.close(name)
}

func (x *xmlWriter) elemTime(name string, t time.Time) {
	x.open(name, "")
	x.buf.Write(t.UTC().AppendFormat(x.buf.AvailableBuffer(), s3Time))
	x.close(name)
}

// send writes the document as a 200 response.
func (x *xmlWriter) send(w http.ResponseWriter) error {
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(x.buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, err := io.Copy(w, &x.buf)
	return err
}
