// Package notify is cairn's bucket notifications: the S3 notification configuration
// (parsed, validated, matched against changes), the durable outbox entries a store writes
// with each committed change of a bucket that has one, the AWS S3 event records built from
// them, the targets they go to (a webhook, a Redis list, Redis pub/sub) and the Deliverer
// that sends a node's outbox at least once, in order, with retries and a dead-letter limit.
//
// It is not the outbox's storage (package store keeps the entries in the same synced index
// batch as the record they describe) and it decides nothing about placement: the server
// tells a Deliverer which entries are this node's to send (docs/design/notifications.md).
package notify

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"sort"
	"strings"
)

// ARN forms of a target named NAME, as configurations name it: a QueueConfiguration's
// Queue is "arn:cairn:sqs:::NAME", a TopicConfiguration's Topic "arn:cairn:sns:::NAME".
// Both resolve to the operator's target NAME (cairn admin notify target add); the kind of
// the target (webhook, Redis) decides how events are sent.
const (
	QueueARNPrefix = "arn:cairn:sqs:::"
	TopicARNPrefix = "arn:cairn:sns:::"
)

// QueueARN and TopicARN are the ARNs of target name.
func QueueARN(name string) string { return QueueARNPrefix + name }

// TopicARN is the topic ARN of target name.
func TopicARN(name string) string { return TopicARNPrefix + name }

// The event types cairn produces. The names with "*" match every type of their family.
const (
	ObjectCreatedAll      = "s3:ObjectCreated:*"
	ObjectCreatedPut      = "s3:ObjectCreated:Put"
	ObjectCreatedComplete = "s3:ObjectCreated:CompleteMultipartUpload"
	ObjectRemovedAll      = "s3:ObjectRemoved:*"
	ObjectRemovedDelete   = "s3:ObjectRemoved:Delete"
	ObjectRemovedMarker   = "s3:ObjectRemoved:DeleteMarkerCreated"
)

// produced are the concrete event types a change can have.
var produced = []string{ObjectCreatedPut, ObjectCreatedComplete, ObjectRemovedDelete, ObjectRemovedMarker}

// notProduced are S3 event types cairn knows but cannot report (yet): a configuration
// asking for them is refused rather than accepted and never honoured.
var notProduced = map[string]string{
	"s3:ObjectCreated:Post": "cairn does not yet tell browser POST uploads from PUTs: they are reported as s3:ObjectCreated:Put",
	"s3:ObjectCreated:Copy": "cairn does not yet tell copies from PUTs: they are reported as s3:ObjectCreated:Put",
}

// ConfigError is a configuration refused: Code is the S3 error code (MalformedXML,
// InvalidArgument, NotImplemented), Msg says why.
type ConfigError struct {
	Code, Msg string
}

func (e *ConfigError) Error() string { return e.Code + ": " + e.Msg }

func invalid(format string, args ...any) error {
	return &ConfigError{Code: "InvalidArgument", Msg: fmt.Sprintf(format, args...)}
}

// MaxRules bounds the configurations of one bucket (the document must fit the map's
// 64 KiB bucket configuration limit anyway).
const MaxRules = 100

// Configuration is a bucket's NotificationConfiguration, validated.
type Configuration struct {
	XMLName xml.Name `xml:"NotificationConfiguration"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Topics  []Rule   `xml:"TopicConfiguration"`
	Queues  []Rule   `xml:"QueueConfiguration"`
	// Lambda and EventBridge configurations are parsed only to be refused.
	Lambdas     []Rule    `xml:"CloudFunctionConfiguration"`
	EventBridge *struct{} `xml:"EventBridgeConfiguration"`
}

// Rule is one TopicConfiguration or QueueConfiguration: which events of which keys go to
// which target.
type Rule struct {
	ID       string   `xml:"Id,omitempty"`
	Topic    string   `xml:"Topic,omitempty"`
	Queue    string   `xml:"Queue,omitempty"`
	Function string   `xml:"CloudFunction,omitempty"`
	Events   []string `xml:"Event"`
	Filter   *Filter  `xml:"Filter,omitempty"`

	target         string // the target's name
	prefix, suffix string
}

// Filter is a rule's key filter.
type Filter struct {
	S3Key struct {
		Rules []FilterRule `xml:"FilterRule"`
	} `xml:"S3Key"`
}

// FilterRule is one prefix or suffix filter.
type FilterRule struct {
	Name  string `xml:"Name"`
	Value string `xml:"Value"`
}

// Target returns the name of the target the rule sends to.
func (r *Rule) Target() string { return r.target }

// Parse parses and validates a NotificationConfiguration. exists reports whether a target
// of that name is defined. It returns the configuration and its canonical document (what
// GetBucketNotificationConfiguration returns: ids filled in, filter names lower case). An
// empty configuration (no rules) is valid: it turns notifications off.
func Parse(data []byte, exists func(target string) bool) (*Configuration, []byte, error) {
	var c Configuration
	dec := xml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&c); err != nil {
		return nil, nil, &ConfigError{Code: "MalformedXML", Msg: "The XML you provided was not well-formed or did not validate against our published schema"}
	}
	if c.XMLName.Local != "NotificationConfiguration" {
		return nil, nil, &ConfigError{Code: "MalformedXML", Msg: "the document is not a NotificationConfiguration"}
	}
	if len(c.Lambdas) > 0 {
		return nil, nil, invalid("Unable to validate the following destination configurations: cairn has no Lambda functions (CloudFunctionConfiguration): use a QueueConfiguration or TopicConfiguration naming a target")
	}
	if c.EventBridge != nil {
		return nil, nil, &ConfigError{Code: "NotImplemented", Msg: "EventBridgeConfiguration is not implemented: use a QueueConfiguration or TopicConfiguration naming a target"}
	}
	if n := len(c.Topics) + len(c.Queues); n > MaxRules {
		return nil, nil, invalid("%d notification configurations: at most %d", n, MaxRules)
	}
	ids := map[string]bool{}
	all := c.rules()
	for i := range all {
		r := all[i]
		if err := r.check(i < len(c.Topics), exists); err != nil {
			return nil, nil, err
		}
		if r.ID == "" {
			r.ID = autoID(r)
		}
		if len(r.ID) > 255 {
			return nil, nil, invalid("configuration id of %d characters: at most 255", len(r.ID))
		}
		if ids[r.ID] {
			return nil, nil, invalid("two configurations have the id %q", r.ID)
		}
		ids[r.ID] = true
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if overlap(all[i], all[j]) {
				return nil, nil, invalid("Configurations overlap. Configurations on the same bucket cannot share a common event type (%s and %s)", all[i].ID, all[j].ID)
			}
		}
	}
	c.Xmlns = "http://s3.amazonaws.com/doc/2006-03-01/"
	c.Lambdas, c.EventBridge = nil, nil
	doc, err := xml.Marshal(&c)
	if err != nil {
		return nil, nil, err
	}
	return &c, doc, nil
}

// ParseStored parses a canonical document Parse returned (a bucket's stored
// configuration), without checking its targets: a target removed since is reported at
// delivery.
func ParseStored(doc string) (*Configuration, error) {
	c, _, err := Parse([]byte(doc), func(string) bool { return true })
	return c, err
}

// rules returns pointers to every topic and queue rule, topics first.
func (c *Configuration) rules() []*Rule {
	out := make([]*Rule, 0, len(c.Topics)+len(c.Queues))
	for i := range c.Topics {
		out = append(out, &c.Topics[i])
	}
	for i := range c.Queues {
		out = append(out, &c.Queues[i])
	}
	return out
}

// Empty reports whether the configuration has no rules.
func (c *Configuration) Empty() bool { return len(c.Topics)+len(c.Queues) == 0 }

func (r *Rule) check(topic bool, exists func(string) bool) error {
	arn, prefix, elem := r.Queue, QueueARNPrefix, "Queue"
	if topic {
		arn, prefix, elem = r.Topic, TopicARNPrefix, "Topic"
	}
	if (topic && r.Queue != "") || (!topic && r.Topic != "") || r.Function != "" {
		return &ConfigError{Code: "MalformedXML", Msg: "a configuration names one destination of its own kind"}
	}
	if arn == "" {
		return &ConfigError{Code: "MalformedXML", Msg: "a configuration without its " + elem}
	}
	name, ok := strings.CutPrefix(arn, prefix)
	if !ok || name == "" || strings.ContainsAny(name, ":/") {
		return invalid("Unable to validate the following destination configurations: %q is not a cairn %s ARN (%sNAME)", arn, elem, prefix)
	}
	if !exists(name) {
		return invalid("Unable to validate the following destination configurations: no target %q (see cairn admin notify target list)", name)
	}
	r.target = name
	if len(r.Events) == 0 {
		return &ConfigError{Code: "MalformedXML", Msg: "a configuration without an Event"}
	}
	seen := map[string]bool{}
	for _, e := range r.Events {
		if why, ok := notProduced[e]; ok {
			return &ConfigError{Code: "NotImplemented", Msg: fmt.Sprintf("event %s: %s", e, why)}
		}
		if !knownEvent(e) {
			return invalid("The event is not supported for notifications: %q", e)
		}
		if seen[e] {
			return invalid("event %s listed twice", e)
		}
		seen[e] = true
	}
	sort.Strings(r.Events)
	if r.Filter != nil {
		var np, ns int
		for i, f := range r.Filter.S3Key.Rules {
			switch strings.ToLower(f.Name) {
			case "prefix":
				np++
				r.prefix = f.Value
			case "suffix":
				ns++
				r.suffix = f.Value
			default:
				return invalid("filter rule name must be either prefix or suffix, not %q", f.Name)
			}
			r.Filter.S3Key.Rules[i].Name = strings.ToLower(f.Name)
			if len(f.Value) > 1024 {
				return invalid("filter rule value of %d bytes: at most 1024", len(f.Value))
			}
		}
		if np > 1 || ns > 1 {
			return invalid("Cannot specify more than one prefix rule and one suffix rule in a filter.")
		}
		if len(r.Filter.S3Key.Rules) == 0 {
			r.Filter = nil
		}
	}
	return nil
}

func knownEvent(e string) bool {
	switch e {
	case ObjectCreatedAll, ObjectRemovedAll:
		return true
	}
	for _, p := range produced {
		if e == p {
			return true
		}
	}
	return false
}

// autoID is the id of a rule sent without one: a digest of the rule, so the same document
// always gets the same ids.
func autoID(r *Rule) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s", r.Topic, r.Queue, strings.Join(r.Events, ","), r.prefix, r.suffix)
	return "cairn-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// overlap reports whether two rules could both match one event: a common event type and
// key filters that some key passes both of (S3 refuses such configurations).
func overlap(a, b *Rule) bool {
	common := false
	for _, x := range a.Events {
		for _, y := range b.Events {
			if covers(x, y) || covers(y, x) {
				common = true
			}
		}
	}
	if !common {
		return false
	}
	pre := strings.HasPrefix(a.prefix, b.prefix) || strings.HasPrefix(b.prefix, a.prefix)
	suf := strings.HasSuffix(a.suffix, b.suffix) || strings.HasSuffix(b.suffix, a.suffix)
	return pre && suf
}

// covers reports whether subscribing to pattern p delivers events of type e.
func covers(p, e string) bool {
	if fam, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(e, fam)
	}
	return p == e
}

// Match returns the rules an event of type event (one of the concrete types) of key
// matches: at most one, since overlapping rules are refused, but a document written by
// another build is not trusted to hold to that.
func (c *Configuration) Match(event, key string) []*Rule {
	var out []*Rule
	for _, r := range c.rules() {
		if !strings.HasPrefix(key, r.prefix) || !strings.HasSuffix(key, r.suffix) {
			continue
		}
		for _, p := range r.Events {
			if covers(p, event) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
