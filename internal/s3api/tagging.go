package s3api

import (
	"encoding/json"
	"encoding/xml"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
)

// Tag sets (S3 object and bucket tagging): parsing of the Tagging document and of the
// x-amz-tagging header, S3's limits, and the six tagging operations. A tag set is kept as
// [][2]string sorted by key (object.Object.Tags; a bucket's in its configuration, see
// docs/design/tagging.md).

// S3's tagging limits.
const (
	maxObjectTags = 10
	maxBucketTags = 50
	maxTagKey     = 128 // Unicode characters
	maxTagValue   = 256
	// maxTaggingXML bounds a Tagging document: 50 tags of the longest keys and values,
	// four bytes a character, with room for markup and whitespace.
	maxTaggingXML = 128 << 10
)

// Tagging errors, as S3 words them.
var (
	errTooManyObjectTags = &apiError{"InvalidTag", "Object tags cannot be greater than 10", 400}
	errTooManyBucketTags = &apiError{"InvalidTag", "Bucket tag count cannot be greater than 50", 400}
	errTagKey            = &apiError{"InvalidTag", "The TagKey you have provided is invalid", 400}
	errTagValue          = &apiError{"InvalidTag", "The TagValue you have provided is invalid", 400}
	errTagDuplicate      = &apiError{"InvalidTag", "Cannot provide multiple Tags with the same key", 400}
	errTagReserved       = &apiError{"InvalidTag", "Your TagKey cannot be prefixed with aws:", 400}
	errTaggingHeader     = &apiError{"InvalidArgument", "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates.", 400}
	errTaggingDirective  = &apiError{"InvalidArgument", "Unknown tagging directive.", 400}
	errNoSuchTagSet      = &apiError{"NoSuchTagSet", "The TagSet does not exist", 404}
)

// checkTags applies S3's rules to a tag set given by a user (max tags at most) and
// returns it sorted by key (in place: the caller owns tags). Duplicate keys are errDup's
// error.
func checkTags(tags [][2]string, max int, errDup *apiError) ([][2]string, error) {
	if len(tags) > max {
		if max == maxBucketTags {
			return nil, errTooManyBucketTags
		}
		return nil, errTooManyObjectTags
	}
	for _, kv := range tags {
		k, v := kv[0], kv[1]
		if k == "" || !utf8.ValidString(k) || utf8.RuneCountInString(k) > maxTagKey {
			return nil, errTagKey
		}
		if !utf8.ValidString(v) || utf8.RuneCountInString(v) > maxTagValue {
			return nil, errTagValue
		}
		if strings.HasPrefix(k, "aws:") {
			return nil, errTagReserved
		}
	}
	slices.SortStableFunc(tags, func(a, b [2]string) int { return strings.Compare(a[0], b[0]) })
	for i := 1; i < len(tags); i++ {
		if tags[i][0] == tags[i-1][0] {
			return nil, errDup
		}
	}
	if len(tags) == 0 {
		return nil, nil
	}
	return tags, nil
}

// taggingDoc is the Tagging document of PutObjectTagging and PutBucketTagging.
type taggingDoc struct {
	XMLName xml.Name `xml:"Tagging"`
	TagSet  *struct {
		Tags []struct {
			Key   *string `xml:"Key"`
			Value *string `xml:"Value"`
		} `xml:"Tag"`
	} `xml:"TagSet"`
}

// parseTagging parses a Tagging document and checks its tags (max at most). A document
// that is not one (another root, no TagSet, a Tag without Key or Value) is MalformedXML.
func parseTagging(data []byte, max int) ([][2]string, error) {
	var doc taggingDoc
	if err := xml.Unmarshal(data, &doc); err != nil || doc.TagSet == nil {
		return nil, errMalformedXML
	}
	tags := make([][2]string, 0, len(doc.TagSet.Tags))
	for _, t := range doc.TagSet.Tags {
		if t.Key == nil || t.Value == nil {
			return nil, errMalformedXML
		}
		tags = append(tags, [2]string{*t.Key, *t.Value})
	}
	return checkTags(tags, max, errTagDuplicate)
}

// parseTaggingHeader parses x-amz-tagging: URL-query-encoded key=value pairs ("k" alone
// is a tag with an empty value), checked as object tags.
func parseTaggingHeader(v string) ([][2]string, error) {
	if v == "" {
		return nil, nil
	}
	tags := make([][2]string, 0, min(strings.Count(v, "&")+1, maxObjectTags+1))
	for v != "" {
		var part string
		part, v, _ = strings.Cut(v, "&")
		if part == "" {
			continue
		}
		k, val, _ := strings.Cut(part, "=")
		k, kerr := unescapeQuery(k)
		val, verr := unescapeQuery(val)
		if kerr != nil || verr != nil || !utf8.ValidString(k) || !utf8.ValidString(val) {
			return nil, errTaggingHeader
		}
		tags = append(tags, [2]string{k, val})
		if len(tags) > maxObjectTags {
			return nil, errTooManyObjectTags
		}
	}
	return checkTags(tags, maxObjectTags, errTaggingHeader)
}

// unescapeQuery is url.QueryUnescape without its copy when there is nothing to unescape.
func unescapeQuery(s string) (string, error) {
	if !strings.ContainsAny(s, "%+") {
		return s, nil
	}
	return url.QueryUnescape(s)
}

// writeTagging answers a tag set as a Tagging document.
func writeTagging(w http.ResponseWriter, tags [][2]string) error {
	x := newXMLWriter()
	x.open("Tagging", `xmlns="`+xmlns+`"`)
	x.open("TagSet", "")
	for _, kv := range tags {
		x.open("Tag", "")
		x.elem("Key", kv[0])
		x.elem("Value", kv[1])
		x.close("Tag")
	}
	x.close("TagSet")
	x.close("Tagging")
	return x.send(w)
}

// setTaggingCount sets x-amz-tagging-count on a GET or HEAD of an object with tags.
func setTaggingCount(hd http.Header, o *object.Object) {
	if len(o.Tags) > 0 {
		hd.Set("x-amz-tagging-count", strconv.Itoa(len(o.Tags)))
	}
}

// copyTags returns the tags of a copy: the source's (x-amz-tagging-directive COPY, the
// default) or those of the request's x-amz-tagging (REPLACE).
func copyTags(hd http.Header, src *object.Object) ([][2]string, error) {
	switch hd.Get("x-amz-tagging-directive") {
	case "", "COPY":
		return src.Tags, nil
	case "REPLACE":
		return parseTaggingHeader(hd.Get("x-amz-tagging"))
	}
	return nil, errTaggingDirective
}

func (h *Handler) getObjectTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	o, err := h.statRequested(w, r, rq)
	if err != nil {
		return err
	}
	return writeTagging(w, o.Tags)
}

func (h *Handler) putObjectTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	data, err := readBody(r, rq, maxTaggingXML)
	if err != nil {
		return err
	}
	tags, err := parseTagging(data, maxObjectTags)
	if err != nil {
		return err
	}
	if err := h.setTags(w, r, rq, tags); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// setTags replaces the tag set of the version the request names (the current one if
// none).
func (h *Handler) setTags(w http.ResponseWriter, r *http.Request, rq *request, tags [][2]string) error {
	if len(tags) == 0 {
		tags = nil
	}
	if _, ok := r.URL.Query()["versionId"]; !ok {
		_, err := h.store.SetObjectTags(r.Context(), rq.bucket, rq.key, tags)
		return err
	}
	o, err := h.statRequested(w, r, rq)
	if err != nil {
		return err
	}
	_, err = h.store.ChangeMeta(r.Context(), rq.bucket, rq.key, o.HLC, gateway.MetaChange{Tags: &tags})
	return err
}

func (h *Handler) deleteObjectTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := h.setTags(w, r, rq, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// bucketTagsKind is the kind of bucket configuration (object.Bucket.Config) that holds a
// bucket's tag set: the JSON of the sorted [][2]string, e.g. [["env","prod"]].
const bucketTagsKind = "tagging"

func (h *Handler) putBucketTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	data, err := readBody(r, rq, maxTaggingXML)
	if err != nil {
		return err
	}
	tags, err := parseTagging(data, maxBucketTags)
	if err != nil {
		return err
	}
	var doc []byte // an empty tag set: no tag set, as after DeleteBucketTagging
	if len(tags) > 0 {
		doc, _ = json.Marshal(tags)
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, bucketTagsKind, doc); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) getBucketTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	doc, ok := b.Config[bucketTagsKind]
	if !ok || doc == "" {
		return errNoSuchTagSet
	}
	var tags [][2]string
	if err := json.Unmarshal([]byte(doc), &tags); err != nil {
		return errf(500, "InternalError", "The bucket's stored tag set is malformed: %v", err)
	}
	return writeTagging(w, tags)
}

func (h *Handler) deleteBucketTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, bucketTagsKind, nil); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
