package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// TestVersioningCluster: versioned overwrite, delete and restore cycles through the
// gateways of a 3-node cluster of processes, one node killed in the middle and started
// again; afterwards every gateway reads every version byte for byte and lists the same
// versions. The versioning and lifecycle configurations put through one gateway are
// served by every gateway.
func TestVersioningCluster(t *testing.T) {
	tc := startCluster(t, 3)
	tc.waitVoters(3)
	ctx := context.Background()
	tc.createBucket(0, "vers")
	cs := []*s3.Client{tc.procs[0].client(), tc.procs[1].client(), tc.procs[2].client()}
	if _, err := cs[0].PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("vers"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	// The configuration reaches the other gateways through the map.
	for _, c := range cs {
		proctest.WaitFor(t, 10*time.Second, func() error {
			out, err := c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("vers")})
			if err != nil || out.Status != types.BucketVersioningStatusEnabled {
				return fmt.Errorf("versioning %v %v", out, err)
			}
			return nil
		})
	}
	// So does a lifecycle configuration (feature level 7: set once the leader heard every
	// node's level), put through another gateway.
	rules := &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{{ID: aws.String("old"), Status: types.ExpirationStatusEnabled,
		Filter: &types.LifecycleRuleFilter{}, NoncurrentVersionExpiration: &types.NoncurrentVersionExpiration{NoncurrentDays: aws.Int32(3650)}}}}
	proctest.WaitFor(t, 10*time.Second, func() error {
		_, err := cs[1].PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String("vers"), LifecycleConfiguration: rules})
		return err
	})
	for _, c := range cs {
		proctest.WaitFor(t, 10*time.Second, func() error {
			out, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("vers")})
			if err != nil || len(out.Rules) != 1 || aws.ToString(out.Rules[0].ID) != "old" {
				return fmt.Errorf("lifecycle %v %v", out, err)
			}
			return nil
		})
	}
	bodies := map[string][]byte{} // "key@version" -> body
	put := func(c *s3.Client, key string, size int) {
		t.Helper()
		unit := []byte(fmt.Sprintf("%s-%d|", key, len(bodies)))
		body := bytes.Repeat(unit, size/len(unit)+1)[:size]
		out, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("vers"), Key: aws.String(key), Body: bytes.NewReader(body)})
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		bodies[key+"@"+aws.ToString(out.VersionId)] = body
	}
	markers := map[string]string{} // key -> its delete marker
	del := func(c *s3.Client, key string) {
		t.Helper()
		out, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String(key)})
		if err != nil || !aws.ToBool(out.DeleteMarker) {
			t.Fatalf("delete %s: %+v %v", key, out, err)
		}
		markers[key] = aws.ToString(out.VersionId)
	}
	restore := func(c *s3.Client, key string) {
		t.Helper()
		if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("vers"), Key: aws.String(key), VersionId: aws.String(markers[key])}); err != nil {
			t.Fatal(err)
		}
		delete(markers, key)
	}
	keys := []string{"a", "b", "c", "d"}
	for i, k := range keys {
		put(cs[i%3], k, 100+i)
		put(cs[(i+1)%3], k, 70000+i) // more than a small body
	}
	del(cs[0], "a")
	del(cs[1], "b")
	tc.procs[2].Kill()
	for i, k := range keys {
		put(cs[i%2], k, 300+i)
	}
	restore(cs[1], "a") // the marker made before the kill
	del(cs[0], "c")
	tc.procs[2].Restart()
	put(cs[2], "d", 500)
	restore(cs[2], "c") // the marker made while node 2 was away
	del(cs[2], "d")

	want := []string{}
	for kv := range bodies {
		want = append(want, kv)
	}
	for k, m := range markers {
		want = append(want, k+"@"+m+"dm")
	}
	slices.Sort(want)
	for i, c := range cs {
		for kv, body := range bodies {
			key, vid, _ := cutAt(kv)
			out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("vers"), Key: aws.String(key), VersionId: aws.String(vid)})
			if err != nil {
				t.Fatalf("node %d: get %s: %v", i, kv, err)
			}
			got, err := io.ReadAll(out.Body)
			out.Body.Close()
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("node %d: %s differs (%d bytes, %v)", i, kv, len(got), err)
			}
		}
		// Listings merge the nodes' stores: the same everywhere at once.
		if got := allVersions(t, c, "vers"); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("node %d lists\n%q\nwant\n%q", i, got, want)
		}
	}
	// The status counts the older versions apart.
	proctest.WaitFor(t, 20*time.Second, func() error {
		out, err := tc.admin(0, "status")
		if err != nil || !strings.Contains(out, "OLDER VERSIONS") {
			return fmt.Errorf("admin status: %v\n%s", err, out)
		}
		return nil
	})
	// The key deleted last reads as deleted everywhere.
	for i, c := range cs {
		if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("vers"), Key: aws.String("d")}); err == nil {
			t.Fatalf("node %d: d reads after its delete", i)
		}
	}
}

func cutAt(kv string) (key, vid string, ok bool) {
	i := bytes.LastIndexByte([]byte(kv), '@')
	if i < 0 {
		return kv, "", false
	}
	return kv[:i], kv[i+1:], true
}

// allVersions lists bucket's versions as sorted "key@id" ("dm" after a delete marker's).
func allVersions(t *testing.T, c *s3.Client, bucket string) []string {
	t.Helper()
	var out []string
	p := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), MaxKeys: aws.Int32(3)})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range page.Versions {
			out = append(out, aws.ToString(v.Key)+"@"+aws.ToString(v.VersionId))
		}
		for _, m := range page.DeleteMarkers {
			out = append(out, aws.ToString(m.Key)+"@"+aws.ToString(m.VersionId)+"dm")
		}
	}
	slices.Sort(out)
	return out
}
