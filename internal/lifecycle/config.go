// Package lifecycle is S3 bucket lifecycle configurations: the LifecycleConfiguration
// document parsed and validated as S3 does (Parse, with S3's error codes), and the pure
// evaluation of its rules: which action is due for a key's versions, or for a pending
// multipart upload, at a given time (Evaluate, AbortDue, Expiry). It does no I/O and
// knows nothing of the cluster: the background runner that applies the actions is in
// package repair, the S3 operations in package s3api (docs/design/lifecycle.md).
package lifecycle

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/xml"
	"fmt"
	"strings"
	"time"
)

// Limits S3 applies to a configuration.
const (
	MaxRules    = 1000
	MaxID       = 255
	MaxDoc      = 1 << 20 // the largest document PutBucketLifecycleConfiguration reads
	maxNewer    = 100     // NewerNoncurrentVersions
	maxTagKey   = 128
	maxTagValue = 256
)

// Error is a configuration S3 refuses: its S3 error code (MalformedXML, InvalidArgument,
// InvalidRequest, NotImplemented) and message. Status is the HTTP status.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func malformed() error {
	return &Error{400, "MalformedXML", "The XML you provided was not well-formed or did not validate against our published schema"}
}

func invalidArg(format string, args ...any) error {
	return &Error{400, "InvalidArgument", fmt.Sprintf(format, args...)}
}

func invalidReq(format string, args ...any) error {
	return &Error{400, "InvalidRequest", fmt.Sprintf(format, args...)}
}

// Config is a LifecycleConfiguration document, as sent and as stored (re-encoded, with
// the IDs generated for rules that had none).
type Config struct {
	XMLName xml.Name `xml:"LifecycleConfiguration"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Rules   []Rule   `xml:"Rule"`
}

// Rule is one lifecycle rule.
type Rule struct {
	ID     string  `xml:"ID,omitempty"`
	Prefix *string `xml:"Prefix"` // the legacy rule-level prefix (instead of Filter)
	Filter *Filter `xml:"Filter"`
	Status string  `xml:"Status"`

	Expiration                     *Expiration                     `xml:"Expiration"`
	NoncurrentVersionExpiration    *NoncurrentVersionExpiration    `xml:"NoncurrentVersionExpiration"`
	AbortIncompleteMultipartUpload *AbortIncompleteMultipartUpload `xml:"AbortIncompleteMultipartUpload"`
	// Transitions move current versions, NoncurrentTransitions noncurrent ones, to an
	// archive tier (at most one of each per rule in cairn: an archived version does not
	// move on from tier to tier).
	Transitions           []Transition                  `xml:"Transition"`
	NoncurrentTransitions []NoncurrentVersionTransition `xml:"NoncurrentVersionTransition"`
}

// Transition moves a current version, Days after its creation or from a Date on, to the
// archive tier its StorageClass names (a tier's name, in any case: "COLD" names the tier
// "cold"; CheckTiers says whether the cluster has it).
type Transition struct {
	Days         *int    `xml:"Days"`
	Date         *string `xml:"Date"`
	StorageClass string  `xml:"StorageClass"`

	date time.Time // Date parsed
}

// Tier is the name of the tier a Transition's StorageClass names.
func (t *Transition) Tier() string { return strings.ToLower(t.StorageClass) }

// NoncurrentVersionTransition moves a noncurrent version, NoncurrentDays after it became
// noncurrent (its successor's creation), to the archive tier its StorageClass names (as
// a Transition's), keeping the NewerNoncurrentVersions newest noncurrent versions local.
type NoncurrentVersionTransition struct {
	NoncurrentDays          *int   `xml:"NoncurrentDays"`
	StorageClass            string `xml:"StorageClass"`
	NewerNoncurrentVersions *int   `xml:"NewerNoncurrentVersions"`
}

// Tier is the name of the tier the StorageClass names.
func (t *NoncurrentVersionTransition) Tier() string { return strings.ToLower(t.StorageClass) }

// Filter chooses the objects a rule applies to: at most one of its elements.
type Filter struct {
	Prefix      *string `xml:"Prefix"`
	Tag         *Tag    `xml:"Tag"`
	SizeGreater *int64  `xml:"ObjectSizeGreaterThan"`
	SizeLess    *int64  `xml:"ObjectSizeLessThan"`
	And         *And    `xml:"And"`
}

// And is the conjunction of a prefix, tags and sizes.
type And struct {
	Prefix      *string `xml:"Prefix"`
	Tags        []Tag   `xml:"Tag"`
	SizeGreater *int64  `xml:"ObjectSizeGreaterThan"`
	SizeLess    *int64  `xml:"ObjectSizeLessThan"`
}

// Tag is a key and value an object's tag set must contain.
type Tag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

// Expiration expires current versions: Days after creation, or on a Date, or (only)
// removes delete markers that are a key's last version.
type Expiration struct {
	Days                      *int    `xml:"Days"`
	Date                      *string `xml:"Date"`
	ExpiredObjectDeleteMarker *bool   `xml:"ExpiredObjectDeleteMarker"`

	date time.Time // Date parsed
}

// NoncurrentVersionExpiration removes noncurrent versions NoncurrentDays after they
// became noncurrent, keeping the NewerNoncurrentVersions newest ones.
type NoncurrentVersionExpiration struct {
	NoncurrentDays          *int `xml:"NoncurrentDays"`
	NewerNoncurrentVersions *int `xml:"NewerNoncurrentVersions"`
}

// AbortIncompleteMultipartUpload aborts uploads DaysAfterInitiation after they started.
type AbortIncompleteMultipartUpload struct {
	DaysAfterInitiation *int `xml:"DaysAfterInitiation"`
}

// Parse decodes and validates a LifecycleConfiguration as S3 does, and gives an ID to
// every rule without one. Errors are *Error.
func Parse(data []byte) (*Config, error) {
	var c Config
	if err := xml.Unmarshal(data, &c); err != nil {
		return nil, malformed()
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Marshal encodes c as stored (with S3's namespace).
func (c *Config) Marshal() ([]byte, error) {
	out := *c
	out.Xmlns = "http://s3.amazonaws.com/doc/2006-03-01/"
	return xml.Marshal(&out)
}

// validate checks a decoded configuration and fills in generated IDs and parsed dates.
func (c *Config) validate() error {
	if len(c.Rules) == 0 || len(c.Rules) > MaxRules {
		return malformed()
	}
	ids := map[string]bool{}
	for i := range c.Rules {
		rl := &c.Rules[i]
		if err := rl.validate(); err != nil {
			return err
		}
		if rl.ID == "" {
			continue
		}
		if ids[rl.ID] {
			return invalidArg("Rule ID must be unique. Found same ID for more than one rule")
		}
		ids[rl.ID] = true
	}
	for i := range c.Rules {
		for c.Rules[i].ID == "" {
			if id := newID(); !ids[id] {
				c.Rules[i].ID, ids[id] = id, true
			}
		}
	}
	return nil
}

// newID returns a rule ID as S3 makes them: 48 random characters.
func newID() string {
	var b [30]byte
	rand.Read(b[:])
	return base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])[:48]
}

func (rl *Rule) validate() error {
	if len(rl.ID) > MaxID {
		return invalidArg("ID length should not exceed allowed limit of %d", MaxID)
	}
	switch rl.Status {
	case "Enabled", "Disabled":
	default:
		return malformed()
	}
	if (rl.Prefix == nil) == (rl.Filter == nil) {
		return malformed() // exactly one of the legacy Prefix and Filter
	}
	if len(rl.Transitions) > 1 {
		return &Error{501, "NotImplemented", "More than one Transition in a rule is not implemented: cairn moves an object to one archive tier, where it stays until it is read"}
	}
	if len(rl.NoncurrentTransitions) > 1 {
		return &Error{501, "NotImplemented", "More than one NoncurrentVersionTransition in a rule is not implemented: cairn moves a version to one archive tier, where it stays"}
	}
	if rl.Expiration == nil && rl.NoncurrentVersionExpiration == nil && rl.AbortIncompleteMultipartUpload == nil && len(rl.Transitions) == 0 && len(rl.NoncurrentTransitions) == 0 {
		return invalidReq("At least one action needs to be specified in a rule")
	}
	tags, sizes := false, false
	if f := rl.Filter; f != nil {
		sizes = f.SizeGreater != nil || f.SizeLess != nil || f.And != nil && (f.And.SizeGreater != nil || f.And.SizeLess != nil)
		n := 0
		for _, set := range []bool{f.Prefix != nil, f.Tag != nil, f.SizeGreater != nil, f.SizeLess != nil, f.And != nil} {
			if set {
				n++
			}
		}
		if n > 1 {
			return malformed()
		}
		if f.Tag != nil {
			if err := f.Tag.validate(); err != nil {
				return err
			}
			tags = true
		}
		if err := validSizes(f.SizeGreater, f.SizeLess); err != nil {
			return err
		}
		if a := f.And; a != nil {
			n := len(a.Tags)
			if a.Prefix != nil {
				n++
			}
			if a.SizeGreater != nil {
				n++
			}
			if a.SizeLess != nil {
				n++
			}
			if n < 2 {
				return malformed() // And combines at least two conditions
			}
			seen := map[string]bool{}
			for _, t := range a.Tags {
				if err := t.validate(); err != nil {
					return err
				}
				if seen[t.Key] {
					return invalidReq("Duplicate Tag Keys are not allowed.")
				}
				seen[t.Key] = true
			}
			tags = tags || len(a.Tags) > 0
			if err := validSizes(a.SizeGreater, a.SizeLess); err != nil {
				return err
			}
		}
	}
	if e := rl.Expiration; e != nil {
		if err := e.validate(); err != nil {
			return err
		}
		if e.ExpiredObjectDeleteMarker != nil && tags {
			return invalidReq("ExpiredObjectDeleteMarker cannot be specified with tags.")
		}
	}
	for i := range rl.Transitions { // after the Expiration, which they are compared with
		if err := rl.Transitions[i].validate(rl.Expiration); err != nil {
			return err
		}
	}
	if nc := rl.NoncurrentVersionExpiration; nc != nil {
		if nc.NoncurrentDays == nil {
			return malformed()
		}
		if *nc.NoncurrentDays <= 0 {
			return invalidArg("'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer")
		}
		if v := nc.NewerNoncurrentVersions; v != nil && (*v <= 0 || *v > maxNewer) {
			return invalidArg("'NewerNoncurrentVersions' for NoncurrentVersionExpiration action must be a positive integer up to %d", maxNewer)
		}
	}
	for i := range rl.NoncurrentTransitions { // after the NoncurrentVersionExpiration, which they are compared with
		if err := rl.NoncurrentTransitions[i].validate(rl.NoncurrentVersionExpiration); err != nil {
			return err
		}
	}
	if a := rl.AbortIncompleteMultipartUpload; a != nil {
		if a.DaysAfterInitiation == nil {
			return malformed()
		}
		if *a.DaysAfterInitiation <= 0 {
			return invalidArg("'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer")
		}
		if tags {
			return invalidReq("AbortIncompleteMultipartUpload cannot be specified with Tags.")
		}
		if sizes {
			// An upload has no size yet: the runner would abort uploads of every size.
			return invalidReq("AbortIncompleteMultipartUpload cannot be specified with Object Size.")
		}
	}
	return nil
}

func (t Tag) validate() error {
	if t.Key == "" || len(t.Key) > maxTagKey {
		return invalidReq("The TagKey you have provided is invalid")
	}
	if len(t.Value) > maxTagValue {
		return invalidReq("The TagValue you have provided is invalid")
	}
	return nil
}

func validSizes(gt, lt *int64) error {
	if gt != nil && *gt < 0 {
		return invalidArg("'ObjectSizeGreaterThan' must be a non-negative integer")
	}
	if lt != nil && *lt <= 0 {
		return invalidArg("'ObjectSizeLessThan' must be a positive integer")
	}
	if gt != nil && lt != nil && *gt >= *lt {
		return invalidArg("'ObjectSizeLessThan' must be greater than 'ObjectSizeGreaterThan'")
	}
	return nil
}

// parseDate parses an Expiration's Date (ISO 8601, with or without a zone), in UTC.
func parseDate(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	d, err := time.Parse(time.RFC3339, s)
	if err != nil {
		if d, err = time.Parse("2006-01-02T15:04:05", s); err != nil {
			return time.Time{}, err
		}
	}
	return d.UTC(), nil
}

func (t *Transition) validate(e *Expiration) error {
	if (t.Days == nil) == (t.Date == nil) {
		return malformed() // exactly one of Days and Date
	}
	if t.StorageClass == "" {
		return malformed()
	}
	if t.Days != nil && *t.Days < 0 {
		return invalidArg("'Days' in Transition action must be nonnegative")
	}
	if t.Date != nil {
		d, err := parseDate(*t.Date)
		if err != nil {
			return invalidArg("Invalid date: 'Date' must be in ISO 8601 format")
		}
		if !d.Equal(d.Truncate(24 * time.Hour)) {
			return invalidArg("'Date' must be at midnight GMT")
		}
		t.date = d
	}
	if e == nil || e.ExpiredObjectDeleteMarker != nil {
		return nil
	}
	if (e.Days != nil) != (t.Days != nil) {
		return invalidReq("Found mixed 'Date' and 'Days' based Expiration and Transition actions in lifecycle rule")
	}
	if e.Days != nil && *e.Days <= *t.Days {
		return invalidArg("'Days' in the Expiration action must be greater than 'Days' in the Transition action")
	}
	if e.Date != nil {
		if ed, err := parseDate(*e.Date); err == nil && !ed.After(t.date) {
			return invalidArg("'Date' in the Expiration action must be later than 'Date' in the Transition action")
		}
	}
	return nil
}

// validate checks a NoncurrentVersionTransition against S3's rules, and against the
// rule's NoncurrentVersionExpiration e (nil: none), which must come later.
func (t *NoncurrentVersionTransition) validate(e *NoncurrentVersionExpiration) error {
	if t.NoncurrentDays == nil || t.StorageClass == "" {
		return malformed()
	}
	if *t.NoncurrentDays < 0 {
		return invalidArg("'NoncurrentDays' in NoncurrentVersionTransition action must be nonnegative")
	}
	if v := t.NewerNoncurrentVersions; v != nil && (*v <= 0 || *v > maxNewer) {
		return invalidArg("'NewerNoncurrentVersions' for NoncurrentVersionTransition action must be a positive integer up to %d", maxNewer)
	}
	if e != nil && e.NoncurrentDays != nil && *e.NoncurrentDays <= *t.NoncurrentDays {
		return invalidArg("'NoncurrentDays' in NoncurrentVersionExpiration action must be greater than 'NoncurrentDays' in NoncurrentVersionTransition action")
	}
	return nil
}

// CheckTiers refuses (InvalidStorageClass) a configuration whose Transition or
// NoncurrentVersionTransition names a tier for which known is false: the cluster has no
// such archive tier.
func (c *Config) CheckTiers(known func(tier string) bool) error {
	refuse := func(class string) error {
		return &Error{400, "InvalidStorageClass", fmt.Sprintf("The storage class you specified is not valid: %q names no archive tier of this cluster (cairn admin tier list)", class)}
	}
	for i := range c.Rules {
		for _, t := range c.Rules[i].Transitions {
			if !known(t.Tier()) {
				return refuse(t.StorageClass)
			}
		}
		for _, t := range c.Rules[i].NoncurrentTransitions {
			if !known(t.Tier()) {
				return refuse(t.StorageClass)
			}
		}
	}
	return nil
}

// NoncurrentTransitions reports whether some rule has a NoncurrentVersionTransition.
func (c *Config) NoncurrentTransitions() bool {
	for i := range c.Rules {
		if len(c.Rules[i].NoncurrentTransitions) > 0 {
			return true
		}
	}
	return false
}

// Transitions reports whether any rule has a Transition or a NoncurrentVersionTransition.
func (c *Config) Transitions() bool {
	for i := range c.Rules {
		if len(c.Rules[i].Transitions) > 0 || len(c.Rules[i].NoncurrentTransitions) > 0 {
			return true
		}
	}
	return false
}

func (e *Expiration) validate() error {
	n := 0
	if e.Days != nil {
		n++
		if *e.Days <= 0 {
			return invalidArg("'Days' for Expiration action must be a positive integer")
		}
	}
	if e.Date != nil {
		n++
		d, err := parseDate(*e.Date)
		if err != nil {
			return invalidArg("Invalid date: 'Date' must be in ISO 8601 format")
		}
		if !d.Equal(d.Truncate(24 * time.Hour)) {
			return invalidArg("'Date' must be at midnight GMT")
		}
		e.date = d
	}
	if e.ExpiredObjectDeleteMarker != nil {
		n++
	}
	if n != 1 {
		// Days and Date together, ExpiredObjectDeleteMarker with either, or none.
		return malformed()
	}
	return nil
}
