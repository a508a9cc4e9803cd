package main

import (
	"encoding/xml"
	"reflect"
	"strings"
	"testing"
)

func TestKeyLayout(t *testing.T) {
	for _, n := range []int{1, 150, 20_000, 200_000} {
		keys := sortedKeys(n)
		seen := map[string]bool{}
		tops := map[string]bool{}
		subs := map[string]bool{}
		for i, k := range keys {
			if seen[k] {
				t.Fatalf("n=%d: duplicate key %q", n, k)
			}
			seen[k] = true
			if i > 0 && keys[i-1] >= k {
				t.Fatalf("n=%d: keys out of order", n)
			}
			parts := strings.Split(k, "/")
			if len(parts) != 3 {
				t.Fatalf("key %q", k)
			}
			tops[parts[0]+"/"] = true
			if strings.HasPrefix(k, delimPrefix) {
				subs[parts[0]+"/"+parts[1]+"/"] = true
			}
			if got := keyOf(fileNum(k)); got != k {
				t.Fatalf("fileNum(%q) does not invert keyOf", k)
			}
		}
		if len(tops) != expectedTopDirs(n) || len(subs) != expectedDelimCount(n) {
			t.Errorf("n=%d: %d top dirs (want %d), %d subs of %s (want %d)", n, len(tops), expectedTopDirs(n), len(subs), delimPrefix, expectedDelimCount(n))
		}
	}
	if expectedTopDirs(1_000_000) != 1000 || expectedDelimCount(1_000_000) != 100 {
		t.Error("1M objects: want 1000 top dirs and 100 subs of dir000/")
	}
	for i := range 1000 {
		if s := bodySize(i); s < 0 || s > 100 {
			t.Fatalf("bodySize(%d) = %d", i, s)
		}
	}
}

func TestParseList(t *testing.T) {
	bodies := []string{
		xml.Header + `<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>list</Name><Prefix>a&amp;b/</Prefix>` +
			`<MaxKeys>3</MaxKeys><KeyCount>3</KeyCount><IsTruncated>true</IsTruncated><NextContinuationToken>YWJj</NextContinuationToken>` +
			`<Contents><Key>a&amp;b/&lt;x&gt;&#xA;</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>&#34;e&#34;</ETag><Size>12</Size>` +
			`<Owner><ID>o</ID><DisplayName>o</DisplayName></Owner><StorageClass>STANDARD</StorageClass></Contents>` +
			`<Contents><Key>a&amp;b/y</Key><Size>0</Size></Contents>` +
			`<CommonPrefixes><Prefix>a&amp;b/z/</Prefix></CommonPrefixes></ListBucketResult>`,
		xml.Header + `<ListBucketResult><Name>list</Name><Prefix></Prefix><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>`,
		xml.Header + `<ListBucketResult><Prefix>dir000/</Prefix><Delimiter>/</Delimiter><KeyCount>2</KeyCount><IsTruncated>false</IsTruncated>` +
			`<CommonPrefixes><Prefix>dir000/sub00/</Prefix></CommonPrefixes><CommonPrefixes><Prefix>dir000/sub01/</Prefix></CommonPrefixes></ListBucketResult>`,
	}
	for _, b := range bodies {
		got, err := parseList([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		var want listPage
		if err := xml.Unmarshal([]byte(b), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(normalize(got), normalize(&want)) {
			t.Errorf("parseList:\n got %+v\nwant %+v", got, want)
		}
	}
	if _, err := parseList([]byte("<Error><Code>x</Code></Error>")); err == nil {
		t.Error("parseList accepted an error document")
	}
}
