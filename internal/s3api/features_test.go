package s3api_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/testutil"
)

// opSample is one request per operation cairn serves, against the fixtures of
// TestFeatureTable; the table's entries are added to it.
type opSample struct {
	op, method, path string
	query            []string // "name=value" or a bare "name"
	hdr              map[string]string
	body             string
}

func featureSamples(uploadID string) []opSample {
	del := `<Delete><Object><Key>obj</Key></Object></Delete>`
	complete := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"00000000000000000000000000000000"</ETag></Part></CompleteMultipartUpload>`
	up := "uploadId=" + uploadID
	cp := map[string]string{"X-Amz-Copy-Source": "bkt/obj"}
	tagging := `<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag></TagSet></Tagging>`
	return []opSample{
		{op: "ListBuckets", method: "GET", path: "/"},
		{op: "CreateBucket", method: "PUT", path: "/newbkt"},
		{op: "HeadBucket", method: "HEAD", path: "/bkt"},
		{op: "DeleteBucket", method: "DELETE", path: "/empty"},
		{op: "GetBucketLocation", method: "GET", path: "/bkt", query: []string{"location"}},
		{op: "GetBucketVersioning", method: "GET", path: "/bkt", query: []string{"versioning"}},
		{op: "GetBucketAcl", method: "GET", path: "/bkt", query: []string{"acl"}},
		{op: "GetObjectAcl", method: "GET", path: "/bkt/obj", query: []string{"acl"}},
		{op: "PutBucketAcl", method: "PUT", path: "/bkt", query: []string{"acl"}, hdr: map[string]string{"X-Amz-Acl": "private"}},
		{op: "PutObjectAcl", method: "PUT", path: "/bkt/obj", query: []string{"acl"}, hdr: map[string]string{"X-Amz-Acl": "private"}},
		{op: "ListObjects", method: "GET", path: "/bkt"},
		{op: "ListObjectsV2", method: "GET", path: "/bkt", query: []string{"list-type=2"}},
		{op: "ListObjectVersions", method: "GET", path: "/bkt", query: []string{"versions"}},
		{op: "ListMultipartUploads", method: "GET", path: "/bkt", query: []string{"uploads"}},
		{op: "DeleteObjects", method: "POST", path: "/bkt", query: []string{"delete"}, body: del},
		{op: "PutObject", method: "PUT", path: "/bkt/new", body: "new data"},
		{op: "CopyObject", method: "PUT", path: "/bkt/copy", hdr: cp},
		{op: "GetObject", method: "GET", path: "/bkt/obj"},
		{op: "HeadObject", method: "HEAD", path: "/bkt/obj"},
		{op: "DeleteObject", method: "DELETE", path: "/bkt/obj"},
		{op: "CreateMultipartUpload", method: "POST", path: "/bkt/mp2", query: []string{"uploads"}},
		{op: "UploadPart", method: "PUT", path: "/bkt/mp", query: []string{"partNumber=2", up}, body: "part two"},
		{op: "UploadPartCopy", method: "PUT", path: "/bkt/mp", query: []string{"partNumber=3", up}, hdr: cp},
		{op: "CompleteMultipartUpload", method: "POST", path: "/bkt/mp", query: []string{up}, body: complete},
		{op: "AbortMultipartUpload", method: "DELETE", path: "/bkt/mp", query: []string{up}},
		{op: "ListParts", method: "GET", path: "/bkt/mp", query: []string{up}},
		{op: "GetObjectAttributes", method: "GET", path: "/bkt/obj", query: []string{"attributes"}, hdr: map[string]string{"X-Amz-Object-Attributes": "ETag"}},
		{op: "PutObjectTagging", method: "PUT", path: "/bkt/obj", query: []string{"tagging"}, body: tagging},
		{op: "GetObjectTagging", method: "GET", path: "/bkt/obj", query: []string{"tagging"}},
		{op: "DeleteObjectTagging", method: "DELETE", path: "/bkt/obj", query: []string{"tagging"}},
		{op: "PutBucketTagging", method: "PUT", path: "/bkt", query: []string{"tagging"}, body: tagging},
		{op: "GetBucketTagging", method: "GET", path: "/bkt", query: []string{"tagging"}},
		{op: "DeleteBucketTagging", method: "DELETE", path: "/bkt", query: []string{"tagging"}},
	}
}

// transportFeatures are exercised by every request (or by the signature and streaming
// tests), and adding them to a signed request would only break its signature.
var transportFeatures = map[string]bool{
	"Authorization": true, "Host": true, "Date": true, "X-Amz-Date": true, "X-Amz-Content-Sha256": true,
	"X-Amz-Decoded-Content-Length": true, "X-Amz-Trailer": true, "Content-Length": true,
	"Transfer-Encoding": true, "Expect": true,
	"?X-Amz-Algorithm": true, "?X-Amz-Credential": true, "?X-Amz-Date": true, "?X-Amz-Expires": true,
	"?X-Amz-SignedHeaders": true, "?X-Amz-Signature": true, "?AWSAccessKeyId": true, "?Signature": true, "?Expires": true,
}

// featureValues are values that honoured entries are sent with (else "1").
var featureValues = map[string]string{
	"If-None-Match": "*", "X-Amz-Storage-Class": "STANDARD", "X-Amz-Metadata-Directive": "COPY",
	"X-Amz-Copy-Source": "bkt/obj", "Content-Type": "text/plain", "X-Amz-Checksum-Mode": "ENABLED",
	"Range": "bytes=0-1", "?partNumber": "1", "X-Amz-Object-Attributes": "ETag,ObjectSize",
	"X-Amz-Tagging": "a=b", "X-Amz-Tagging-Directive": "REPLACE",
}

// unhonouredValues are the values outside an entry's only that it is sent with where
// "not-" and the first honoured value would be invalid rather than unimplemented (an
// x-amz-acl that is no canned ACL of S3's is 400 InvalidArgument: TestACLDocuments).
var unhonouredValues = map[string]string{"X-Amz-Acl": "log-delivery-write"}

// snapshot describes everything the store holds, to show that a refused request changed
// nothing.
func snapshot(t *testing.T, st *store.Store) string {
	t.Helper()
	var b strings.Builder
	bs, err := st.ListBuckets()
	if err != nil {
		t.Fatal(err)
	}
	for _, bk := range bs {
		fmt.Fprintf(&b, "bucket %s %q\n", bk.Name, bk.Config)
		res, err := st.List(bk.Name, object.ListOptions{Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.Objects {
			fmt.Fprintf(&b, " %s %s %d %d %q %q\n", e.Key, e.Object.ETag, e.Object.Size, e.Object.ModTime, e.Object.UserMeta, e.Object.Tags)
		}
		ul, err := st.ListUploads(bk.Name, object.UploadListOptions{Max: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range ul.Uploads {
			fmt.Fprintf(&b, " upload %s %s\n", u.Key, u.UploadID)
			parts, _, err := st.ListParts(bk.Name, u.Key, u.UploadID, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range parts {
				fmt.Fprintf(&b, "  part %d %s\n", p.Number, p.ETag)
			}
		}
	}
	return b.String()
}

var mutatingOps = map[string]bool{
	"CreateBucket": true, "DeleteBucket": true, "DeleteObjects": true, "PutObject": true, "CopyObject": true,
	"DeleteObject": true, "CreateMultipartUpload": true, "UploadPart": true, "UploadPartCopy": true,
	"CompleteMultipartUpload": true, "AbortMultipartUpload": true, "PutObjectTagging": true, "DeleteObjectTagging": true,
	"PutBucketTagging": true, "DeleteBucketTagging": true,
}

// TestFeatureTable walks the refusal table: every entry is sent, through a real server, in
// every operation cairn serves. Where the table refuses it the answer is exactly the
// table's error and the store is unchanged; where it honours it the answer is not a
// refusal.
func TestFeatureTable(t *testing.T) {
	srv := testutil.StartServer(t, store.Config{InlineMax: 4 << 10, ChunkSize: 256 << 10, SegmentSize: 8 << 20, Reserve: 1},
		func(c *s3api.Config) { c.MasterKeys = testKeyring(t) }) // SSE-S3 is honoured with a master key
	c := newClient(t, srv.URL, testutil.AccessKey, testutil.SecretKey)
	ctx := context.Background()
	var uploadID string
	fixtures := func() {
		for _, b := range []string{"bkt", "empty"} {
			c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)})
		}
		mustPut(t, c, "bkt", "obj", []byte("hello, table"))
		if uploadID != "" {
			if _, _, err := srv.Store.ListParts("bkt", "mp", uploadID, 0, 1); err == nil {
				return
			}
		}
		mu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp")})
		if err != nil {
			t.Fatal(err)
		}
		uploadID = *mu.UploadId
		if _, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: mu.UploadId,
			PartNumber: aws.Int32(1), Body: strings.NewReader("part one")}); err != nil {
			t.Fatal(err)
		}
	}
	fixtures()
	entries := s3api.Features()
	refused, honoured := 0, 0
	state := "" // the store's snapshot, while known
	for _, e := range entries {
		key := e.Name
		if !e.Header {
			key = "?" + e.Name
		}
		if transportFeatures[key] {
			continue
		}
		name := strings.TrimSuffix(e.Name, "*")
		if strings.HasSuffix(e.Name, "*") {
			name += "Sample"
		}
		values := []string{"1"}
		if v, ok := featureValues[key]; ok {
			values[0] = v
		}
		if e.Only != nil {
			bad := "not-" + e.Only[0]
			if v, ok := unhonouredValues[key]; ok {
				bad = v
			}
			values = []string{e.Only[0], bad}
		}
		for _, value := range values {
			for _, s := range featureSamples(uploadID) {
				if e.Ops == "" && !mutatingOps[s.op] && s.op != "GetObject" && s.op != "HeadObject" && s.op != "ListObjects" {
					continue // refused everywhere: the writes and a few reads will do
				}
				req := buildSample(t, srv.URL, s, e.Header, name, value)
				op := s3api.OperationOf(req)
				refuse := !e.Honours(op, value) && e.Code != ""
				var before string
				if refuse && mutatingOps[s.op] {
					if state == "" {
						state = snapshot(t, srv.Store)
					}
					before = state
				} else if !refuse {
					state = "" // an honoured request may change what the store holds
				}
				st, body := do(t, req)
				what := fmt.Sprintf("%s %s=%q in %s (as %s)", map[bool]string{true: "header", false: "query"}[e.Header], name, value, s.op, op)
				code := ""
				if i := strings.Index(body, "<Code>"); i >= 0 {
					code, _, _ = strings.Cut(body[i+6:], "<")
				}
				// When the entry turns the sample into another operation, the sample's own
				// parameters may be refused there first: any refusal will then do.
				exact := op == s.op
				if refuse {
					refused++
					if exact && (st != e.Status || (req.Method != "HEAD" && code != e.Code)) {
						t.Fatalf("%s: want refusal %d %s, got %d %s", what, e.Status, e.Code, st, body)
					}
					if !exact && st != 400 && st != 501 {
						t.Fatalf("%s: want a refusal, got %d %s", what, st, body)
					}
					if before != "" {
						if after := snapshot(t, srv.Store); after != before {
							t.Fatalf("%s: refused, but the store changed:\nbefore:\n%s\nafter:\n%s", what, before, after)
						}
					}
					continue
				}
				if !exact {
					continue
				}
				honoured++
				if (e.Code != "" && st == e.Status && code == e.Code) || st == 501 || code == "AccessControlListNotSupported" {
					t.Fatalf("%s: honoured by the table, but refused: %d %s", what, st, body)
				}
				if st < 300 && (s.op == "DeleteObject" || s.op == "DeleteObjects" || s.op == "AbortMultipartUpload" || s.op == "DeleteBucket") {
					fixtures()
				}
			}
		}
	}
	t.Logf("%d entries, %d refused and %d honoured requests", len(entries), refused, honoured)
}

// buildSample returns the signed request of sample s with the header or query parameter
// name set to value (replacing the sample's own).
func buildSample(t *testing.T, base string, s opSample, isHeader bool, name, value string) *http.Request {
	t.Helper()
	hdr := map[string]string{}
	for k, v := range s.hdr {
		hdr[k] = v
	}
	q := append([]string(nil), s.query...)
	if isHeader {
		hdr[http.CanonicalHeaderKey(name)] = value
	} else {
		kept := q[:0]
		for _, p := range q {
			if n, _, _ := strings.Cut(p, "="); n != name {
				kept = append(kept, p)
			}
		}
		q = append(kept, name+"="+url.QueryEscape(value))
	}
	u := base + s.path
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return signed(t, s.method, u, []byte(s.body), hdr, time.Now())
}

// TestRefusedSecurityHeaders is the reproduction: SSE-C, SSE-S3, SSE-KMS, a public
// ACL, tagging and object lock were answered 200 and ignored. Each is refused now and
// stores nothing; the canned ACLs that are true (private) are accepted.
func TestRefusedSecurityHeaders(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	key := make([]byte, 32)
	put := func(name string, mod func(*s3.PutObjectInput)) error {
		in := &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(name), Body: bytes.NewReader([]byte("secret"))}
		mod(in)
		_, err := c.PutObject(ctx, in)
		return err
	}
	cases := []struct {
		name string
		mod  func(*s3.PutObjectInput)
		code string
	}{
		{"sse-c", func(in *s3.PutObjectInput) {
			in.SSECustomerAlgorithm = aws.String("AES256")
			in.SSECustomerKey = aws.String(b64(key))
			in.SSECustomerKeyMD5 = aws.String(b64md5(key))
		}, "InvalidRequest"}, // over plain HTTP
		{"sse-s3", func(in *s3.PutObjectInput) { in.ServerSideEncryption = types.ServerSideEncryptionAes256 }, "NotImplemented"}, // no master key
		{"sse-kms", func(in *s3.PutObjectInput) {
			in.ServerSideEncryption = types.ServerSideEncryptionAwsKms
			in.SSEKMSKeyId = aws.String("alias/cairn")
		}, "NotImplemented"},
		{"public-read", func(in *s3.PutObjectInput) { in.ACL = types.ObjectCannedACLPublicRead }, "AccessControlListNotSupported"},
		{"grant-read", func(in *s3.PutObjectInput) {
			in.GrantRead = aws.String(`uri="http://acs.amazonaws.com/groups/global/AllUsers"`)
		}, "AccessControlListNotSupported"},
		{"tagging-reserved", func(in *s3.PutObjectInput) { in.Tagging = aws.String("aws:k=v") }, "InvalidTag"},
		{"object-lock", func(in *s3.PutObjectInput) {
			in.ObjectLockMode = types.ObjectLockModeCompliance
			in.ObjectLockRetainUntilDate = aws.Time(time.Now().Add(time.Hour))
		}, "InvalidRequest"}, // the bucket has no Object Lock
		{"legal-hold", func(in *s3.PutObjectInput) { in.ObjectLockLegalHoldStatus = types.ObjectLockLegalHoldStatusOn }, "InvalidRequest"},
		{"website-redirect", func(in *s3.PutObjectInput) { in.WebsiteRedirectLocation = aws.String("/elsewhere") }, "NotImplemented"},
	}
	for _, tc := range cases {
		wantCode(t, put(tc.name, tc.mod), tc.code)
		if _, err := srv.Store.StatObject("bkt", tc.name); err == nil {
			t.Fatalf("%s: refused, but the object was stored", tc.name)
		}
	}
	// The same on the other ways in: multipart uploads and copies.
	mustPut(t, c, "bkt", "src", []byte("source"))
	_, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), ServerSideEncryption: types.ServerSideEncryptionAes256})
	wantCode(t, err, "NotImplemented")
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("bkt"), Key: aws.String("cp"), CopySource: aws.String("bkt/src"), ACL: types.ObjectCannedACLPublicRead})
	wantCode(t, err, "AccessControlListNotSupported")
	_, err = c.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String("bkt"), Key: aws.String("cp"), CopySource: aws.String("bkt/src?versionId=abc")})
	wantCode(t, err, "InvalidArgument") // not a version id cairn makes
	_, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("public"), ACL: types.BucketCannedACLPublicRead})
	wantCode(t, err, "InvalidBucketAclWithObjectOwnership") // ACLs are disabled in a new bucket by default
	if _, err = c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("locked"), ObjectLockEnabledForBucket: aws.Bool(true)}); err != nil {
		t.Fatalf("create a bucket with Object Lock: %v", err)
	}
	// Sub-resources that once fell through to a plain PUT of the object.
	for _, sub := range []string{"tagging", "retention", "legal-hold", "cors", "restore", "uploads", "versioning"} {
		st, body := do(t, signed(t, "PUT", srv.URL+"/bkt/sub?"+sub, []byte("x"), nil, time.Now()))
		if st != 501 && st != 400 {
			t.Fatalf("PUT ?%s: %d %s", sub, st, body)
		}
	}
	st, body := do(t, signed(t, "GET", srv.URL+"/bkt/src?versionId=abc", nil, nil, time.Now()))
	expectS3Error(t, st, body, 400, "InvalidArgument")
	st, body = do(t, signed(t, "GET", srv.URL+"/bkt/src?unknownsubresource", nil, nil, time.Now()))
	expectS3Error(t, st, body, 501, "NotImplemented")
	st, body = do(t, signed(t, "PUT", srv.URL+"/bkt/src?x-amz-acl=public-read", []byte("x"), nil, time.Now()))
	expectS3Error(t, st, body, 501, "NotImplemented")
	st, body = do(t, signed(t, "PUT", srv.URL+"/bkt/src", []byte("x"), map[string]string{"X-Amz-Made-Up-Feature": "on"}, time.Now()))
	expectS3Error(t, st, body, 501, "NotImplemented")
	if got := mustGet(t, c, "bkt", "src"); string(got) != "source" {
		t.Fatalf("a refused request changed the object: %q", got)
	}
	for _, sub := range []string{"tagging", "retention", "legal-hold", "cors", "restore", "uploads", "versioning"} {
		if _, err := srv.Store.StatObject("bkt", "sub"); err == nil {
			t.Fatalf("PUT ?%s stored an object", sub)
		}
	}
	// What is true is accepted: a private object, a cache-busting parameter, versionId=null.
	if err := put("private", func(in *s3.PutObjectInput) { in.ACL = types.ObjectCannedACLPrivate }); err != nil {
		t.Fatal(err)
	}
	if err := put("owner", func(in *s3.PutObjectInput) { in.ACL = types.ObjectCannedACLBucketOwnerFullControl }); err != nil {
		t.Fatal(err)
	}
	st, body = do(t, signed(t, "GET", srv.URL+"/bkt/src?cachebust=12345", nil, nil, time.Now()))
	if st != 200 || body != "source" {
		t.Fatalf("GET with an unknown valued parameter: %d %s", st, body)
	}
	if _, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("bkt"), Key: aws.String("src"), VersionId: aws.String("null")}); err != nil {
		t.Fatal(err)
	}
	// DeleteObjects naming a version id cairn never makes deletes nothing.
	out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String("bkt"), Delete: &types.Delete{Objects: []types.ObjectIdentifier{
		{Key: aws.String("src"), VersionId: aws.String("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")}}}})
	if err != nil || len(out.Errors) != 1 || *out.Errors[0].Code != "InvalidArgument" {
		t.Fatalf("DeleteObjects with a version: %+v %v", out, err)
	}
	if got := mustGet(t, c, "bkt", "src"); string(got) != "source" {
		t.Fatal("DeleteObjects with a version deleted the object")
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func b64md5(b []byte) string {
	s := md5.Sum(b)
	return base64.StdEncoding.EncodeToString(s[:])
}

// TestXMLBodyDigests checks the integrity headers the table says are honoured on XML
// bodies: a DeleteObjects whose Content-MD5 or checksum does not match its document
// deletes nothing (it used to delete), and a completion whose x-amz-checksum-type is not the
// upload's is refused.
func TestXMLBodyDigests(t *testing.T) {
	srv, c := setup(t)
	ctx := context.Background()
	mustCreateBucket(t, c, "bkt")
	mustPut(t, c, "bkt", "keep", []byte("keep me"))
	doc := []byte(`<Delete><Object><Key>keep</Key></Object></Delete>`)
	other := md5.Sum([]byte("another document"))
	for _, hdr := range []map[string]string{
		{"Content-MD5": base64.StdEncoding.EncodeToString(other[:])},
		{"X-Amz-Checksum-Crc32": "AAAAAA==", "X-Amz-Sdk-Checksum-Algorithm": "CRC32"},
	} {
		st, body := do(t, signed(t, "POST", srv.URL+"/bkt?delete", doc, hdr, time.Now()))
		expectS3Error(t, st, body, 400, "BadDigest")
	}
	if got := mustGet(t, c, "bkt", "keep"); string(got) != "keep me" {
		t.Fatal("a DeleteObjects with a wrong digest deleted the object")
	}
	sum := md5.Sum(doc)
	st, body := do(t, signed(t, "POST", srv.URL+"/bkt?delete", doc, map[string]string{"Content-MD5": base64.StdEncoding.EncodeToString(sum[:])}, time.Now()))
	if st != 200 || !strings.Contains(body, "<Deleted>") {
		t.Fatalf("DeleteObjects with the right Content-MD5: %d %s", st, body)
	}

	mu, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: mu.UploadId,
		PartNumber: aws.Int32(1), Body: strings.NewReader("only part"), ChecksumAlgorithm: types.ChecksumAlgorithmCrc32})
	if err != nil {
		t.Fatal(err)
	}
	complete := &s3.CompleteMultipartUploadInput{Bucket: aws.String("bkt"), Key: aws.String("mp"), UploadId: mu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{{PartNumber: aws.Int32(1), ETag: p.ETag, ChecksumCRC32: p.ChecksumCRC32}}},
		ChecksumType:    types.ChecksumTypeFullObject}
	_, err = c.CompleteMultipartUpload(ctx, complete)
	wantCode(t, err, "InvalidRequest")
	complete.ChecksumType = types.ChecksumTypeComposite
	if _, err := c.CompleteMultipartUpload(ctx, complete); err != nil {
		t.Fatal(err)
	}
}

// TestListBucketsPaging covers the ListBuckets parameters the table honours (they were
// ignored: a prefix returned every bucket).
func TestListBucketsPaging(t *testing.T) {
	_, c := setup(t)
	ctx := context.Background()
	for _, b := range []string{"alpha-1", "alpha-2", "alpha-3", "beta-1"} {
		mustCreateBucket(t, c, b)
	}
	var got []string
	in := &s3.ListBucketsInput{Prefix: aws.String("alpha-"), MaxBuckets: aws.Int32(2), BucketRegion: aws.String("us-east-1")}
	for pages := 0; ; pages++ {
		out, err := c.ListBuckets(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range out.Buckets {
			got = append(got, *b.Name)
		}
		if out.ContinuationToken == nil || pages > 3 {
			break
		}
		in.ContinuationToken = out.ContinuationToken
	}
	if strings.Join(got, " ") != "alpha-1 alpha-2 alpha-3" {
		t.Fatalf("paged ListBuckets with a prefix: %v", got)
	}
	out, err := c.ListBuckets(ctx, &s3.ListBucketsInput{BucketRegion: aws.String("eu-west-1")})
	if err != nil || len(out.Buckets) != 0 {
		t.Fatalf("ListBuckets in another region: %v %v", out, err)
	}
	_, err = c.ListBuckets(ctx, &s3.ListBucketsInput{MaxBuckets: aws.Int32(0)})
	wantCode(t, err, "InvalidArgument")
}
