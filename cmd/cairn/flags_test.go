package main

import (
	"flag"
	"slices"
	"testing"
)

func TestHoistFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.String("admin", "", "")
	fs.Bool("json", false, "")
	for _, tc := range []struct{ in, want []string }{
		{[]string{"status", "--json"}, []string{"--json", "status"}},
		{[]string{"--json", "status"}, []string{"--json", "status"}},
		{[]string{"status", "--admin", "h:1", "-json"}, []string{"--admin", "h:1", "-json", "status"}},
		{[]string{"status", "--admin=h:1"}, []string{"--admin=h:1", "status"}},
		{[]string{"recovery", "set", "--rate", "5MiB", "--json"}, []string{"--json", "recovery", "set", "--rate", "5MiB"}},
		{[]string{"policy", "set", "b", "--", "--json"}, []string{"policy", "set", "b", "--", "--json"}},
		{[]string{"policy", "set", "b", "-"}, []string{"policy", "set", "b", "-"}},
		{[]string{"status", "--admin"}, []string{"--admin", "status"}},
	} {
		if got := hoistFlags(fs, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("hoistFlags(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
