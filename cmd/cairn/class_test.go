package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// Storage classes are defined with `cairn admin class create`: invalid ones (no data
// shard, more shards than failure domains, a device class no node has, a malformed code)
// are refused with the reason and leave the map unchanged; valid ones are listed.
func TestClusterClassCreate(t *testing.T) {
	skipShort(t)
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
		{[]string{"HDD4", "--replicas", "4", "--device-class", "hdd"}, "its 4 copies go on distinct nodes"},
		{[]string{"STANDARD", "--replicas", "3", "--device-class", "hdd"}, "holds every object's record"},
		{[]string{"SMALL", "--replicas", "2", "--chunk-size", "1KiB"}, "chunk size 1024: between 64 KiB and 16 MiB"},
		{[]string{"SMALL", "--replicas", "2", "--chunk-size", "lots"}, "bad size"},
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
		{"HDD2", "--replicas", "2", "--device-class", "hdd", "--chunk-size", "256KiB"},
	} {
		if out, err := tc.admin(0, append([]string{"class", "create"}, good...)...); err != nil {
			t.Fatalf("class create %v: %v\n%s", good, err, out)
		}
	}
	out, err := tc.admin(0, "class", "list")
	if err != nil {
		t.Fatalf("class list: %v\n%s", err, out)
	}
	for _, want := range []string{"EC21", "EC 2+1", "STANDARD_IA", "HDD2", "2 copies (chunked)", "256KiB", "hdd", "STANDARD"} {
		if !strings.Contains(out, want) {
			t.Fatalf("class list lacks %q:\n%s", want, out)
		}
	}
	// An object stored in the replicated class: two copies of each 256 KiB chunk, its
	// record in STANDARD; it reads back whole through another gateway.
	tc.createBucket(0, "cls")
	ctx := context.Background()
	body := bytes.Repeat([]byte("cairn-class "), 60000) // 720000 bytes: 3 chunks
	// The class reaches node1's map through Raft: retry until it is there.
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := tc.procs[0].client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("cls"), Key: aws.String("k"),
			Body: bytes.NewReader(body), StorageClass: "HDD2"})
		return err
	})
	got, err := tc.procs[2].client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("cls"), Key: aws.String("k")})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	b, err := io.ReadAll(got.Body)
	got.Body.Close()
	if err != nil || !bytes.Equal(b, body) || got.StorageClass != "HDD2" {
		t.Fatalf("get: %d bytes of %d, class %q, %v", len(b), len(body), got.StorageClass, err)
	}
	if out, err := tc.admin(1, "placement", "cls", "k"); err != nil || !strings.Contains(out, "2 copies of 256 KiB chunks") {
		t.Fatalf("placement: %v\n%s", err, out)
	}
}
