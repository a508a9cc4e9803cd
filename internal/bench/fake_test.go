package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// fakeS3 is a trivial S3 stand-in: it checks no signatures and stores nothing. Every GET
// answers the same body from memory, PUTs drain theirs, the bucket always exists. It
// measures the bench client's own ceiling, and its fail knob injects errors.
type fakeS3 struct {
	body []byte
	// fail, if set, may answer a request itself (returning true), e.g. with an error.
	fail func(w http.ResponseWriter, r *http.Request) bool
}

// startFakeS3 serves f on loopback until the test ends and returns its URL.
func startFakeS3(tb testing.TB, f *fakeS3) string {
	tb.Helper()
	srv := httptest.NewServer(f)
	tb.Cleanup(srv.Close)
	return srv.URL
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.fail != nil && f.fail(w, r) {
		return
	}
	isBucket := strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0
	switch {
	case r.Method == http.MethodGet && isBucket:
		io.WriteString(w, `<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>`)
	case r.Method == http.MethodGet:
		w.Header().Set("Content-Length", strconv.Itoa(len(f.body)))
		w.Write(f.body)
	case r.Method == http.MethodPut, r.Method == http.MethodPost:
		io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost {
			io.WriteString(w, "<DeleteResult></DeleteResult>")
		}
	case r.Method == http.MethodHead:
		if !isBucket {
			w.Header().Set("Content-Length", strconv.Itoa(len(f.body)))
		}
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}
