package notify

import (
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/object"
)

const ns = `xmlns="http://s3.amazonaws.com/doc/2006-03-01/"`

func q(arn, events, filter string) string {
	var b strings.Builder
	b.WriteString("<QueueConfiguration><Queue>" + arn + "</Queue>")
	for _, e := range strings.Fields(events) {
		b.WriteString("<Event>" + e + "</Event>")
	}
	b.WriteString(filter + "</QueueConfiguration>")
	return b.String()
}

func filter(rules ...string) string {
	var b strings.Builder
	b.WriteString("<Filter><S3Key>")
	for i := 0; i+1 < len(rules); i += 2 {
		b.WriteString("<FilterRule><Name>" + rules[i] + "</Name><Value>" + rules[i+1] + "</Value></FilterRule>")
	}
	b.WriteString("</S3Key></Filter>")
	return b.String()
}

func doc(rules ...string) string {
	return "<NotificationConfiguration " + ns + ">" + strings.Join(rules, "") + "</NotificationConfiguration>"
}

var parseCases = []struct {
	name, doc, code string
}{
	{"empty", doc(), ""},
	{"one queue", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", "")), ""},
	{"topic", doc(`<TopicConfiguration><Id>x</Id><Topic>arn:cairn:sns:::t</Topic><Event>s3:ObjectRemoved:*</Event></TopicConfiguration>`), ""},
	{"filters", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:Put", filter("Prefix", "a/", "suffix", ".jpg"))), ""},
	{"disjoint prefixes", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", filter("prefix", "a/")), q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", filter("prefix", "b/"))), ""},
	{"disjoint events", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", ""), q("arn:cairn:sqs:::t", "s3:ObjectRemoved:*", "")), ""},
	{"disjoint suffixes", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", filter("suffix", ".png")), q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", filter("suffix", ".jpg"))), ""},
	{"not xml", "<NotificationConfiguration", "MalformedXML"},
	{"wrong root", "<CORSConfiguration></CORSConfiguration>", "MalformedXML"},
	{"no destination", doc("<QueueConfiguration><Event>s3:ObjectCreated:*</Event></QueueConfiguration>"), "MalformedXML"},
	{"no event", doc(q("arn:cairn:sqs:::t", "", "")), "MalformedXML"},
	{"unknown event", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:Nope", "")), "InvalidArgument"},
	{"aws-only event", doc(q("arn:cairn:sqs:::t", "s3:ObjectRestore:Post", "")), "InvalidArgument"},
	{"post", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:Post", "")), "NotImplemented"},
	{"unknown target", doc(q("arn:cairn:sqs:::other", "s3:ObjectCreated:*", "")), "InvalidArgument"},
	{"foreign arn", doc(q("arn:aws:sqs:us-east-1:1:t", "s3:ObjectCreated:*", "")), "InvalidArgument"},
	{"overlap wildcard", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", ""), q("arn:cairn:sqs:::t", "s3:ObjectCreated:Put", filter("prefix", "x"))), "InvalidArgument"},
	{"overlap prefix", doc(q("arn:cairn:sqs:::t", "s3:ObjectRemoved:Delete", filter("prefix", "a")), q("arn:cairn:sqs:::t", "s3:ObjectRemoved:Delete", filter("prefix", "ab"))), "InvalidArgument"},
	{"two suffixes", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", filter("suffix", "a", "suffix", "b"))), "InvalidArgument"},
	{"bad filter name", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", filter("regex", "a"))), "InvalidArgument"},
	{"event twice", doc(q("arn:cairn:sqs:::t", "s3:ObjectCreated:Put s3:ObjectCreated:Put", "")), "InvalidArgument"},
	{"lambda", doc(`<CloudFunctionConfiguration><CloudFunction>arn:aws:lambda:x</CloudFunction><Event>s3:ObjectCreated:*</Event></CloudFunctionConfiguration>`), "InvalidArgument"},
	{"eventbridge", doc(`<EventBridgeConfiguration></EventBridgeConfiguration>`), "NotImplemented"},
}

func exists(name string) bool { return name == "t" }

func TestParse(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			c, canon, err := Parse([]byte(tc.doc), exists)
			if tc.code != "" {
				ce, ok := err.(*ConfigError)
				if !ok || ce.Code != tc.code {
					t.Fatalf("want %s, got %v", tc.code, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// The canonical document parses to itself.
			c2, canon2, err := Parse(canon, exists)
			if err != nil || string(canon2) != string(canon) || len(c2.rules()) != len(c.rules()) {
				t.Fatalf("canonical form is not stable: %v\n%s\n%s", err, canon, canon2)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	c, _, err := Parse([]byte(doc(
		q("arn:cairn:sqs:::t", "s3:ObjectCreated:*", filter("prefix", "img/", "suffix", ".jpg")),
		q("arn:cairn:sqs:::t", "s3:ObjectRemoved:DeleteMarkerCreated", ""),
	)), exists)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		event, key string
		n          int
	}{
		{ObjectCreatedPut, "img/a.jpg", 1},
		{ObjectCreatedComplete, "img/b/c.jpg", 1},
		{ObjectCreatedPut, "img/a.png", 0},
		{ObjectCreatedPut, "doc/a.jpg", 0},
		{ObjectRemovedDelete, "img/a.jpg", 0},
		{ObjectRemovedMarker, "anything", 1},
	} {
		if got := c.Match(tc.event, tc.key); len(got) != tc.n {
			t.Errorf("%s %s: %d rules, want %d", tc.event, tc.key, len(got), tc.n)
		}
	}
}

func TestEventRecord(t *testing.T) {
	e := Entry{Target: "t", ConfigID: "c", Event: ObjectCreatedPut, Bucket: "b", Key: "a b/ü+c", HLC: 0x1234, Size: 5, ETag: "abc", ModTime: 1e18}
	r := e.Record("eu-1")
	if r.EventName != "ObjectCreated:Put" || r.S3.Object.Key != "a+b/%C3%BC%2Bc" || r.S3.Object.Sequencer != "0000000000001234" ||
		r.S3.Object.VersionID != "" || *r.S3.Object.Size != 5 || r.AWSRegion != "eu-1" || r.EventTime != "2001-09-09T01:46:40.000Z" {
		t.Fatalf("%+v", r)
	}
	if e.ID() != "b/a+b/%C3%BC%2Bc/null/0000000000001234" {
		t.Fatal(e.ID())
	}
	e.Versioned, e.Event = true, ObjectRemovedMarker
	if r := e.Record("x"); r.S3.Object.VersionID != "0000000000001234" || r.S3.Object.Size != nil {
		t.Fatalf("%+v", r)
	}
}

// FuzzParse: no document makes Parse panic, and every document it accepts has a canonical
// form that parses back to itself.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, canon, err := Parse(data, exists)
		if err != nil {
			return
		}
		_, canon2, err := Parse(canon, exists)
		if err != nil || string(canon2) != string(canon) {
			t.Fatalf("canonical form does not parse to itself: %v\n%s\n%s", err, canon, canon2)
		}
	})
}

// TestLinkEntriesOrigin: a replicated change's link entries name its origin, and the
// link to the origin gets none; an entry written before origins decodes without one.
func TestLinkEntriesOrigin(t *testing.T) {
	stk := &Stacker{Doc: func(string) string { return "" }, Links: func(bucket, key, origin string) []string {
		if origin == "c-b" {
			return []string{"to-c"} // not "to-b"
		}
		return []string{"to-b", "to-c"}
	}}
	for _, tc := range []struct {
		origin string
		want   []string // targets
	}{
		{"", []string{"mdc:to-b", "mdc:to-c"}},
		{"c-b", []string{"mdc:to-c"}},
	} {
		var got []string
		for _, b := range stk.Entries("bk", "k", &object.Object{HLC: 5, Size: 1, Origin: tc.origin}) {
			e, err := UnmarshalEntry(b)
			if err != nil {
				t.Fatal(err)
			}
			if e.Origin != tc.origin {
				t.Errorf("origin %q: entry %+v", tc.origin, e)
			}
			got = append(got, e.Target)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("origin %q: targets %v, want %v", tc.origin, got, tc.want)
		}
	}
	old := `{"t":"mdc:to-b","b":"bk","k":"k","h":5,"m":1,"q":2,"x":"put"}`
	if e, err := UnmarshalEntry([]byte(old)); err != nil || e.Origin != "" || e.HLC != 5 || e.Change != ChangePut {
		t.Errorf("an entry from before origins: %+v %v", e, err)
	}
}
