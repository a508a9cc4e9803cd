package main

import (
	"strings"
	"testing"
)

// Storage classes are defined with `cairn admin class create`: invalid ones (no data
// shard, more shards than failure domains, a device class no node has, a malformed code)
// are refused with the reason and leave the map unchanged; valid ones are listed.
func TestClusterClassCreate(t *testing.T) {
	tc := startCluster(t, 3, "--device-class", "hdd")
	tc.waitVoters(3)
	epoch := tc.status(0).Epoch
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"EC42", "--ec", "4+2"}, "the cluster has 3 storage nodes"},
		{[]string{"EC02", "--ec", "0+2"}, "at least one data shard"},
		{[]string{"EC20", "--ec", "2+0"}, "at least one parity shard"},
		{[]string{"ECX", "--ec", "4+2x"}, "bad --ec"},
		{[]string{"FAST", "--replicas", "2", "--device-class", "ssd"}, `no storage node has device class "ssd"`},
		{[]string{"BOTH", "--replicas", "2", "--ec", "2+1"}, "not both"},
		{[]string{"NONE"}, "--replicas must be at least 1"},
		{[]string{"IA", "--replicas", "2", "--s3-names", "PLATINUM"}, "not an S3 storage class"},
		{[]string{"bad name", "--replicas", "2"}, "use letters, digits"},
	} {
		out, err := tc.admin(0, append([]string{"class", "create"}, bad.args...)...)
		if err == nil || !strings.Contains(out, bad.want) {
			t.Errorf("class create %v: %v\n%s\nwant a refusal mentioning %q", bad.args, err, out, bad.want)
		}
	}
	if e := tc.status(0).Epoch; e != epoch {
		t.Fatalf("map epoch %d after refused class commands, was %d", e, epoch)
	}
	for _, good := range [][]string{
		{"EC21", "--ec", "2+1", "--s3-names", "STANDARD_IA"},
		{"HDD2", "--replicas", "2", "--device-class", "hdd"},
	} {
		if out, err := tc.admin(0, append([]string{"class", "create"}, good...)...); err != nil {
			t.Fatalf("class create %v: %v\n%s", good, err, out)
		}
	}
	out, err := tc.admin(0, "class", "list")
	if err != nil {
		t.Fatalf("class list: %v\n%s", err, out)
	}
	for _, want := range []string{"EC21", "EC 2+1", "STANDARD_IA", "HDD2", "2 copies", "hdd", "STANDARD"} {
		if !strings.Contains(out, want) {
			t.Fatalf("class list lacks %q:\n%s", want, out)
		}
	}
}
