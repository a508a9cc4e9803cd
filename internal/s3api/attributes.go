package s3api

import (
	"encoding/xml"
	"net/http"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/sse"
)

// checksumFields are the per-algorithm checksum elements of S3 documents (ListParts parts,
// GetObjectAttributes): the one of the stored algorithm is set.
type checksumFields struct {
	ChecksumCRC32     string `xml:",omitempty"`
	ChecksumCRC32C    string `xml:",omitempty"`
	ChecksumCRC64NVME string `xml:",omitempty"`
	ChecksumSHA1      string `xml:",omitempty"`
	ChecksumSHA256    string `xml:",omitempty"`
}

// set fills the field of algorithm algo with sum (nothing for an unknown or empty algo).
func (c *checksumFields) set(algo, sum string) {
	switch algo {
	case "CRC32":
		c.ChecksumCRC32 = sum
	case "CRC32C":
		c.ChecksumCRC32C = sum
	case "CRC64NVME":
		c.ChecksumCRC64NVME = sum
	case "SHA1":
		c.ChecksumSHA1 = sum
	case "SHA256":
		c.ChecksumSHA256 = sum
	}
}

// objectAttributes are the names x-amz-object-attributes may list.
var objectAttributes = []string{"ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"}

// getObjectAttributes answers GetObjectAttributes: the attributes the client names in
// x-amz-object-attributes, read from the object's record (no body is read). ObjectParts
// lists the parts of an object made by a multipart upload, paged by x-amz-max-parts
// (default and at most 1000) and x-amz-part-number-marker; cairn lists them for every
// multipart object, with each part's checksum when the upload had one.
func (h *Handler) getObjectAttributes(w http.ResponseWriter, r *http.Request, rq *request) error {
	want := map[string]bool{}
	for _, v := range r.Header.Values("X-Amz-Object-Attributes") {
		for _, a := range strings.Split(v, ",") {
			a = strings.TrimSpace(a)
			if !oneOf(objectAttributes, a) {
				return errf(400, "InvalidArgument", "Invalid attribute name specified: %q (one of %s).", a, strings.Join(objectAttributes, ", "))
			}
			want[a] = true
		}
	}
	if len(want) == 0 {
		return errf(400, "InvalidArgument", "The x-amz-object-attributes header specifying the attributes to be retrieved is either missing or empty.")
	}
	maxParts, err := intParam(r.Header.Get("X-Amz-Max-Parts"), 1000, 1000, "x-amz-max-parts")
	if err != nil {
		return err
	}
	marker, err := intParam(r.Header.Get("X-Amz-Part-Number-Marker"), 0, 10000, "x-amz-part-number-marker")
	if err != nil {
		return err
	}
	o, err := h.statRequested(w, r, rq)
	if err != nil {
		return err
	}
	if o.SSE.Algorithm == sse.Customer || r.Header.Get(hdCustomer+"Algorithm") != "" {
		if _, err := h.dataKey(r.Header, r.TLS != nil, hdCustomer, rq.bucket, rq.key, o); err != nil {
			return err // an SSE-C object's attributes need its key, as S3 requires
		}
	}
	type checksum struct {
		checksumFields
		ChecksumType string `xml:",omitempty"`
	}
	type part struct {
		checksumFields
		PartNumber int
		Size       int64
	}
	type parts struct {
		IsTruncated          bool
		MaxParts             int
		NextPartNumberMarker int
		PartNumberMarker     int
		Parts                []part `xml:"Part"`
		PartsCount           int
	}
	res := struct {
		XMLName      xml.Name `xml:"GetObjectAttributesResponse"`
		Xmlns        string   `xml:"xmlns,attr"`
		ETag         string   `xml:",omitempty"`
		Checksum     *checksum
		ObjectParts  *parts
		StorageClass string `xml:",omitempty"`
		ObjectSize   *int64
	}{Xmlns: xmlns}
	if want["ETag"] {
		res.ETag = o.ETag // unquoted, as S3 sends it here
	}
	if want["Checksum"] && o.ChecksumAlgo != "" {
		res.Checksum = &checksum{ChecksumType: o.ChecksumType}
		res.Checksum.set(o.ChecksumAlgo, o.Checksum)
	}
	if sizes := plainPartSizes(o); want["ObjectParts"] && len(sizes) > 0 {
		ps := &parts{MaxParts: maxParts, PartNumberMarker: marker, PartsCount: len(sizes)}
		for i := marker; i < len(sizes); i++ {
			if len(ps.Parts) == maxParts {
				ps.IsTruncated = true
				break
			}
			p := part{PartNumber: i + 1, Size: sizes[i]}
			if i < len(o.PartChecksums) {
				p.set(o.ChecksumAlgo, o.PartChecksums[i])
			}
			ps.Parts = append(ps.Parts, p)
			ps.NextPartNumberMarker = i + 1
		}
		res.ObjectParts = ps
	}
	if want["StorageClass"] {
		res.StorageClass = storageClass(o)
	}
	if want["ObjectSize"] {
		size := plainSize(o)
		res.ObjectSize = &size
	}
	w.Header().Set("Last-Modified", time.Unix(0, o.ModTime).UTC().Format(http.TimeFormat))
	return writeXML(w, res)
}
