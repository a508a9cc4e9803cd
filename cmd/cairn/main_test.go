package main

import (
	"io"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"64MiB", 64 << 20, true}, {"1GiB", 1 << 30, true}, {"512K", 512 << 10, true},
		{"1048576", 1 << 20, true}, {" 2 MiB ", 2 << 20, true}, {"12x", 0, false},
		{"-1MiB", 0, false}, {"", 0, false}, {"MiB", 0, false},
	} {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// A --lifecycle-interval that is not positive is refused before the server starts (it
// was taken as the 24 h default).
func TestServerLifecycleIntervalFlag(t *testing.T) {
	for _, v := range []string{"0s", "-1h"} {
		err := runServer([]string{"--lifecycle-interval", v, "--data", t.TempDir()}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--lifecycle-interval") {
			t.Errorf("--lifecycle-interval %q: %v, want an error naming the flag", v, err)
		}
	}
}

// A read lease outside 0 to 5s is refused before the server starts.
func TestServerObjectCacheLeaseFlag(t *testing.T) {
	for _, v := range []string{"-1s", "6s", "1h"} {
		err := runServer([]string{"--object-cache-lease", v, "--data", t.TempDir()}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--object-cache-lease") {
			t.Errorf("--object-cache-lease %q: %v, want an error naming the flag", v, err)
		}
	}
}

// A bad --object-cache is refused before the server starts.
func TestServerObjectCacheFlag(t *testing.T) {
	for _, v := range []string{"lots", "-1MiB", "12x"} {
		err := runServer([]string{"--object-cache", v, "--data", t.TempDir()}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--object-cache") {
			t.Errorf("--object-cache %q: %v, want an error naming the flag", v, err)
		}
	}
}
