package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// tierAdmin runs `cairn admin` against node i with the tier secret key in the environment.
func (tc *testCluster) tierAdmin(i int, secretKey string, args ...string) (string, error) {
	cmd := exec.Command(proctest.Bin(tc.t), append([]string{"admin", "--admin", tc.procs[i].AdminAddr()}, args...)...)
	cmd.Env = []string{"CAIRN_CLUSTER_SECRET=" + testClusterSecret, "CAIRN_TIER_SECRET_KEY=" + secretKey}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestTierAdmin: archive tiers and water marks through cairn admin, against a second
// cairn as the external tier: bad input (an endpoint that does not answer, a bucket it
// lacks, a wrong key, low > high, an unknown tier or device class, removing a tier in use)
// is refused with a clear error and changes nothing; the secret key is never printed; the
// tier status reports a device class past its high mark from the nodes' --capacity and
// their stores' accounting.
func TestTierAdmin(t *testing.T) {
	tc := startCluster(t, 1, "--device-class", "ssd", "--capacity", "1MiB")
	remote := startProc(t, t.TempDir())
	ctx := context.Background()
	if _, err := remote.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("archive")}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()

	unchanged := func(what string, epoch uint64) {
		t.Helper()
		if st := tc.status(0); st.Epoch != epoch {
			t.Fatalf("%s: the map changed (epoch %d, was %d)", what, st.Epoch, epoch)
		}
	}
	refused := func(what, want string, secret string, args ...string) {
		t.Helper()
		epoch := tc.status(0).Epoch
		out, err := tc.tierAdmin(0, secret, args...)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("%s: %v\n%s\nwant an error with %q", what, err, out, want)
		}
		if strings.Contains(out, testSecret) {
			t.Fatalf("%s: the secret key is printed:\n%s", what, out)
		}
		t.Logf("%s: %s", what, strings.TrimSpace(out))
		unchanged(what, epoch)
	}
	add := []string{"tier", "add", "remote", "--endpoint", remote.URL(), "--bucket", "archive", "--access-key", testAccess, "--recall", "transparent"}
	refused("unreachable endpoint", "does not answer", testSecret, "tier", "add", "remote", "--endpoint", dead, "--bucket", "archive", "--access-key", testAccess, "--recall", "transparent")
	refused("missing bucket", "no such bucket", testSecret, "tier", "add", "remote", "--endpoint", remote.URL(), "--bucket", "nosuch", "--access-key", testAccess, "--recall", "transparent")
	refused("wrong secret", "key is refused", "wrong-secret-key-0123456789abcdefghijkl", add...)
	refused("endpoint with a path", "without path", testSecret, "tier", "add", "remote", "--endpoint", remote.URL()+"/archive", "--bucket", "archive", "--access-key", testAccess, "--recall", "transparent")
	refused("class tier of STANDARD", "not restricted to a device class", "", "tier", "add", "cold", "--class", "STANDARD")
	if out, err := tc.tierAdmin(0, "", "tier", "list"); err != nil || !strings.Contains(out, "no tiers") {
		t.Fatalf("tier list after the refusals: %v\n%s", err, out)
	}

	if out, err := tc.tierAdmin(0, testSecret, add...); err != nil {
		t.Fatalf("tier add: %v\n%s", err, out)
	}
	refused("same name", "exists", testSecret, add...)
	out, err := tc.tierAdmin(0, "", "--json", "tier", "list")
	if err != nil {
		t.Fatalf("tier list: %v\n%s", err, out)
	}
	var tiers []server.TierInfo
	if err := json.Unmarshal([]byte(out), &tiers); err != nil {
		t.Fatalf("tier list --json: %v\n%s", err, out)
	}
	if len(tiers) != 1 || tiers[0].Name != "remote" || tiers[0].Kind != "s3" || tiers[0].RecallMode != "transparent" || !tiers[0].Credentials || tiers[0].Secret != "" || tiers[0].AccessKey != "" {
		t.Fatalf("tier list: %+v", tiers)
	}
	if strings.Contains(out, testSecret) {
		t.Fatalf("tier list prints the secret key:\n%s", out)
	}

	refused("low > high", "0 < low < high <= 100", "", "tier", "marks", "ssd", "--high", "70", "--low", "85", "--tier", "remote")
	refused("unknown tier", `no tier "tape"`, "", "tier", "marks", "ssd", "--high", "85", "--low", "70", "--tier", "tape")
	refused("unknown device class", `device class "nvme"`, "", "tier", "marks", "nvme", "--high", "85", "--low", "70", "--tier", "remote")
	refused("remove unknown tier", `no tier "tape"`, "", "tier", "remove", "tape")
	// Paused: this test checks the figures, TestTierMigration the moving.
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "85", "--low", "70", "--tier", "remote", "--pause"); err != nil {
		t.Fatalf("tier marks: %v\n%s", err, out)
	}
	refused("remove the tier in use", "water marks", "", "tier", "remove", "remote")

	// Fill the 1 MiB node past 85 %.
	tc.createBucket(0, "bkt")
	c := tc.procs[0].client()
	for i := range 4 {
		body := bytes.Repeat([]byte{byte(i)}, 256<<10)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(fmt.Sprintf("k%d", i)), Body: bytes.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	proctest.WaitFor(t, 20*time.Second, func() error {
		out, err := tc.tierAdmin(0, "", "--json", "tier", "status")
		if err != nil {
			return fmt.Errorf("tier status: %v\n%s", err, out)
		}
		var sts []server.TierStatus
		if err := json.Unmarshal([]byte(out), &sts); err != nil {
			return fmt.Errorf("tier status --json: %v\n%s", err, out)
		}
		if len(sts) != 1 || sts[0].DeviceClass != "ssd" || sts[0].Capacity != 1<<20 || sts[0].Nodes != 1 || sts[0].Answered != 1 {
			return fmt.Errorf("tier status: %+v", sts)
		}
		s := sts[0]
		if !s.OverHigh || s.BytesToMove != s.UsedBytes-(1<<20)*70/100 {
			return fmt.Errorf("tier status: %+v, want over the high mark with used - 70 %% to move", s)
		}
		return nil
	})
	if out, err := tc.tierAdmin(0, "", "tier", "status"); err != nil || !strings.Contains(out, "paused") {
		t.Fatalf("tier status: %v\n%s", err, out)
	}
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--clear"); err != nil {
		t.Fatalf("tier marks --clear: %v\n%s", err, out)
	}
	// A tier whose bucket holds objects is not removed without --force.
	if _, err := remote.client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("archive"), Key: aws.String("x"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	refused("remove a tier that holds objects", "still holds objects", "", "tier", "remove", "remote")
	if out, err := tc.tierAdmin(0, "", "tier", "remove", "remote", "--force"); err != nil || !strings.Contains(out, "no tiers") {
		t.Fatalf("tier remove --force: %v\n%s", err, out)
	}
}

// tierStatus returns node i's `admin tier status` for device class ssd.
func (tc *testCluster) tierStatus(i int) (server.TierStatus, error) {
	out, err := tc.tierAdmin(i, "", "--json", "tier", "status")
	if err != nil {
		return server.TierStatus{}, fmt.Errorf("tier status: %v\n%s", err, out)
	}
	var sts []server.TierStatus
	if err := json.Unmarshal([]byte(out), &sts); err != nil || len(sts) != 1 {
		return server.TierStatus{}, fmt.Errorf("tier status --json: %v\n%s", err, out)
	}
	return sts[0], nil
}

// archived returns the keys of bucket whose replicas are all stubs in a tier.
func (tc *testCluster) archived(bucket string, keys []string) map[string]bool {
	out := map[string]bool{}
	for _, k := range keys {
		v := tc.replicas(0, bucket, k)
		all := len(v.Replicas) > 0
		for _, r := range v.Replicas {
			all = all && strings.HasPrefix(r.Layout, "archived in tier")
		}
		if all {
			out[k] = true
		}
	}
	return out
}

type tierObject struct {
	key  string
	body []byte
	etag string
}

// putTierObjects writes n objects of size bytes to bucket, in key order, each with
// user metadata n=<index>.
func putTierObjects(t *testing.T, c *s3.Client, bucket string, n, size int) []tierObject {
	t.Helper()
	var objs []tierObject
	for i := range n {
		body := bytes.Repeat([]byte(fmt.Sprintf("%03d", i)), size/3+1)[:size]
		k := fmt.Sprintf("k%03d", i)
		out, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: bytes.NewReader(body),
			ContentType: aws.String("application/x-tier"), Metadata: map[string]string{"n": fmt.Sprint(i)}})
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, tierObject{key: k, body: body, etag: aws.ToString(out.ETag)})
	}
	return objs
}

// checkTierObjects checks that every object lists, HEADs (metadata, no Glacier class)
// and reads as written.
func checkTierObjects(t *testing.T, c *s3.Client, bucket string, objs []tierObject) {
	t.Helper()
	ctx := context.Background()
	lo, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil || len(lo.Contents) != len(objs) {
		t.Fatalf("list: %v, %d objects, want %d", err, len(lo.Contents), len(objs))
	}
	for i, o := range lo.Contents {
		if aws.ToString(o.Key) != objs[i].key || aws.ToString(o.ETag) != objs[i].etag || aws.ToInt64(o.Size) != int64(len(objs[i].body)) ||
			(o.StorageClass != "" && o.StorageClass != "STANDARD") {
			t.Fatalf("listed %s %s %d %s, want %s %s %d", aws.ToString(o.Key), aws.ToString(o.ETag), aws.ToInt64(o.Size), o.StorageClass, objs[i].key, objs[i].etag, len(objs[i].body))
		}
	}
	for i, o := range objs {
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(o.key)})
		if err != nil || aws.ToString(h.ETag) != o.etag || h.Metadata["n"] != fmt.Sprint(i) || aws.ToString(h.ContentType) != "application/x-tier" ||
			(h.StorageClass != "" && h.StorageClass != "STANDARD") {
			t.Fatalf("head %s: %+v, %v", o.key, h, err)
		}
		got, err := getBody(ctx, c, bucket, o.key)
		if err != nil || !bytes.Equal(got, o.body) {
			t.Fatalf("get %s: %d bytes, %v; want the %d written", o.key, len(got), err, len(o.body))
		}
	}
}

// TestTierMigration: a node of device class ssd filled past its high mark (--capacity
// 4MiB) migrates its least recently used objects to a second cairn (an external tier)
// until it is under its low mark: the three oldest were read since (access times to the
// millisecond here), so the next oldest go first; every object still lists and HEADs
// with its ETag and metadata (without touching the tier) and reads back identical
// (transparent recall, which brings the object back and deletes the tier's copy).
func TestTierMigration(t *testing.T) {
	remote := startProc(t, t.TempDir())
	ctx := context.Background()
	rc := remote.client()
	if _, err := rc.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("archive")}); err != nil {
		t.Fatal(err)
	}
	tc := startCluster(t, 1, "--device-class", "ssd", "--capacity", "4MiB", "--tier-check", "100ms", "--access-granularity", "1ms")
	if out, err := tc.tierAdmin(0, testSecret, "tier", "add", "remote", "--endpoint", remote.URL(), "--bucket", "archive", "--access-key", testAccess, "--recall", "transparent"); err != nil {
		t.Fatalf("tier add: %v\n%s", err, out)
	}
	tc.createBucket(0, "data")
	c := tc.procs[0].client()
	objs := putTierObjects(t, c, "data", 12, 256<<10) // 3 MiB: 75 % of 4 MiB
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.key
	}
	const read = 3 // the oldest three are read: used more recently than the others
	for _, o := range objs[:read] {
		if _, err := getBody(ctx, c, "data", o.key); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "50", "--low", "30", "--tier", "remote"); err != nil {
		t.Fatalf("tier marks: %v\n%s", err, out)
	}
	var st server.TierStatus
	proctest.WaitFor(t, 60*time.Second, func() error {
		var err error
		if st, err = tc.tierStatus(0); err != nil {
			return err
		}
		if st.Migrating || st.OverHigh || st.BytesDone == 0 || st.Percent > 30 {
			return fmt.Errorf("not under the low mark yet: %+v", st)
		}
		return nil
	})
	t.Logf("tier status: %.1f %% used, %d bytes in %d objects moved", st.Percent, st.BytesDone, st.Objects)
	// Stop moving before reading: a recall brings objects back, past the high mark again.
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "50", "--low", "30", "--tier", "remote", "--pause"); err != nil {
		t.Fatalf("tier marks --pause: %v\n%s", err, out)
	}
	arch := tc.archived("data", keys)
	if len(arch) == 0 || len(arch) == len(objs) || int64(len(arch)) != st.Objects {
		t.Fatalf("archived %v; status says %d objects", arch, st.Objects)
	}
	for i, k := range keys { // least recently used first: the oldest of those not read
		if arch[k] != (i >= read && i < read+len(arch)) {
			t.Fatalf("archived %v: not the %d least recently used (k%03d on)", arch, len(arch), read)
		}
	}
	ro, err := rc.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("archive")})
	if err != nil || len(ro.Contents) != len(arch) {
		t.Fatalf("the tier holds %d objects (%v), want %d", len(ro.Contents), err, len(arch))
	}
	checkTierObjects(t, c, "data", objs)
	// The GETs streamed from the tier; the recalls ran behind them.
	proctest.WaitFor(t, 30*time.Second, func() error {
		ro, err := rc.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("archive")})
		if err != nil || len(ro.Contents) != 0 {
			return fmt.Errorf("the tier holds %d objects after the recalls (%v), want 0", len(ro.Contents), err)
		}
		return nil
	})
	if n := metricValue(t, tc.procs[0], "cairn_tier_recalls_total"); int(n) != len(arch) {
		t.Fatalf("%v recalls, want %d", n, len(arch))
	}
}

// TestTierMigrationFaults: the migrating node is killed mid-migration and the external
// tier stops mid-migration: no object is lost, every object keeps listing and HEADing
// while the tier is away, and the migration resumes (after the restart, and once the
// tier is back) until the node is under its low mark; then every object reads back
// identical.
func TestTierMigrationFaults(t *testing.T) {
	remote := startProc(t, t.TempDir())
	ctx := context.Background()
	if _, err := remote.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("archive")}); err != nil {
		t.Fatal(err)
	}
	// Paced at 1 MiB/s (the background budget's ceiling), so the faults land mid-way.
	tc := startCluster(t, 1, "--device-class", "ssd", "--capacity", "8MiB", "--tier-check", "100ms", "--recovery-rate", "1MiB")
	if out, err := tc.tierAdmin(0, testSecret, "tier", "add", "remote", "--endpoint", remote.URL(), "--bucket", "archive", "--access-key", testAccess, "--recall", "transparent"); err != nil {
		t.Fatalf("tier add: %v\n%s", err, out)
	}
	tc.createBucket(0, "data")
	c := tc.procs[0].client()
	objs := putTierObjects(t, c, "data", 24, 256<<10) // 6 MiB: 75 % of 8 MiB
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "50", "--low", "20", "--tier", "remote"); err != nil {
		t.Fatalf("tier marks: %v\n%s", err, out)
	}
	migrating := func(min int64) {
		t.Helper()
		proctest.WaitFor(t, 60*time.Second, func() error {
			st, err := tc.tierStatus(0)
			if err != nil {
				return err
			}
			if !st.Migrating || st.Objects < min {
				return fmt.Errorf("not migrating yet: %+v", st)
			}
			return nil
		})
	}
	migrating(2)
	tc.procs[0].Kill()
	tc.procs[0].Restart()
	migrating(1) // resumed: still past the high mark
	remote.Kill()
	proctest.WaitFor(t, 60*time.Second, func() error {
		st, err := tc.tierStatus(0)
		if err != nil {
			return err
		}
		if st.Errors == 0 {
			return fmt.Errorf("no failed migration yet: %+v", st)
		}
		return nil
	})
	// The tier is away: listing and HEAD need only the records.
	lo, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("data")})
	if err != nil || len(lo.Contents) != len(objs) {
		t.Fatalf("list with the tier away: %v, %d objects", err, len(lo.Contents))
	}
	for i, o := range objs {
		h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String(o.key)})
		if err != nil || aws.ToString(h.ETag) != o.etag || h.Metadata["n"] != fmt.Sprint(i) {
			t.Fatalf("head %s with the tier away: %+v, %v", o.key, h, err)
		}
	}
	remote.Restart()
	var st server.TierStatus
	proctest.WaitFor(t, 90*time.Second, func() error {
		if st, err = tc.tierStatus(0); err != nil {
			return err
		}
		if st.Migrating || st.OverHigh || st.Percent > 20 {
			return fmt.Errorf("not under the low mark yet: %+v", st)
		}
		return nil
	})
	t.Logf("after the faults: %.1f %% used; this run moved %d bytes in %d objects, %d errors", st.Percent, st.BytesDone, st.Objects, st.Errors)
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "50", "--low", "20", "--tier", "remote", "--pause"); err != nil {
		t.Fatalf("tier marks --pause: %v\n%s", err, out)
	}
	checkTierObjects(t, c, "data", objs)
}

// TestTierRestore: an external tier in its default recall mode (restore, as S3 Glacier):
// a GET of an archived object is 403 InvalidObjectState and its HEAD says GLACIER;
// RestoreObject with Days answers 202 and makes a temporary copy; then the GET succeeds
// with the same bytes, HEAD says GLACIER and x-amz-restore with the expiry date, and a
// second RestoreObject answers 200. A bad RestoreRequest changes nothing.
func TestTierRestore(t *testing.T) {
	remote := startProc(t, t.TempDir())
	ctx := context.Background()
	if _, err := remote.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("archive")}); err != nil {
		t.Fatal(err)
	}
	tc := startCluster(t, 1, "--device-class", "ssd", "--capacity", "1MiB", "--tier-check", "100ms")
	if out, err := tc.tierAdmin(0, testSecret, "tier", "add", "glacier", "--endpoint", remote.URL(), "--bucket", "archive", "--access-key", testAccess); err != nil || !strings.Contains(out, "restore") {
		t.Fatalf("tier add: %v\n%s", err, out)
	}
	tc.createBucket(0, "data")
	c := tc.procs[0].client()
	objs := putTierObjects(t, c, "data", 4, 256<<10) // 1 MiB: 100 %
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "50", "--low", "30", "--tier", "glacier"); err != nil {
		t.Fatalf("tier marks: %v\n%s", err, out)
	}
	proctest.WaitFor(t, 60*time.Second, func() error {
		st, err := tc.tierStatus(0)
		if err != nil {
			return err
		}
		if st.Migrating || st.OverHigh || st.BytesDone == 0 {
			return fmt.Errorf("not under the low mark yet: %+v", st)
		}
		return nil
	})
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "50", "--low", "30", "--tier", "glacier", "--pause"); err != nil {
		t.Fatalf("pause: %v\n%s", err, out)
	}
	o := objs[0] // the oldest: archived
	if !tc.archived("data", []string{o.key})[o.key] {
		t.Fatalf("%s is not archived", o.key)
	}
	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String(o.key)})
	if err != nil || h.StorageClass != "GLACIER" || aws.ToString(h.ETag) != o.etag || h.Restore != nil {
		t.Fatalf("head of the archived object: %+v, %v; want GLACIER, its ETag, no x-amz-restore", h, err)
	}
	lo, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("data"), Prefix: aws.String(o.key)})
	if err != nil || len(lo.Contents) != 1 || lo.Contents[0].StorageClass != types.ObjectStorageClassGlacier || aws.ToString(lo.Contents[0].ETag) != o.etag {
		t.Fatalf("list of the archived object: %+v, %v; want GLACIER and its ETag", lo, err)
	}
	_, err = getBody(ctx, c, "data", o.key)
	if code := s3Code(err); code != "InvalidObjectState" {
		t.Fatalf("get before the restore: %v (%s), want InvalidObjectState", err, code)
	}
	_, err = c.RestoreObject(ctx, &s3.RestoreObjectInput{Bucket: aws.String("data"), Key: aws.String(o.key), RestoreRequest: &types.RestoreRequest{}})
	if code := s3Code(err); code != "MalformedXML" {
		t.Fatalf("restore without Days: %v, want MalformedXML", err)
	}
	out, err := c.RestoreObject(ctx, &s3.RestoreObjectInput{Bucket: aws.String("data"), Key: aws.String(o.key), RestoreRequest: &types.RestoreRequest{Days: aws.Int32(1)}})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if out == nil {
		t.Fatal("no answer to the restore")
	}
	var got []byte
	proctest.WaitFor(t, 30*time.Second, func() error {
		var err error
		got, err = getBody(ctx, c, "data", o.key)
		return err
	})
	if !bytes.Equal(got, o.body) {
		t.Fatalf("restored %s: %d bytes differ from the %d written", o.key, len(got), len(o.body))
	}
	// A temporary copy: the object stays archived (GLACIER) and says until when.
	h, err = c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("data"), Key: aws.String(o.key)})
	exp := time.Now().UTC().Add(24 * time.Hour).Truncate(24 * time.Hour).Add(24 * time.Hour).Format(http.TimeFormat)
	if err != nil || h.StorageClass != "GLACIER" || h.Metadata["n"] != "0" || aws.ToString(h.Restore) != `ongoing-request="false", expiry-date="`+exp+`"` {
		t.Fatalf("head after the restore: %+v (x-amz-restore %q), %v", h, aws.ToString(h.Restore), err)
	}
	if _, err := c.RestoreObject(ctx, &s3.RestoreObjectInput{Bucket: aws.String("data"), Key: aws.String(o.key), RestoreRequest: &types.RestoreRequest{Days: aws.Int32(1)}}); err != nil {
		t.Fatalf("restore of a restored object: %v", err)
	}
}

// TestTierClassMigration: a device-class tier. The ssd node, past its high mark, moves
// its least recently read objects into the erasure-coded class COLD of the archive nodes
// (copies checked against their MD5) until it is under its low mark; every object lists
// and HEADs with its ETag and metadata and reads back identical (a transparent recall,
// once for 16 concurrent GETs); the migrating node killed mid-migration loses nothing,
// and the migration resumes after its restart. A lifecycle Transition to the tier is
// taken, one to a tier the cluster lacks refused.
func TestTierClassMigration(t *testing.T) {
	tc := startCluster(t, 0)
	tc.add("--device-class", "ssd", "--capacity", "4MiB", "--tier-check", "100ms", "--access-granularity", "1ms", "--recovery-rate", "1MiB")
	for range 3 {
		tc.add("--device-class", "archive")
	}
	tc.waitVoters(3)
	for i := range tc.procs { // placement settled: the ssd node's share of the keys is known
		tc.waitState(nodeID(i), clustermap.StateUp, 30*time.Second)
	}
	if out, err := tc.admin(0, "class", "create", "COLD", "--ec", "2+1", "--device-class", "archive"); err != nil {
		t.Fatalf("class create: %v\n%s", err, out)
	}
	// Class tiers need feature level 9: refused with a clear error until the leader raised it.
	proctest.WaitFor(t, 30*time.Second, func() error {
		out, err := tc.tierAdmin(0, "", "tier", "add", "cold", "--class", "COLD")
		if err != nil {
			return fmt.Errorf("tier add: %v\n%s", err, out)
		}
		return nil
	})
	tc.createBucket(0, "data")
	ctx := context.Background()
	c := tc.procs[0].client()
	// A lifecycle Transition names a tier: COLD (the tier cold) is taken, a tier the
	// cluster lacks is InvalidStorageClass and changes nothing.
	transition := func(class string) error {
		_, err := c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String("data"),
			LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{{ID: aws.String("t"),
				Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("never/")},
				Transitions: []types.Transition{{Days: aws.Int32(30), StorageClass: types.TransitionStorageClass(class)}}}}}})
		return err
	}
	if err := transition("COLD"); err != nil {
		t.Fatalf("transition to the tier: %v", err)
	}
	if err := transition("GLACIER"); s3Code(err) != "InvalidStorageClass" {
		t.Fatalf("transition to no tier: %v, want InvalidStorageClass", err)
	}
	lc, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("data")})
	if err != nil || len(lc.Rules) != 1 || len(lc.Rules[0].Transitions) != 1 || lc.Rules[0].Transitions[0].StorageClass != "COLD" {
		t.Fatalf("the stored configuration: %+v, %v", lc, err)
	}
	objs := putTierObjects(t, c, "data", 16, 256<<10)
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.key
	}
	var used int64 // the ssd node's share: the keys it holds a copy of
	var mine []tierObject
	for _, o := range objs {
		for _, id := range tc.replicas(0, "data", o.key).Nodes {
			if id == nodeID(0) {
				mine = append(mine, o)
				used += int64(len(o.body))
			}
		}
	}
	t.Logf("the ssd node holds %d objects, %d bytes", len(mine), used)
	if len(mine) < 6 {
		t.Fatalf("the ssd node holds %d of the %d objects: too few for the test", len(mine), len(objs))
	}
	// Read the two oldest of its objects: used more recently than the others.
	for _, o := range mine[:2] {
		if _, err := getBody(ctx, c, "data", o.key); err != nil {
			t.Fatal(err)
		}
	}
	pct := int(used * 100 / (4 << 20))
	under := func(low int) server.TierStatus {
		t.Helper()
		var st server.TierStatus
		proctest.WaitFor(t, 60*time.Second, func() error {
			var err error
			if st, err = tc.tierStatus(0); err != nil {
				return err
			}
			if st.Migrating || st.OverHigh || st.BytesDone == 0 || st.Percent > float64(low) {
				return fmt.Errorf("not under the low mark yet: %+v", st)
			}
			return nil
		})
		return st
	}
	marks := func(paused bool, high, low int) {
		t.Helper()
		args := []string{"tier", "marks", "ssd", "--high", fmt.Sprint(high), "--low", fmt.Sprint(low), "--tier", "cold"}
		if paused {
			args = append(args, "--pause")
		}
		if out, err := tc.tierAdmin(0, "", args...); err != nil {
			t.Fatalf("tier marks %v: %v\n%s", args, err, out)
		}
	}
	marks(false, pct-10, pct/2)
	st := under(pct / 2)
	marks(true, pct-10, pct/2)
	t.Logf("tier status: %.1f %% used, %d bytes in %d objects moved", st.Percent, st.BytesDone, st.Objects)
	arch := tc.archived("data", keys)
	if len(arch) == 0 || len(arch) == len(mine) {
		t.Fatalf("archived %v of the ssd node's %d objects", arch, len(mine))
	}
	lru := append(append([]tierObject{}, mine[2:]...), mine[:2]...) // least recently used first
	for i, o := range lru {
		if arch[o.key] != (i < len(arch)) {
			t.Fatalf("archived %v: not the %d least recently used of the ssd node's objects (%s first)", arch, len(arch), lru[0].key)
		}
	}
	// 16 concurrent GETs of one archived object: one recall, identical bytes.
	one := mine[2]
	before := metricValue(t, tc.procs[0], "cairn_tier_recalls_total")
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			got, err := getBody(ctx, c, "data", one.key)
			if err == nil && !bytes.Equal(got, one.body) {
				err = fmt.Errorf("got %d bytes that differ from the %d written", len(got), len(one.body))
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent get of %s: %v", one.key, err)
		}
	}
	proctest.WaitFor(t, 30*time.Second, func() error { // the recall runs behind the GETs
		if a := tc.archived("data", []string{one.key}); len(a) != 0 {
			return fmt.Errorf("%s still archived", one.key)
		}
		return nil
	})
	if n := metricValue(t, tc.procs[0], "cairn_tier_recalls_total") - before; n != 1 {
		t.Fatalf("%v recalls for 16 concurrent GETs, want 1", n)
	}
	checkTierObjects(t, c, "data", objs) // recalls the rest: past the high mark again
	proctest.WaitFor(t, 30*time.Second, func() error {
		if a := tc.archived("data", keys); len(a) != 0 {
			return fmt.Errorf("still archived after the reads: %v", a)
		}
		return nil
	})
	// Again, with lower marks, killing the migrating node mid-migration while it is still
	// past its high mark (a node between the marks does not start again: hysteresis).
	marks(false, pct/2, pct/5)
	proctest.WaitFor(t, 60*time.Second, func() error {
		st, err := tc.tierStatus(0)
		if err != nil {
			return err
		}
		if !st.Migrating || st.Objects < 1 || !st.OverHigh {
			return fmt.Errorf("not migrating yet: %+v", st)
		}
		return nil
	})
	tc.procs[0].Kill()
	tc.procs[0].Restart()
	st = under(pct / 5)
	marks(true, pct/2, pct/5)
	t.Logf("after the restart: %.1f %% used; this run moved %d bytes in %d objects", st.Percent, st.BytesDone, st.Objects)
	if len(tc.archived("data", keys)) == 0 {
		t.Fatal("nothing archived after the restart")
	}
	checkTierObjects(t, c, "data", objs)
}
