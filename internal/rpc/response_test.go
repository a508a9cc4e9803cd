package rpc_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// TestResponsesAreVerified: a client accepts only answers signed by the cluster for its
// own request: unsigned, signed for another request, signed with another secret, or
// changed after signing (a status or an X-Cairn-* header) is an error.
func TestResponsesAreVerified(t *testing.T) {
	s := mustSecret(t, testSecret)
	other := mustSecret(t, otherSecret)
	for _, tc := range []struct {
		name string
		ok   bool
		h    func(w http.ResponseWriter, r *http.Request)
	}{
		{"signed", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(wire.HdrMeta, `{"Size":1}`)
			s.SignResponse(w.Header(), 200, r.Header.Get(rpc.HdrNonce), "")
		}},
		{"unsigned", false, func(w http.ResponseWriter, r *http.Request) {}},
		{"another request's", false, func(w http.ResponseWriter, r *http.Request) {
			s.SignResponse(w.Header(), 200, "0123456789abcdef.1", "")
		}},
		{"another secret", false, func(w http.ResponseWriter, r *http.Request) {
			other.SignResponse(w.Header(), 200, r.Header.Get(rpc.HdrNonce), "")
		}},
		{"header changed", false, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set(wire.HdrMeta, `{"Size":1}`)
			s.SignResponse(w.Header(), 200, r.Header.Get(rpc.HdrNonce), "")
			w.Header().Set(wire.HdrMeta, `{"Size":2}`)
		}},
		{"header added", false, func(w http.ResponseWriter, r *http.Request) {
			s.SignResponse(w.Header(), 200, r.Header.Get(rpc.HdrNonce), "")
			w.Header().Set(wire.HdrVersion, "7")
		}},
		{"status changed", false, func(w http.ResponseWriter, r *http.Request) {
			s.SignResponse(w.Header(), 404, r.Header.Get(rpc.HdrNonce), "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(tc.h))
			defer srv.Close()
			c := &rpc.Client{HTTP: srv.Client(), Secret: s, Node: "n1"}
			resp, err := c.Do(context.Background(), &rpc.Request{Method: "GET", Addr: strings.TrimPrefix(srv.URL, "http://"), Path: "/internal/v1/o"})
			if resp != nil {
				resp.Body.Close()
			}
			if tc.ok != (err == nil) {
				t.Fatalf("Do: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
