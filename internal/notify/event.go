package notify

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Entry is one outbox entry: a committed change of one object, to be sent to one target.
// A store keeps it (encoded with Marshal) in the same synced batch as the record, so it
// exists exactly when the change committed. Field names are fixed: entries outlive the
// build that wrote them.
type Entry struct {
	Target    string `json:"t"`           // the target's name
	ConfigID  string `json:"c"`           // the matching rule's Id
	Event     string `json:"e"`           // the concrete event type, e.g. s3:ObjectCreated:Put
	Bucket    string `json:"b"`           // bucket
	Key       string `json:"k"`           // object key
	HLC       uint64 `json:"h"`           // the version's HLC: the sequencer
	Versioned bool   `json:"v,omitempty"` // the version has its own version id (else null)
	Size      int64  `json:"s,omitempty"`
	ETag      string `json:"et,omitempty"`
	ModTime   int64  `json:"m"` // the change's time, Unix nanoseconds
	Stacked   int64  `json:"q"` // when the entry was written, Unix nanoseconds
	// Change is the kind of change of a replication link's entry (target LinkTarget(link)):
	// ChangePut, ChangeDelete or ChangeMeta; empty for a notification.
	Change string `json:"x,omitempty"`
	// Marker and Purged are a link entry's deletion flags (a delete marker, the purge of
	// version HLC).
	Marker bool `json:"dm,omitempty"`
	Purged bool `json:"p,omitempty"`
	// Origin is a link entry's origin: the id of the linked cluster the change was
	// replicated from (object.Object.Origin; empty for a change made in this cluster, and
	// in entries written before it). The change is not sent back to that cluster.
	Origin string `json:"o,omitempty"`
}

// The kinds of change a replication link's entry carries (Entry.Change).
const (
	ChangePut    = "put"  // a version was written (a put, a copy, a completed upload)
	ChangeDelete = "del"  // a record without a body: a tombstone, a delete marker, a purge
	ChangeMeta   = "meta" // the in-place metadata of a version changed (tags, retention, hold, ACL)
)

// LinkPrefix starts the target name of a multi-data-center replication link's entries:
// LinkPrefix + the link's name. No notification target has it (their names have no ':').
const LinkPrefix = "mdc:"

// LinkTarget is the outbox target name of link's entries.
func LinkTarget(link string) string { return LinkPrefix + link }

// Marshal encodes e for the outbox.
func (e *Entry) Marshal() []byte {
	b, _ := json.Marshal(e)
	return b
}

// UnmarshalEntry decodes an outbox entry.
func UnmarshalEntry(b []byte) (*Entry, error) {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, errors.E(errors.Op("notify.UnmarshalEntry"), errors.Corrupt, err)
	}
	return &e, nil
}

// EventOf returns the concrete event type of a committed record o ("" if it is none:
// no event is sent for it).
func EventOf(o *object.Object) string {
	switch {
	case o.Deleted && o.DeleteMarker:
		return "s3:ObjectRemoved:DeleteMarkerCreated"
	case o.Deleted:
		return "s3:ObjectRemoved:Delete"
	case o.Mutable:
		return "" // a block volume's data object
	case len(o.PartSizes) > 0:
		return "s3:ObjectCreated:CompleteMultipartUpload"
	}
	return "s3:ObjectCreated:Put"
}

// VersionID is the S3 version id of the entry's version ("null" for a null version).
func (e *Entry) VersionID() string {
	if e.Versioned {
		return fmt.Sprintf("%016x", e.HLC)
	}
	return "null"
}

// Sequencer is the event's sequencer: of two events of one key, the later change has the
// larger sequencer (compared as strings of the same length, as S3's).
func (e *Entry) Sequencer() string { return fmt.Sprintf("%016X", e.HLC) }

// ID is the event's stable id: the same on every holder that sends it and on every retry,
// so that consumers can drop duplicates.
func (e *Entry) ID() string {
	return e.Bucket + "/" + EscapeKey(e.Key) + "/" + e.VersionID() + "/" + e.Sequencer()
}

// EscapeKey URL-encodes a key as S3 event records do (a space is "+", "/" stays).
func EscapeKey(k string) string {
	return strings.ReplaceAll(url.QueryEscape(k), "%2F", "/")
}

// Record is one record of an S3 event message (the AWS event JSON, version 2.1).
type Record struct {
	EventVersion string    `json:"eventVersion"`
	EventSource  string    `json:"eventSource"`
	AWSRegion    string    `json:"awsRegion"`
	EventTime    string    `json:"eventTime"`
	EventName    string    `json:"eventName"`
	EventID      string    `json:"eventId"` // cairn's: the stable id (Entry.ID)
	UserIdentity principal `json:"userIdentity"`
	S3           s3Entity  `json:"s3"`
}

type principal struct {
	PrincipalID string `json:"principalId"`
}

type s3Entity struct {
	SchemaVersion   string   `json:"s3SchemaVersion"`
	ConfigurationID string   `json:"configurationId"`
	Bucket          s3Bucket `json:"bucket"`
	Object          s3Obj    `json:"object"`
}

type s3Bucket struct {
	Name          string    `json:"name"`
	OwnerIdentity principal `json:"ownerIdentity"`
	ARN           string    `json:"arn"`
}

type s3Obj struct {
	Key       string `json:"key"`
	Size      *int64 `json:"size,omitempty"`
	ETag      string `json:"eTag,omitempty"`
	VersionID string `json:"versionId,omitempty"`
	Sequencer string `json:"sequencer"`
}

// Message is an S3 event message: the body a webhook receives and a Redis list holds.
type Message struct {
	Records []Record `json:"Records"`
}

// Record returns the entry's event record; region is the cluster's S3 region.
func (e *Entry) Record(region string) Record {
	r := Record{
		EventVersion: "2.1",
		EventSource:  "aws:s3",
		AWSRegion:    region,
		EventTime:    time.Unix(0, e.ModTime).UTC().Format("2006-01-02T15:04:05.000Z"),
		EventName:    strings.TrimPrefix(e.Event, "s3:"),
		EventID:      e.ID(),
		S3: s3Entity{
			SchemaVersion:   "1.0",
			ConfigurationID: e.ConfigID,
			Bucket:          s3Bucket{Name: e.Bucket, ARN: "arn:aws:s3:::" + e.Bucket},
			Object:          s3Obj{Key: EscapeKey(e.Key), ETag: e.ETag, Sequencer: e.Sequencer()},
		},
	}
	if e.Versioned {
		r.S3.Object.VersionID = e.VersionID()
	}
	if strings.HasPrefix(e.Event, "s3:ObjectCreated:") {
		sz := e.Size
		r.S3.Object.Size = &sz
	}
	return r
}

// Message returns the event message of the entry, JSON.
func (e *Entry) Message(region string) []byte {
	b, _ := json.Marshal(Message{Records: []Record{e.Record(region)}})
	return b
}

// Stacker builds the outbox entries of committed changes from the buckets' notification
// configurations; it caches each parsed document. Its methods are safe for concurrent use.
type Stacker struct {
	// Doc returns a bucket's stored notification configuration ("" for none).
	Doc func(bucket string) string
	// Links returns the replication links that send the changes of bucket/key that came
	// from origin (a linked cluster's id, "" for a change made here), not the link to
	// origin itself (nil: none); each committed change gets one entry per link, targeted
	// at LinkTarget(link) and naming origin.
	Links func(bucket, key, origin string) []string
	// Now is the clock of Entry.Stacked (nil: time.Now).
	Now func() time.Time

	mu    sync.Mutex
	cache map[string]*Configuration // by document
}

// Entries returns the encoded outbox entries of the committed record o of bucket/key:
// one per matching rule, none if the bucket has no configuration or nothing matches.
func (s *Stacker) Entries(bucket, key string, o *object.Object) [][]byte {
	out := s.linkEntries(nil, bucket, key, o, false)
	doc := s.Doc(bucket)
	if doc == "" {
		return out
	}
	ev := EventOf(o)
	if ev == "" {
		return out
	}
	c := s.parsed(doc)
	if c == nil {
		return out
	}
	rules := c.Match(ev, key)
	if len(rules) == 0 {
		return out
	}
	now := s.now()
	for _, r := range rules {
		e := Entry{Target: r.target, ConfigID: r.ID, Event: ev, Bucket: bucket, Key: key, HLC: o.HLC,
			Versioned: o.Versioned, ETag: o.ETag, ModTime: o.ModTime, Stacked: now().UnixNano()}
		if !o.Deleted {
			e.Size = o.Size
		}
		out = append(out, e.Marshal())
	}
	return out
}

// MetaEntries returns the encoded outbox entries of an in-place metadata change of the
// committed record o (tags, retention, legal hold, ACL): one per replication link that
// sends bucket's changes (notifications have no event for them).
func (s *Stacker) MetaEntries(bucket, key string, o *object.Object) [][]byte {
	return s.linkEntries(nil, bucket, key, o, true)
}

func (s *Stacker) now() func() time.Time {
	if s.Now != nil {
		return s.Now
	}
	return time.Now
}

// linkEntries appends to out the entries of o's change for the links of bucket.
func (s *Stacker) linkEntries(out [][]byte, bucket, key string, o *object.Object, meta bool) [][]byte {
	if s.Links == nil || o.Mutable {
		return out
	}
	links := s.Links(bucket, key, o.Origin)
	if len(links) == 0 {
		return out
	}
	kind := ChangePut
	switch {
	case meta:
		kind = ChangeMeta
	case o.Deleted:
		kind = ChangeDelete
	}
	now := s.now()().UnixNano()
	for _, l := range links {
		e := Entry{Target: LinkTarget(l), Change: kind, Bucket: bucket, Key: key, HLC: o.HLC, Versioned: o.Versioned,
			ModTime: o.ModTime, Stacked: now, Origin: o.Origin}
		if !o.Deleted && !meta {
			e.Size = o.Size
		}
		e.Marker, e.Purged = o.DeleteMarker, o.Purged
		out = append(out, e.Marshal())
	}
	return out
}

func (s *Stacker) parsed(doc string) *Configuration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cache[doc]; ok {
		return c
	}
	c, err := ParseStored(doc)
	if err != nil {
		c = nil // a document this build cannot read sends nothing (it was validated when stored)
	}
	if s.cache == nil || len(s.cache) > 1024 {
		s.cache = map[string]*Configuration{}
	}
	s.cache[doc] = c
	return c
}
