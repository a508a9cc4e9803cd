package mdc

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

func batch(t testing.TB, cs []Change, bodies []string) []byte {
	var b bytes.Buffer
	w := NewWriter(&b)
	for i := range cs {
		var body io.Reader
		if bodies[i] != "" {
			body = strings.NewReader(bodies[i])
		}
		if err := w.Write(&cs[i], body); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

func TestRoundTrip(t *testing.T) {
	cs := []Change{
		{Bucket: "b", Key: "k1", Rec: object.Object{HLC: 10, Size: 5, ETag: "e", Tags: [][2]string{{"a", "b"}}, MetaHLC: 11}},
		{Bucket: "b", Key: "k2", Rec: object.Object{HLC: 12, Deleted: true, Versioned: true, DeleteMarker: true}},
		{Bucket: "b", Key: "k3", Rec: object.Object{HLC: 13, Size: 0}, Origin: "c-0123456789abcdef"},
	}
	data := batch(t, cs, []string{"hello", "", ""})
	r := NewReader(bytes.NewReader(data))
	for i := range cs {
		c, body, err := r.Next()
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if c.Key != cs[i].Key || c.Rec.HLC != cs[i].Rec.HLC || c.Rec.Deleted != cs[i].Rec.Deleted || c.Rec.MetaHLC != cs[i].Rec.MetaHLC || c.Origin != cs[i].Origin {
			t.Fatalf("change %d: %+v, want %+v", i, c, cs[i])
		}
		if (body != nil) != cs[i].HasBody() {
			t.Fatalf("change %d: body %v", i, body)
		}
		if i == 0 {
			b, _ := io.ReadAll(body)
			if string(b) != "hello" {
				t.Fatalf("body %q", b)
			}
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last: %v", err)
	}
	// An unread body is skipped by Next.
	r = NewReader(bytes.NewReader(data))
	r.Next()
	if c, _, err := r.Next(); err != nil || c.Key != "k2" {
		t.Fatalf("skip: %v %v", c, err)
	}
}

func TestMalformed(t *testing.T) {
	good := batch(t, []Change{{Bucket: "b", Key: "k", Rec: object.Object{HLC: 1, Size: 3}}}, []string{"abc"})
	for name, data := range map[string][]byte{
		"magic":       []byte("cairn-mdc/2\n"),
		"cut header":  good[:len(magic)+5],
		"cut body":    good[:len(good)-1],
		"no version":  nil,
		"origin":      nil,
		"zero length": append([]byte(magic), 0),
	} {
		hdr := map[string]string{"no version": `{"b":"b","k":"k","r":{"HLC":0}}`,
			"origin": `{"b":"b","k":"k","r":{"HLC":1,"Deleted":true},"o":"` + strings.Repeat("c", 65) + `"}`}[name]
		if hdr != "" {
			var b bytes.Buffer
			b.WriteString(magic)
			b.WriteByte(byte(len(hdr)))
			b.WriteString(hdr)
			data = b.Bytes()
		}
		r := NewReader(bytes.NewReader(data))
		var err error
		for err == nil {
			var body io.Reader
			_, body, err = r.Next()
			if body != nil {
				io.Copy(io.Discard, body)
			}
		}
		if !errors.Is(errors.Invalid, err) {
			t.Errorf("%s: %v, want Invalid", name, err)
		}
	}
}

func TestDiff(t *testing.T) {
	e := func(k string, hlc, meta uint64, del, versioned bool) object.VersionEntry {
		return object.VersionEntry{Bucket: "b", Key: k, HLC: hlc, MetaHLC: meta, Deleted: del, Versioned: versioned}
	}
	local := []object.VersionEntry{e("same", 5, 0, false, false), e("newer-here", 9, 0, false, false), e("only-here", 3, 0, false, false),
		e("meta", 4, 8, false, false), e("v", 1, 0, false, true), e("v", 2, 0, false, true)}
	remote := []object.VersionEntry{e("same", 5, 0, false, false), e("newer-here", 7, 0, false, false), e("only-there", 3, 0, true, false),
		e("meta", 4, 6, false, false), e("v", 1, 0, false, true), e("v", 3, 0, true, true)}
	push, pull := Diff(local, remote)
	keys := func(es []object.VersionEntry) (s []string) {
		for _, e := range es {
			s = append(s, e.Key+"@"+string(rune('0'+e.HLC)))
		}
		return s
	}
	if got := strings.Join(keys(push), " "); got != "meta@4 newer-here@9 only-here@3 v@2" {
		t.Errorf("push %s", got)
	}
	if got := strings.Join(keys(pull), " "); got != "only-there@3 v@3" {
		t.Errorf("pull %s", got)
	}
	// Equal records hash equally; any field changes the hash.
	if Hash(local[0]) != Hash(remote[0]) || Hash(local[1]) == Hash(remote[1]) || Hash(local[3]) == Hash(remote[3]) {
		t.Error("hashes")
	}
}

func FuzzReader(f *testing.F) {
	f.Add(batch(f, []Change{{Bucket: "b", Key: "k", Rec: object.Object{HLC: 1, Size: 3}}}, []string{"abc"}))
	f.Add(batch(f, []Change{{Bucket: "b", Key: "k", Rec: object.Object{HLC: 1, Deleted: true, Versioned: true, Purged: true}}}, []string{""}))
	f.Add(batch(f, []Change{{Bucket: "b", Key: "k", Rec: object.Object{HLC: 2, Size: 1}, Origin: "c-0123456789abcdef"}}, []string{"x"}))
	f.Add([]byte(magic + "\x05{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		for i := 0; i < MaxChanges+1; i++ {
			c, body, err := r.Next()
			if err != nil {
				return
			}
			if c.Rec.HLC == 0 || c.Bucket == "" || c.Key == "" || len(c.Origin) > 64 {
				t.Fatalf("accepted %+v", c)
			}
			if body != nil {
				io.Copy(io.Discard, body)
			}
		}
	})
}
