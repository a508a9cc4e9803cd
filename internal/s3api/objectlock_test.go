package s3api_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// testClock is a clock tests move forward (by less than the 15 minutes of skew a
// signature may have, since the clients sign with the real time).
type testClock struct{ off atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *testClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// TestObjectLock: Object Lock through the SDK on one node, time moved by an injected
// clock: GOVERNANCE retention yields to the bypass, COMPLIANCE retention and legal holds
// to nobody (the S3 layer, and the store underneath it, refuse), a COMPLIANCE retention can
// only be extended, delete markers are allowed, default retention applies, locks expire.
func TestObjectLock(t *testing.T) {
	clock := &testClock{}
	srv := testutil.StartServer(t, store.Config{Reserve: 1, Now: clock.now}, func(c *s3api.Config) { c.Now = clock.now })
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	ctx := context.Background()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("locked"), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	if v, err := c.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: aws.String("locked")}); err != nil || v.Status != types.BucketVersioningStatusEnabled {
		t.Fatalf("versioning of a bucket with Object Lock: %+v %v", v, err)
	}
	if lc, err := c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String("locked")}); err != nil ||
		lc.ObjectLockConfiguration.ObjectLockEnabled != types.ObjectLockEnabledEnabled {
		t.Fatalf("lock configuration: %+v %v", lc, err)
	}
	_, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("locked"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusSuspended}})
	wantCode(t, err, "InvalidBucketState")

	put := func(key string, mod func(*s3.PutObjectInput)) string {
		t.Helper()
		in := &s3.PutObjectInput{Bucket: aws.String("locked"), Key: aws.String(key), Body: bytes.NewReader([]byte("data of " + key))}
		if mod != nil {
			mod(in)
		}
		out, err := c.PutObject(ctx, in)
		if err != nil {
			t.Fatalf("put %s: %v", key, err)
		}
		return aws.ToString(out.VersionId)
	}
	del := func(key, vid string, bypass bool) error {
		_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("locked"), Key: aws.String(key), VersionId: aws.String(vid),
			BypassGovernanceRetention: aws.Bool(bypass)})
		return err
	}
	minute := clock.now().Add(time.Minute)
	gov := put("gov", func(in *s3.PutObjectInput) {
		in.ObjectLockMode, in.ObjectLockRetainUntilDate = types.ObjectLockModeGovernance, aws.Time(minute)
	})
	comp := put("comp", func(in *s3.PutObjectInput) {
		in.ObjectLockMode, in.ObjectLockRetainUntilDate = types.ObjectLockModeCompliance, aws.Time(minute)
	})
	held := put("held", func(in *s3.PutObjectInput) { in.ObjectLockLegalHoldStatus = types.ObjectLockLegalHoldStatusOn })

	h, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("locked"), Key: aws.String("comp")})
	if err != nil || h.ObjectLockMode != types.ObjectLockModeCompliance || h.ObjectLockRetainUntilDate == nil || !h.ObjectLockRetainUntilDate.Equal(minute.Truncate(time.Second)) {
		t.Fatalf("HEAD of a locked version: %+v %v", h, err)
	}

	// GOVERNANCE: refused, then allowed with the bypass.
	wantCode(t, del("gov", gov, false), "AccessDenied")
	if err := del("gov", gov, true); err != nil {
		t.Fatalf("delete with the governance bypass: %v", err)
	}
	// A GOVERNANCE retention in force may be extended without the bypass; changing its
	// mode to COMPLIANCE needs the bypass (S3: 403 AccessDenied without it).
	gov2 := put("gov2", func(in *s3.PutObjectInput) {
		in.ObjectLockMode, in.ObjectLockRetainUntilDate = types.ObjectLockModeGovernance, aws.Time(minute)
	})
	setGov2 := func(mode types.ObjectLockRetentionMode, until time.Time, bypass bool) error {
		_, err := c.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: aws.String("locked"), Key: aws.String("gov2"), VersionId: aws.String(gov2),
			Retention: &types.ObjectLockRetention{Mode: mode, RetainUntilDate: aws.Time(until)}, BypassGovernanceRetention: aws.Bool(bypass)})
		return err
	}
	wantCode(t, setGov2(types.ObjectLockRetentionModeCompliance, minute, false), "AccessDenied")
	wantCode(t, setGov2(types.ObjectLockRetentionModeCompliance, minute.Add(time.Minute), false), "AccessDenied")
	if err := setGov2(types.ObjectLockRetentionModeGovernance, minute.Add(time.Minute), false); err != nil {
		t.Fatalf("extend a GOVERNANCE retention: %v", err)
	}
	if err := setGov2(types.ObjectLockRetentionModeCompliance, minute.Add(time.Minute), true); err != nil {
		t.Fatalf("GOVERNANCE to COMPLIANCE with the bypass: %v", err)
	}
	if r, err := c.GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: aws.String("locked"), Key: aws.String("gov2"), VersionId: aws.String(gov2)}); err != nil ||
		r.Retention.Mode != types.ObjectLockRetentionModeCompliance {
		t.Fatalf("retention after the change of mode: %+v %v", r, err)
	}
	// COMPLIANCE: refused, bypass or not, through S3 and underneath it.
	wantCode(t, del("comp", comp, false), "AccessDenied")
	wantCode(t, del("comp", comp, true), "AccessDenied")
	hlc := compHLC(t, srv, "comp")
	if _, err := srv.Store.DeleteRecord("locked", "comp", object.Object{HLC: hlc, Versioned: true, Purged: true, Bypass: true}); !errors.IsErr(err, object.ErrLocked) {
		t.Fatalf("the store removed a version under COMPLIANCE retention: %v", err)
	}
	// It can be extended, not shortened nor turned into GOVERNANCE.
	setRet := func(mode types.ObjectLockRetentionMode, until time.Time, bypass bool) error {
		_, err := c.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: aws.String("locked"), Key: aws.String("comp"), VersionId: aws.String(comp),
			Retention: &types.ObjectLockRetention{Mode: mode, RetainUntilDate: aws.Time(until)}, BypassGovernanceRetention: aws.Bool(bypass)})
		return err
	}
	wantCode(t, setRet(types.ObjectLockRetentionModeCompliance, minute.Add(-30*time.Second), true), "AccessDenied")
	wantCode(t, setRet(types.ObjectLockRetentionModeGovernance, minute.Add(time.Minute), true), "AccessDenied")
	twoMinutes := minute.Add(time.Minute)
	if err := setRet(types.ObjectLockRetentionModeCompliance, twoMinutes, false); err != nil {
		t.Fatalf("extend a COMPLIANCE retention: %v", err)
	}
	if r, err := c.GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: aws.String("locked"), Key: aws.String("comp"), VersionId: aws.String(comp)}); err != nil ||
		!r.Retention.RetainUntilDate.Equal(twoMinutes.Truncate(time.Millisecond)) { // the SDK sends milliseconds
		t.Fatalf("retention after extending: %v (want %v) %v", r.Retention.RetainUntilDate, twoMinutes, err)
	}
	// A delete marker does not remove anything: allowed.
	if _, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("locked"), Key: aws.String("comp")}); err != nil {
		t.Fatalf("a delete marker over a locked version: %v", err)
	}
	if b, err := getVersion(t, c, "locked", "comp", comp); err != nil || string(b) != "data of comp" {
		t.Fatalf("the locked version after a delete marker: %v", err)
	}
	// Legal hold: refused until it is lifted.
	wantCode(t, del("held", held, true), "AccessDenied")
	if _, err := c.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: aws.String("locked"), Key: aws.String("held"), VersionId: aws.String(held),
		LegalHold: &types.ObjectLockLegalHold{Status: types.ObjectLockLegalHoldStatusOff}}); err != nil {
		t.Fatal(err)
	}
	if err := del("held", held, false); err != nil {
		t.Fatalf("delete after the legal hold was lifted: %v", err)
	}
	// Time passes: the extended retention expires, the version may go.
	clock.advance(time.Minute + 30*time.Second)
	wantCode(t, del("comp", comp, false), "AccessDenied")
	clock.advance(time.Minute)
	if err := del("comp", comp, false); err != nil {
		t.Fatalf("delete after the retention expired: %v", err)
	}

	// Default retention of the bucket.
	if _, err := c.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{Bucket: aws.String("locked"),
		ObjectLockConfiguration: &types.ObjectLockConfiguration{ObjectLockEnabled: types.ObjectLockEnabledEnabled,
			Rule: &types.ObjectLockRule{DefaultRetention: &types.DefaultRetention{Mode: types.ObjectLockRetentionModeGovernance, Days: aws.Int32(1)}}}}); err != nil {
		t.Fatal(err)
	}
	def := put("default", nil)
	if r, err := c.GetObjectRetention(ctx, &s3.GetObjectRetentionInput{Bucket: aws.String("locked"), Key: aws.String("default"), VersionId: aws.String(def)}); err != nil ||
		r.Retention.Mode != types.ObjectLockRetentionModeGovernance || r.Retention.RetainUntilDate.Before(clock.now().Add(23*time.Hour)) {
		t.Fatalf("default retention: %+v %v", r, err)
	}
	wantCode(t, del("default", def, false), "AccessDenied")

	// Malformed configurations and documents.
	badRule := func(days, years int32, mode types.ObjectLockRetentionMode) error {
		dr := &types.DefaultRetention{Mode: mode}
		if days != 0 {
			dr.Days = aws.Int32(days)
		}
		if years != 0 {
			dr.Years = aws.Int32(years)
		}
		_, err := c.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{Bucket: aws.String("locked"),
			ObjectLockConfiguration: &types.ObjectLockConfiguration{ObjectLockEnabled: types.ObjectLockEnabledEnabled, Rule: &types.ObjectLockRule{DefaultRetention: dr}}})
		return err
	}
	wantCode(t, badRule(1, 1, types.ObjectLockRetentionModeGovernance), "MalformedXML")
	wantCode(t, badRule(-1, 0, types.ObjectLockRetentionModeGovernance), "InvalidRetentionPeriod")
	wantCode(t, badRule(1, 0, "FOREVER"), "MalformedXML")
	_, err = c.PutObjectRetention(ctx, &s3.PutObjectRetentionInput{Bucket: aws.String("locked"), Key: aws.String("default"), VersionId: aws.String(def),
		Retention: &types.ObjectLockRetention{Mode: "FOREVER", RetainUntilDate: aws.Time(clock.now().Add(time.Hour))}})
	wantCode(t, err, "MalformedXML")
	_, err = c.PutObjectLegalHold(ctx, &s3.PutObjectLegalHoldInput{Bucket: aws.String("locked"), Key: aws.String("default"), VersionId: aws.String(def),
		LegalHold: &types.ObjectLockLegalHold{Status: "MAYBE"}})
	wantCode(t, err, "MalformedXML")

	// Buckets without Object Lock.
	mustCreateBucket(t, c, "plain")
	_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("plain"), Key: aws.String("k"), Body: bytes.NewReader(nil),
		ObjectLockLegalHoldStatus: types.ObjectLockLegalHoldStatusOn})
	wantCode(t, err, "InvalidRequest")
	_, err = c.PutObjectLockConfiguration(ctx, &s3.PutObjectLockConfigurationInput{Bucket: aws.String("plain"),
		ObjectLockConfiguration: &types.ObjectLockConfiguration{ObjectLockEnabled: types.ObjectLockEnabledEnabled}})
	wantCode(t, err, "InvalidBucketState")
	_, err = c.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String("plain")})
	wantCode(t, err, "ObjectLockConfigurationNotFoundError")
}

// compHLC returns the HLC of key's current version in bucket "locked".
func compHLC(t *testing.T, srv *testutil.Server, key string) uint64 {
	t.Helper()
	res, err := srv.Store.ListVersions("locked", object.VersionListOptions{Prefix: key, Max: 10})
	if err != nil || len(res.Versions) == 0 {
		t.Fatalf("versions of %s: %v", key, err)
	}
	return res.Versions[0].Object.HLC
}
