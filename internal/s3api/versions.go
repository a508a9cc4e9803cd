package s3api

import (
	"net/http"
	"time"

	"github.com/cairnfs/cairn/internal/object"
)

// nullVersion is the version id of an object written while versioning was never enabled.
const nullVersion = "null"

// listObjectVersions answers ListObjectVersions. Buckets are not versioned (versioning
// cannot be enabled, GetBucketVersioning says so), so every object has exactly one
// version, S3's "null" version, which is the latest, and there are no delete markers: the
// listing is the bucket's listing in the versions' XML. Paging follows S3: key-marker
// starts after that key's versions, and version-id-marker (only "null" exists) needs a
// key-marker.
func (h *Handler) listObjectVersions(w http.ResponseWriter, r *http.Request, rq *request) error {
	q := r.URL.Query()
	max, err := maxKeys(q.Get("max-keys"))
	if err != nil {
		return err
	}
	enc, esc := listEncoding(q)
	keyMarker, vidMarker := q.Get("key-marker"), q.Get("version-id-marker")
	switch {
	case vidMarker != "" && keyMarker == "":
		return errf(400, "InvalidArgument", "A version-id marker cannot be specified without a key marker.")
	case vidMarker != "" && vidMarker != nullVersion:
		return errf(400, "InvalidArgument", "Invalid version id specified")
	}
	opts := object.ListOptions{Prefix: q.Get("prefix"), Delimiter: q.Get("delimiter"), Max: max, After: keyMarker}
	res, err := h.store.List(r.Context(), rq.bucket, opts)
	if err != nil {
		return err
	}
	x := newXMLWriter()
	x.open("ListVersionsResult", `xmlns="`+xmlns+`"`)
	x.elem("Name", rq.bucket)
	x.elem("Prefix", esc(opts.Prefix))
	x.elem("KeyMarker", esc(keyMarker))
	x.elem("VersionIdMarker", vidMarker)
	if res.Truncated {
		x.elem("NextKeyMarker", esc(res.Next))
		if n := len(res.Objects); n > 0 && res.Objects[n-1].Key == res.Next {
			x.elem("NextVersionIdMarker", nullVersion)
		}
	}
	x.elemInt("MaxKeys", int64(max))
	if opts.Delimiter != "" {
		x.elem("Delimiter", esc(opts.Delimiter))
	}
	if enc != "" {
		x.elem("EncodingType", enc)
	}
	x.elemBool("IsTruncated", res.Truncated)
	o := h.bucketOwner(rq)
	for _, e := range res.Objects {
		x.open("Version", "")
		x.elem("Key", esc(e.Key))
		x.elem("VersionId", nullVersion)
		x.elemBool("IsLatest", true)
		x.elemTime("LastModified", time.Unix(0, e.Object.ModTime))
		x.elem("ETag", quote(e.Object.ETag))
		x.elemInt("Size", e.Object.Size)
		x.elem("StorageClass", storageClass(e.Object))
		writeOwner(x, o)
		x.close("Version")
	}
	writePrefixes(x, res.CommonPrefixes, esc)
	x.close("ListVersionsResult")
	return x.send(w)
}
