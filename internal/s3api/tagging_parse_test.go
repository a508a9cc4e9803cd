package s3api

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func tagDoc(tags ...string) string {
	var b strings.Builder
	b.WriteString(`<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet>`)
	for i := 0; i+1 < len(tags); i += 2 {
		fmt.Fprintf(&b, "<Tag><Key>%s</Key><Value>%s</Value></Tag>", tags[i], tags[i+1])
	}
	b.WriteString(`</TagSet></Tagging>`)
	return b.String()
}

func manyTags(n int) []string {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf("k%02d", i), "v")
	}
	return kv
}

// taggingXMLCases are the Tagging documents of TestParseTagging, and FuzzTagging's seeds.
var taggingXMLCases = []struct {
	name, doc string
	max       int
	want      [][2]string
	err       *apiError
}{
	{"sorted", tagDoc("b", "2", "a", "1"), maxObjectTags, [][2]string{{"a", "1"}, {"b", "2"}}, nil},
	{"empty set", tagDoc(), maxObjectTags, nil, nil},
	{"empty value", `<Tagging><TagSet><Tag><Key>k</Key><Value></Value></Tag></TagSet></Tagging>`, maxObjectTags, [][2]string{{"k", ""}}, nil},
	{"spaces kept", tagDoc(" k ", " v "), maxObjectTags, [][2]string{{" k ", " v "}}, nil},
	{"unicode limits", tagDoc(strings.Repeat("é", 128), strings.Repeat("日", 256)), maxObjectTags, [][2]string{{strings.Repeat("é", 128), strings.Repeat("日", 256)}}, nil},
	{"ten", tagDoc(manyTags(10)...), maxObjectTags, nil, nil},
	{"eleven", tagDoc(manyTags(11)...), maxObjectTags, nil, errTooManyObjectTags},
	{"fifty on a bucket", tagDoc(manyTags(50)...), maxBucketTags, nil, nil},
	{"fifty-one on a bucket", tagDoc(manyTags(51)...), maxBucketTags, nil, errTooManyBucketTags},
	{"key too long", tagDoc(strings.Repeat("k", 129), "v"), maxObjectTags, nil, errTagKey},
	{"empty key", tagDoc("", "v"), maxObjectTags, nil, errTagKey},
	{"value too long", tagDoc("k", strings.Repeat("v", 257)), maxObjectTags, nil, errTagValue},
	{"duplicate", tagDoc("k", "1", "k", "2"), maxObjectTags, nil, errTagDuplicate},
	{"reserved", tagDoc("aws:x", "1"), maxObjectTags, nil, errTagReserved},
	{"no value", `<Tagging><TagSet><Tag><Key>k</Key></Tag></TagSet></Tagging>`, maxObjectTags, nil, errMalformedXML},
	{"no key", `<Tagging><TagSet><Tag><Value>v</Value></Tag></TagSet></Tagging>`, maxObjectTags, nil, errMalformedXML},
	{"no tag set", `<Tagging></Tagging>`, maxObjectTags, nil, errMalformedXML},
	{"other root", `<Tags><TagSet></TagSet></Tags>`, maxObjectTags, nil, errMalformedXML},
	{"not XML", `<Tagging><TagSet>`, maxObjectTags, nil, errMalformedXML},
}

func TestParseTagging(t *testing.T) {
	for _, tc := range taggingXMLCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTagging([]byte(tc.doc), tc.max)
			if tc.err != nil {
				if err != tc.err {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("tags %q, want %q", got, tc.want)
			}
		})
	}
}

// taggingHeaderCases are the x-amz-tagging values of TestParseTaggingHeader, and
// FuzzTagging's seeds.
var taggingHeaderCases = []struct {
	name, header string
	want         [][2]string
	err          *apiError
}{
	{"none", "", nil, nil},
	{"two", "b=2&a=1", [][2]string{{"a", "1"}, {"b", "2"}}, nil},
	{"escaped", "k%20x=v%2Fw&p=a+b", [][2]string{{"k x", "v/w"}, {"p", "a b"}}, nil},
	{"key only", "k", [][2]string{{"k", ""}}, nil},
	{"empty value", "k=", [][2]string{{"k", ""}}, nil},
	{"empty parts", "&a=1&&", [][2]string{{"a", "1"}}, nil},
	{"unicode", "%C3%A9=%E6%97%A5", [][2]string{{"é", "日"}}, nil},
	{"ten", strings.Repeat("k=v&", 0) + "a=1&b=1&c=1&d=1&e=1&f=1&g=1&h=1&i=1&j=1", nil, nil},
	{"eleven", "a=1&b=1&c=1&d=1&e=1&f=1&g=1&h=1&i=1&j=1&k=1", nil, errTooManyObjectTags},
	{"duplicate", "a=1&a=2", nil, errTaggingHeader},
	{"bad escape", "a=%zz", nil, errTaggingHeader},
	{"invalid UTF-8", "a=%ff", nil, errTaggingHeader},
	{"empty key", "=v", nil, errTagKey},
	{"reserved", "aws%3Ax=1", nil, errTagReserved},
	{"long key", strings.Repeat("k", 129) + "=v", nil, errTagKey},
	{"long value", "k=" + strings.Repeat("v", 257), nil, errTagValue},
}

func TestParseTaggingHeader(t *testing.T) {
	for _, tc := range taggingHeaderCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTaggingHeader(tc.header)
			if tc.err != nil {
				if err != tc.err {
					t.Fatalf("error %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != nil && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("tags %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzTagging feeds arbitrary bytes to the Tagging document parser and the x-amz-tagging
// header parser: no panic, and whatever they accept obeys S3's limits, sorted by key.
func FuzzTagging(f *testing.F) {
	for _, tc := range taggingXMLCases {
		f.Add(tc.doc)
	}
	for _, tc := range taggingHeaderCases {
		f.Add(tc.header)
	}
	check := func(t *testing.T, tags [][2]string, max int) {
		if len(tags) > max {
			t.Fatalf("%d tags accepted", len(tags))
		}
		for i, kv := range tags {
			if kv[0] == "" || utf8.RuneCountInString(kv[0]) > maxTagKey || utf8.RuneCountInString(kv[1]) > maxTagValue ||
				!utf8.ValidString(kv[0]) || !utf8.ValidString(kv[1]) || strings.HasPrefix(kv[0], "aws:") {
				t.Fatalf("tag %q accepted", kv)
			}
			if i > 0 && tags[i-1][0] >= kv[0] {
				t.Fatalf("tags not sorted and unique: %q", tags)
			}
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		if tags, err := parseTagging([]byte(s), maxBucketTags); err == nil {
			check(t, tags, maxBucketTags)
		}
		if tags, err := parseTaggingHeader(s); err == nil {
			check(t, tags, maxObjectTags)
		}
	})
}

// BenchmarkParseTaggingHeader measures the parsing and checking of a full x-amz-tagging
// (10 tags) on every PUT that carries one.
func BenchmarkParseTaggingHeader(b *testing.B) {
	var kv []string
	for i := range 10 {
		kv = append(kv, fmt.Sprintf("tag-key-%02d=some%%20value%%20number%%20%02d", i, i))
	}
	h := strings.Join(kv, "&")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseTaggingHeader(h); err != nil {
			b.Fatal(err)
		}
	}
}
