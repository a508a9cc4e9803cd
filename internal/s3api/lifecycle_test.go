package s3api_test

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// TestBucketLifecycle: put, get and delete a lifecycle configuration through
// aws-sdk-go-v2 (generated IDs, every filter and action), 404 without one, and every
// refusal of a bad document, none of which changes the stored configuration.
func TestBucketLifecycle(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "lcb")

	_, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("lcb")})
	wantCode(t, err, "NoSuchLifecycleConfiguration")
	_, err = c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("nobucket")})
	wantCode(t, err, "NoSuchBucket")

	date := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rules := []types.LifecycleRule{
		{ID: aws.String("logs"), Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{Prefix: aws.String("logs/")},
			Expiration: &types.LifecycleExpiration{Days: aws.Int32(30)}},
		{Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{And: &types.LifecycleRuleAndOperator{
			Prefix: aws.String("tmp/"), Tags: []types.Tag{{Key: aws.String("k"), Value: aws.String("v")}}, ObjectSizeGreaterThan: aws.Int64(10), ObjectSizeLessThan: aws.Int64(1000)}},
			Expiration: &types.LifecycleExpiration{Date: &date}},
		{ID: aws.String("versions"), Status: types.ExpirationStatusDisabled, Filter: &types.LifecycleRuleFilter{},
			NoncurrentVersionExpiration:    &types.NoncurrentVersionExpiration{NoncurrentDays: aws.Int32(7), NewerNoncurrentVersions: aws.Int32(2)},
			AbortIncompleteMultipartUpload: &types.AbortIncompleteMultipartUpload{DaysAfterInitiation: aws.Int32(3)}},
		{ID: aws.String("markers"), Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{ObjectSizeLessThan: aws.Int64(5)},
			Expiration: &types.LifecycleExpiration{ExpiredObjectDeleteMarker: aws.Bool(true)}},
	}
	put := func(rules []types.LifecycleRule) error {
		_, err := c.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String("lcb"),
			LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: rules}})
		return err
	}
	if err := put(rules); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("lcb")})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Rules) != 4 {
		t.Fatalf("rules %+v", out.Rules)
	}
	r0, r1, r2, r3 := out.Rules[0], out.Rules[1], out.Rules[2], out.Rules[3]
	if aws.ToString(r0.ID) != "logs" || aws.ToString(r0.Filter.Prefix) != "logs/" || aws.ToInt32(r0.Expiration.Days) != 30 || r0.Status != types.ExpirationStatusEnabled {
		t.Fatalf("rule 0 %+v", r0)
	}
	if len(aws.ToString(r1.ID)) != 48 || r1.Filter.And == nil || aws.ToString(r1.Filter.And.Prefix) != "tmp/" || len(r1.Filter.And.Tags) != 1 ||
		aws.ToInt64(r1.Filter.And.ObjectSizeGreaterThan) != 10 || aws.ToInt64(r1.Filter.And.ObjectSizeLessThan) != 1000 || !r1.Expiration.Date.Equal(date) {
		t.Fatalf("rule 1 (generated ID) %+v", r1)
	}
	if r2.Status != types.ExpirationStatusDisabled || aws.ToInt32(r2.NoncurrentVersionExpiration.NoncurrentDays) != 7 ||
		aws.ToInt32(r2.NoncurrentVersionExpiration.NewerNoncurrentVersions) != 2 || aws.ToInt32(r2.AbortIncompleteMultipartUpload.DaysAfterInitiation) != 3 {
		t.Fatalf("rule 2 %+v", r2)
	}
	if !aws.ToBool(r3.Expiration.ExpiredObjectDeleteMarker) || aws.ToInt64(r3.Filter.ObjectSizeLessThan) != 5 {
		t.Fatalf("rule 3 %+v", r3)
	}
	stored := getLifecycleDoc(t, srv.URL)

	// Refusals through the SDK.
	days := func(n int32) []types.LifecycleRule {
		return []types.LifecycleRule{{Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{}, Expiration: &types.LifecycleExpiration{Days: aws.Int32(n)}}}
	}
	wantCode(t, put(days(0)), "InvalidArgument")
	wantCode(t, put(days(-3)), "InvalidArgument")
	dup := append(days(1), days(2)...)
	dup[0].ID, dup[1].ID = aws.String("same"), aws.String("same")
	wantCode(t, put(dup), "InvalidArgument")
	long := days(1)
	long[0].ID = aws.String(strings.Repeat("x", 256))
	wantCode(t, put(long), "InvalidArgument")

	// Refusals of raw documents (what an SDK would not send), each with Content-MD5.
	rule := func(body string) string {
		return "<LifecycleConfiguration><Rule><Filter/><Status>Enabled</Status>" + body + "</Rule></LifecycleConfiguration>"
	}
	for _, tt := range []struct {
		name, doc string
		status    int
		code      string
	}{
		{"not xml", "<LifecycleConfiguration><Rule>", 400, "MalformedXML"},
		{"date not at midnight", rule("<Expiration><Date>2030-01-01T12:00:00Z</Date></Expiration>"), 400, "InvalidArgument"},
		{"days and date", rule("<Expiration><Days>1</Days><Date>2030-01-01T00:00:00Z</Date></Expiration>"), 400, "MalformedXML"},
		{"marker with days", rule("<Expiration><Days>1</Days><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>"), 400, "MalformedXML"},
		{"too many rules", "<LifecycleConfiguration>" + strings.Repeat("<Rule><Filter/><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>", 1001) + "</LifecycleConfiguration>", 400, "MalformedXML"},
		{"abort with tags", "<LifecycleConfiguration><Rule><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule></LifecycleConfiguration>", 400, "InvalidRequest"},
		{"marker with tags", "<LifecycleConfiguration><Rule><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter><Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration></Rule></LifecycleConfiguration>", 400, "InvalidRequest"},
		{"no action", rule(""), 400, "InvalidRequest"},
		{"noncurrent days zero", rule("<NoncurrentVersionExpiration><NoncurrentDays>0</NoncurrentDays></NoncurrentVersionExpiration>"), 400, "InvalidArgument"},
		{"abort days zero", rule("<AbortIncompleteMultipartUpload><DaysAfterInitiation>0</DaysAfterInitiation></AbortIncompleteMultipartUpload>"), 400, "InvalidArgument"},
		{"transition to no tier", rule("<Transition><Days>30</Days><StorageClass>GLACIER</StorageClass></Transition>"), 400, "InvalidStorageClass"},
		{"expiration before transition", rule("<Transition><Days>30</Days><StorageClass>GLACIER</StorageClass></Transition><Expiration><Days>10</Days></Expiration>"), 400, "InvalidArgument"},
		{"transition without class", rule("<Transition><Days>30</Days></Transition>"), 400, "MalformedXML"},
		{"two transitions", rule("<Transition><Days>30</Days><StorageClass>a</StorageClass></Transition><Transition><Days>60</Days><StorageClass>b</StorageClass></Transition>"), 501, "NotImplemented"},
		{"noncurrent transition to no tier", rule("<NoncurrentVersionTransition><NoncurrentDays>30</NoncurrentDays><StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition>"), 400, "InvalidStorageClass"},
		{"noncurrent transition negative", rule("<NoncurrentVersionTransition><NoncurrentDays>-1</NoncurrentDays><StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition>"), 400, "InvalidArgument"},
		{"two noncurrent transitions", rule("<NoncurrentVersionTransition><NoncurrentDays>3</NoncurrentDays><StorageClass>a</StorageClass></NoncurrentVersionTransition><NoncurrentVersionTransition><NoncurrentDays>30</NoncurrentDays><StorageClass>b</StorageClass></NoncurrentVersionTransition>"), 501, "NotImplemented"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, body := do(t, signed(t, "PUT", srv.URL+"/lcb?lifecycle", []byte(tt.doc), map[string]string{"Content-MD5": contentMD5([]byte(tt.doc))}, time.Now()))
			expectS3Error(t, status, body, tt.status, tt.code)
			if got := getLifecycleDoc(t, srv.URL); got != stored {
				t.Fatalf("a refused document changed the configuration:\n%s\n%s", stored, got)
			}
		})
	}
	good := rule("<Expiration><Days>1</Days></Expiration>")
	status, body := do(t, signed(t, "PUT", srv.URL+"/lcb?lifecycle", []byte(good), nil, time.Now()))
	expectS3Error(t, status, body, 400, "InvalidRequest") // no Content-MD5 nor checksum
	if got := getLifecycleDoc(t, srv.URL); got != stored {
		t.Fatal("a refused request changed the configuration")
	}

	// x-amz-expiration on PUT, GET, HEAD, copy and multipart completion of an object a
	// current-version rule expires.
	po, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("lcb"), Key: aws.String("logs/a"), Body: strings.NewReader("x")})
	if err != nil {
		t.Fatal(err)
	}
	ho, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("lcb"), Key: aws.String("logs/a")})
	if err != nil {
		t.Fatal(err)
	}
	// Last-Modified has whole seconds; the object's time has nanoseconds (+1ns: rounding
	// up to midnight gives the same day unless the time was exactly on a second).
	due := ho.LastModified.UTC().Add(30*24*time.Hour + time.Nanosecond)
	if m := due.Truncate(24 * time.Hour); !m.Equal(due) {
		due = m.Add(24 * time.Hour)
	}
	want := `expiry-date="` + due.Format(http.TimeFormat) + `", rule-id="logs"`
	if aws.ToString(po.Expiration) != want || aws.ToString(ho.Expiration) != want {
		t.Fatalf("x-amz-expiration: PUT %q, HEAD %q, want %q", aws.ToString(po.Expiration), aws.ToString(ho.Expiration), want)
	}
	gob, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("lcb"), Key: aws.String("logs/a")})
	if err != nil {
		t.Fatal(err)
	}
	gob.Body.Close()
	if aws.ToString(gob.Expiration) != want {
		t.Fatalf("GET x-amz-expiration %q, want %q", aws.ToString(gob.Expiration), want)
	}
	cp, err := c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("lcb"), Key: aws.String("logs/copy"), CopySource: aws.String("lcb/logs/a")})
	if err != nil {
		t.Fatal(err)
	}
	if e := aws.ToString(cp.Expiration); !strings.Contains(e, `rule-id="logs"`) || !strings.HasPrefix(e, `expiry-date="`) {
		t.Fatalf("CopyObject x-amz-expiration %q", e)
	}
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("lcb"), Key: aws.String("logs/mpu")})
	if err != nil {
		t.Fatal(err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("lcb"), Key: aws.String("logs/mpu"), UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader("part")})
	if err != nil {
		t.Fatal(err)
	}
	done, err := c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String("lcb"), Key: aws.String("logs/mpu"), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: part.ETag}}}})
	if err != nil {
		t.Fatal(err)
	}
	if e := aws.ToString(done.Expiration); !strings.Contains(e, `rule-id="logs"`) {
		t.Fatalf("CompleteMultipartUpload x-amz-expiration %q", e)
	}
	po, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("lcb"), Key: aws.String("data/a"), Body: strings.NewReader("x")})
	if err != nil {
		t.Fatal(err)
	}
	if po.Expiration != nil {
		t.Fatalf("an object no rule expires has x-amz-expiration %q", aws.ToString(po.Expiration))
	}

	if _, err := c.DeleteBucketLifecycle(ctx, &s3.DeleteBucketLifecycleInput{Bucket: aws.String("lcb")}); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: aws.String("lcb")})
	wantCode(t, err, "NoSuchLifecycleConfiguration")
	if _, err := c.DeleteBucketLifecycle(ctx, &s3.DeleteBucketLifecycleInput{Bucket: aws.String("lcb")}); err != nil {
		t.Fatalf("delete of none: %v", err)
	}
}

func contentMD5(b []byte) string {
	s := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(s[:])
}

// getLifecycleDoc returns the bucket lcb's stored lifecycle document.
func getLifecycleDoc(t *testing.T, url string) string {
	t.Helper()
	status, body := do(t, signed(t, http.MethodGet, url+"/lcb?lifecycle", nil, nil, time.Now()))
	if status != 200 {
		t.Fatalf("GET ?lifecycle: %d %s", status, body)
	}
	return body
}

// TestLifecycleTransitionLevels: during a rolling upgrade a Transition rule is accepted
// from feature level 9 and a NoncurrentVersionTransition only from level 10 (a level-9
// runner refuses to parse it and would expire nothing in the bucket).
func TestLifecycleTransitionLevels(t *testing.T) {
	ctx := context.Background()
	transition := &types.Transition{Days: aws.Int32(30), StorageClass: "GLACIER"}
	noncurrent := &types.NoncurrentVersionTransition{NoncurrentDays: aws.Int32(30), StorageClass: "GLACIER"}
	for _, c := range []struct {
		level           int
		transition, non string // the error code, or "" for accepted
	}{
		{8, "ServiceUnavailable", "ServiceUnavailable"},
		{9, "", "ServiceUnavailable"},
		{10, "", ""},
	} {
		srv := testutil.StartServer(t, store.Config{Reserve: 1}, func(cfg *s3api.Config) {
			cfg.FeatureLevel = func() int { return c.level }
			cfg.ArchiveTier = func(name string) bool { return name == "glacier" }
		})
		cl := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
		mustCreateBucket(t, cl, "lvl")
		for _, rule := range []struct {
			want string
			r    types.LifecycleRule
		}{
			{c.transition, types.LifecycleRule{Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{}, Transitions: []types.Transition{*transition}}},
			{c.non, types.LifecycleRule{Status: types.ExpirationStatusEnabled, Filter: &types.LifecycleRuleFilter{}, NoncurrentVersionTransitions: []types.NoncurrentVersionTransition{*noncurrent}}},
		} {
			_, err := cl.PutBucketLifecycleConfiguration(ctx, &s3.PutBucketLifecycleConfigurationInput{Bucket: aws.String("lvl"),
				LifecycleConfiguration: &types.BucketLifecycleConfiguration{Rules: []types.LifecycleRule{rule.r}}})
			if rule.want == "" {
				if err != nil {
					t.Errorf("level %d: %+v refused: %v", c.level, rule.r, err)
				}
				continue
			}
			wantCode(t, err, rule.want)
		}
	}
}
