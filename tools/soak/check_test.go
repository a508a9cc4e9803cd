package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// The checker accepts every state a correct store may be in and rejects the rest.
func TestAllowedStates(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	w := func(kind, id string, start, end int, o outcome) *op {
		return &op{key: "k", kind: kind, id: id, start: at(start), end: at(end), outcome: o}
	}
	put1 := w("put", "a", 0, 10, acked)
	put2 := w("put", "b", 20, 30, acked)
	putFailed := w("put", "c", 40, 45, failed)
	putUnknown := w("put", "u", 46, 48, unknown)
	putNotSent := w("put", "n", 49, 49, notSent)
	del := w("del", "", 50, 60, acked)
	put3 := w("put", "d", 70, 80, acked)
	never := time.Time{}
	cases := []struct {
		name   string
		writes []*op
		rs, re time.Time
		want   string // the allowed states, as statesList prints them
	}{
		{"nothing written", nil, at(100), at(100), "not found"},
		{"one acked put", []*op{put1}, at(100), at(100), "a"},
		{"read during the put", []*op{put1}, at(5), at(6), "a, not found"},
		{"overwrite replaces", []*op{put1, put2}, at(100), at(100), "b"},
		{"concurrent puts: either", []*op{w("put", "x", 0, 10, acked), w("put", "y", 5, 15, acked)}, at(100), at(100), "x, y"},
		{"failed put may show, until a later acked write", []*op{put1, put2, putFailed}, at(46), at(46), "b, c"},
		{"delete after a failed put removes it", []*op{put1, put2, putFailed, del}, at(65), at(65), "not found"},
		{"unknown put may show even after a delete", []*op{put1, putUnknown, del}, at(65), at(65), "not found, u"},
		{"a put never sent never shows", []*op{putNotSent}, at(65), at(65), "not found"},
		{"put after delete", []*op{put1, del, put3}, at(100), at(100), "d"},
		{"stale reads allowed with rs zero", []*op{put1, put2, del}, never, at(100), "a, b, not found"},
		{"a write not yet started cannot be read", []*op{put1, put3}, never, at(50), "a, not found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := statesList(allowedStates(c.writes, c.rs, c.re)); got != c.want {
				t.Fatalf("allowed %q, want %q", got, c.want)
			}
		})
	}
}

func TestValueIdentify(t *testing.T) {
	h := newHistory()
	for _, size := range []int{0, 1, 30, 4096, 300000} {
		v := &value{key: "k1", id: fmt.Sprintf("c0-%d", size), size: size}
		h.values[v.id] = v
		b := v.bytes()
		if len(b) != size || !bytes.Equal(b, v.bytes()) {
			t.Fatalf("size %d: %d bytes, or not deterministic", size, len(b))
		}
		if id, err := h.identify("k1", v.id, "", b); err != nil || id != v.id {
			t.Fatalf("size %d: identify = %q, %v", size, id, err)
		}
		if _, err := h.identify("k2", v.id, "", b); err == nil {
			t.Fatalf("size %d: value of k1 accepted for k2", size)
		}
		if size > 100 {
			bad := append([]byte(nil), b...)
			bad[size/2] ^= 1
			if _, err := h.identify("k1", v.id, "", bad); err == nil {
				t.Fatal("a flipped bit was not noticed")
			}
			if _, err := h.identify("k1", v.id, "", b[:size-1]); err == nil {
				t.Fatal("a short body was not noticed")
			}
		}
	}
	if _, err := h.identify("k1", "c9-9", "", nil); err == nil {
		t.Fatal("an unknown id was accepted")
	}
	// The storage class a GET reports must be the one the value was written with.
	std := &value{key: "k1", id: "c1-1", size: 50}
	soak := &value{key: "k1", id: "c1-2", size: 50, class: soakClass}
	h.values[std.id], h.values[soak.id] = std, soak
	for _, c := range []struct {
		v     *value
		class string
		ok    bool
	}{
		{std, "", true}, {std, "STANDARD", true}, {std, soakClass, false},
		{soak, soakClass, true}, {soak, "", false}, {soak, "STANDARD", false},
	} {
		if _, err := h.identify("k1", c.v.id, c.class, c.v.bytes()); (err == nil) != c.ok {
			t.Errorf("value of class %q read as %q: %v, want ok=%v", c.v.class, c.class, err, c.ok)
		}
	}
}

func TestParseClass(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--class", "ec:4+2", "--nodes", "6"}, true},
		{[]string{"--class", "ec:4+2", "--nodes", "6", "--max-faulty", "2"}, true},
		{[]string{"--class", "ec:4+2", "--nodes", "6", "--max-faulty", "3"}, false},
		{[]string{"--class", "ec:4+2", "--nodes", "5"}, false},
		{[]string{"--class", "ec:4", "--nodes", "6"}, false},
		{[]string{"--class", "ec:0+2", "--nodes", "6"}, false},
		{[]string{"--class", "copies:3"}, true},
		{[]string{"--class", "copies:6"}, false},
		{[]string{"--class", "copies:x"}, false},
		{[]string{"--class", "lrc:3"}, false},
	} {
		cfg, err := parseFlags(c.args, io.Discard)
		if (err == nil) != c.ok {
			t.Errorf("%v: %v, want ok=%v", c.args, err, c.ok)
			continue
		}
		if err != nil {
			continue
		}
		if want := map[bool]int{false: 256 << 10, true: 6 << 20}[len(c.args) > 0]; cfg.maxSize != want {
			t.Errorf("%v: --max-size %d, want %d", c.args, cfg.maxSize, want)
		}
	}
}

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	if o, _ := classify(fmt.Errorf("send: %w", refused)); o != notSent {
		t.Fatalf("refused: %v", o)
	}
	if o, _ := classify(fmt.Errorf("read: %w", &net.OpError{Op: "read", Err: syscall.ECONNRESET})); o != unknown {
		t.Fatalf("reset: %v", o)
	}
	sendFailed := &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{}},
		Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}
	if o, _ := classify(fmt.Errorf("op: %w", sendFailed)); o != unknown {
		t.Fatalf("reset inside a response error without a status: %v", o)
	}
	answered := &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: 503}}, Err: errors.New("quorum")}
	if o, kind := classify(fmt.Errorf("op: %w", answered)); o != failed || kind != "503" {
		t.Fatalf("503: %v %q", o, kind)
	}
	if o, _ := classify(errors.New("something")); o != unknown {
		t.Fatalf("other: %v", o)
	}
}

func TestCheckPlacement(t *testing.T) {
	v := &value{key: "k", id: "c0-1", size: 1000}
	etag := md5hex(v.bytes())
	type rep = replicaJSON
	live := func(node string, hlc uint64) rep {
		return rep{Node: node, HLC: hlc, ETag: etag, Size: 1000, Layout: "copy"}
	}
	ec := &value{key: "k", id: "c0-2", size: 1000, class: soakClass}
	liveEC := func(node string, layout string) rep {
		return rep{Node: node, HLC: 7, ETag: md5hex(ec.bytes()), Size: 1000, Class: soakClass, Layout: layout}
	}
	cases := []struct {
		name string
		reps []rep
		want *value
		ok   bool
	}{
		{"three equal copies", []rep{live("a", 5), live("b", 5), live("c", 5)}, v, true},
		{"a copy missing", []rep{live("a", 5), live("b", 5), {Node: "c", Missing: true}}, v, false},
		{"two replicas listed", []rep{live("a", 5), live("b", 5)}, v, false},
		{"an older version", []rep{live("a", 5), live("b", 5), live("c", 4)}, v, false},
		{"a wrong body", []rep{live("a", 5), live("b", 5), {Node: "c", HLC: 5, ETag: "x", Size: 1000}}, v, false},
		{"a replica not answering", []rep{live("a", 5), live("b", 5), {Node: "c", Error: "down"}}, v, false},
		{"deleted everywhere", []rep{{Node: "a", Deleted: true}, {Node: "b", Missing: true}, {Node: "c", Deleted: true}}, nil, true},
		{"a deleted object kept on one replica", []rep{{Node: "a", Deleted: true}, live("b", 3), {Node: "c", Deleted: true}}, nil, false},
		{"records of an EC object", []rep{liveEC("a", "EC 4+2"), liveEC("b", "EC 4+2"), liveEC("c", "EC 4+2")}, ec, true},
		{"an EC object stored whole", []rep{liveEC("a", "EC 4+2"), liveEC("b", "copy"), liveEC("c", "EC 4+2")}, ec, false},
		{"an EC object in another code", []rep{liveEC("a", "EC 4+2"), liveEC("b", "EC 2+1"), liveEC("c", "EC 4+2")}, ec, false},
		{"a STANDARD object recorded in another class", []rep{live("a", 5), live("b", 5), {Node: "c", HLC: 5, ETag: etag, Size: 1000, Class: soakClass, Layout: "copy"}}, v, false},
		{"a STANDARD object stored as shards", []rep{live("a", 5), live("b", 5), {Node: "c", HLC: 5, ETag: etag, Size: 1000, Layout: "EC 4+2"}}, v, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := &placementJSON{Replicas: c.reps}
			if msg := checkPlacement(p, 3, c.want, "EC 4+2"); (msg == "") != c.ok {
				t.Fatalf("checkPlacement = %q, want ok=%v", msg, c.ok)
			}
		})
	}
}
