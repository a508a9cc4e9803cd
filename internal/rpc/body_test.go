package rpc

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

// A small request body is sent as the caller's own bytes.Reader when it holds exactly the
// declared bytes, else read into one buffer; a body shorter or longer than declared is
// refused before anything is sent. The receiver reads a hashed body whole, up to one
// byte past its declared length.
func TestSmallBodies(t *testing.T) {
	exact := bytes.NewReader([]byte("hello"))
	for _, tc := range []struct {
		name string
		body io.Reader
		size int64
		want string
		same bool // the caller's reader is sent as it is
		bad  bool
	}{
		{"bytes reader, exact", exact, 5, "hello", true, false},
		{"bytes reader, longer", bytes.NewReader([]byte("hello!")), 5, "", false, true},
		{"bytes reader, shorter", bytes.NewReader([]byte("hell")), 5, "", false, true},
		{"reader, exact", strings.NewReader("hello"), 5, "hello", false, false},
		{"reader, longer", strings.NewReader("hello!"), 5, "", false, true},
		{"reader, shorter", strings.NewReader("hell"), 5, "", false, true},
		{"reader, empty", strings.NewReader(""), 5, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br, err := smallBody(tc.body, tc.size)
			if tc.bad {
				if !errors.Is(errors.Invalid, err) {
					t.Fatalf("got %v, want an Invalid error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.same != (br == tc.body) {
				t.Fatalf("sent the caller's reader: %v, want %v", br == tc.body, tc.same)
			}
			if got, _ := io.ReadAll(br); string(got) != tc.want {
				t.Fatalf("body %q, want %q", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		body string
		n    int64
		want string
	}{
		{"hello", 5, "hello"},
		{"hello!", 5, "hello!"}, // one byte past: the hash check refuses it
		{"hello!!", 5, "hello!"},
		{"hell", 5, "hell"},
		{"", 0, ""},
	} {
		got, err := readHashed(strings.NewReader(tc.body), tc.n)
		if err != nil || string(got) != tc.want {
			t.Errorf("readHashed(%q, %d) = %q, %v; want %q", tc.body, tc.n, got, err, tc.want)
		}
	}
}
