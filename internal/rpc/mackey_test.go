package rpc

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// canonicalHeaders is the canonical form of h's X-Cairn-* headers as the signing code
// built it before macKey (a string, then a part of mac): what every build signs.
func canonicalHeaders(h http.Header, skip string) string {
	var names []string
	for k := range h {
		if len(k) > 8 && strings.EqualFold(k[:8], "X-Cairn-") && http.CanonicalHeaderKey(k) != skip {
			names = append(names, http.CanonicalHeaderKey(k))
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, k := range names {
		b.WriteString(k)
		b.WriteByte(':')
		for i, v := range h.Values(k) {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strings.TrimSpace(v))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

var macKeyCases = []struct {
	name  string
	parts []string
	hd    http.Header
	skip  string
}{
	{"none", nil, nil, HdrSig},
	{"request", []string{"HEAD", "/v1/object/b/k", "v=1"}, http.Header{HdrNode: {"n1"}, HdrEpoch: {"7"}, HdrSig: {"ff"}, "Content-Type": {"x"}}, HdrSig},
	{"multi-valued and spaces", []string{"200", "abc.1"}, http.Header{"X-Cairn-Meta": {" a ", "b"}, HdrRespSig: {"00"}}, HdrRespSig},
	{"lower-case names", []string{"", ""}, http.Header{"x-cairn-node": {"n2"}, "X-CAIRN-TIME": {"1"}}, HdrSig},
	{"many headers", []string{"PUT"}, manyHeaders(40), HdrSig},
	{"empty parts", []string{"", "", ""}, http.Header{}, HdrBodyMAC},
}

func manyHeaders(n int) http.Header {
	h := http.Header{}
	for i := range n {
		h.Set("X-Cairn-H"+strings.Repeat("x", i), strings.Repeat("v", i))
	}
	return h
}

// TestMacKey checks that macKey signs exactly what mac signed over the canonical headers,
// so that nodes of this build and earlier ones verify each other.
func TestMacKey(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	k := newMacKey(key)
	for _, tt := range macKeyCases {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second use is of a pooled state
				want := mac(key, append(slices.Clone(tt.parts), canonicalHeaders(tt.hd, tt.skip))...)
				if got := k.sumHeaders(tt.hd, tt.skip, tt.parts...); !bytes.Equal(got[:], want) {
					t.Fatalf("sumHeaders = %x, want %x", got, want)
				}
				want = mac(key, tt.parts...)
				if got := k.sum(tt.parts...); !bytes.Equal(got[:], want) {
					t.Fatalf("sum = %x, want %x", got, want)
				}
			}
		})
	}
}

func FuzzMacKey(f *testing.F) {
	for _, tt := range macKeyCases {
		p := append(tt.parts, "", "")
		f.Add(p[0], p[1], "X-Cairn-A", " v ")
	}
	key := []byte("fuzz-key")
	k := newMacKey(key)
	f.Fuzz(func(t *testing.T, a, b, name, value string) {
		hd := http.Header{name: {value}, HdrNode: {a}}
		want := mac(key, a, b, canonicalHeaders(hd, HdrSig))
		if got := k.sumHeaders(hd, HdrSig, a, b); !bytes.Equal(got[:], want) {
			t.Fatalf("sumHeaders = %x, want %x", got, want)
		}
	})
}
