package s3api

import (
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// This file holds the refusal table: every S3 request header and query parameter
// (sub-resource or operation parameter) cairn knows, and what cairn does with it. A request
// is checked against it once, after authentication and before its body is read or anything
// is changed; whatever the table refuses is answered with the table's error and changes
// nothing. The rule behind it: a request for a feature cairn does not have is refused,
// never accepted and ignored (an SSE header that encrypts nothing, an ACL that grants
// nothing, a tag that is dropped).
//
// To flip an entry when a feature lands, edit its one line: list the operations that now
// honour it in ops (and, for a header, drop err if it is ignored elsewhere, as S3 ignores
// it). TestFeatureTable sends a real request for every entry in the operations cairn serves
// and keeps the table honest. docs/s3-compatibility.md lists the same entries for users:
// regenerate it with `go test ./internal/s3api -run TestFeatureDocs -update-docs`.

// A feature is one line of the refusal table.
type feature struct {
	// kind says whether name is a request header or a query parameter.
	kind featureKind
	// name is the header in canonical form ("X-Amz-Acl"), a header prefix ending in '*'
	// ("X-Amz-Meta-*"), or the query parameter as S3 spells it ("acl", "uploadId").
	name string
	// ops are the operations (as named by operation) that honour it, space-separated;
	// "*" means every operation, "" none.
	ops string
	// only, if set, are the only values honoured (space-separated, exact); other values
	// are refused with err.
	only string
	// err is the answer where the feature is not honoured: in other operations, or with
	// other values. nil means it is ignored there, as S3 ignores it (only for headers).
	err *apiError
	// doc says what cairn does, for docs/s3-compatibility.md and error messages.
	doc string
}

type featureKind uint8

const (
	header featureKind = iota
	query
)

// Refusal answers used by the table.
var (
	// errNI is 501 NotImplemented, S3's answer for a header or query that implies
	// functionality it does not implement. SDKs do not retry it.
	errNI = errNotImplemented
	// errEncoding is S3's answer to an encoding-type other than url.
	errEncoding = &apiError{"InvalidArgument", "Invalid Encoding Method specified in Request", 400}
)

// grantsDoc is what cairn does with the x-amz-grant-* headers.
const grantsDoc = "ACL grants: users of the cluster by canonical ID (id=), AllUsers and AuthenticatedUsers (uri=); e-mail grantees are UnresolvableGrantByEmailAddress, LogDelivery NotImplemented"

// Operation sets used by several entries.
const (
	opsObjectWrite = "PutObject CopyObject CreateMultipartUpload" // operations that store object metadata
	opsObjectRead  = "GetObject HeadObject"
	opsBodyDigest  = "PutObject UploadPart CompleteMultipartUpload DeleteObjects CreateBucket PutBucketCors PutBucketLifecycleConfiguration PutObjectTagging PutBucketTagging PutBucketAcl PutObjectAcl PutBucketNotificationConfiguration" // request bodies cairn verifies
	opsTagging     = "PutObjectTagging GetObjectTagging DeleteObjectTagging PutBucketTagging GetBucketTagging DeleteBucketTagging"
	opsList        = "ListObjects ListObjectsV2 ListObjectVersions ListMultipartUploads"
	opsUpload      = "UploadPart UploadPartCopy ListParts CompleteMultipartUpload AbortMultipartUpload"
	opsCopy        = "CopyObject UploadPartCopy"
	opsSSEC        = "PutObject CopyObject CreateMultipartUpload UploadPart UploadPartCopy CompleteMultipartUpload ListParts GetObject HeadObject GetObjectAttributes" // requests that take an SSE-C key
	opsACL         = "CreateBucket PutObject CopyObject CreateMultipartUpload PutBucketAcl PutObjectAcl"                                                               // operations that set an ACL
	opsAll         = "*"
)

// features is the refusal table. Keep one line per entry.
var features = []feature{
	// Authentication and transport.
	{header, "Authorization", opsAll, "", nil, "SigV4 and SigV2 signatures"},
	{header, "Host", opsAll, "", nil, "path-style and virtual-host-style addressing"},
	{header, "Date", opsAll, "", nil, "request time when X-Amz-Date is absent"},
	{header, "X-Amz-Date", opsAll, "", nil, "request time"},
	{header, "X-Amz-Content-Sha256", opsAll, "", nil, "payload hash, UNSIGNED-PAYLOAD and the STREAMING-* forms"},
	{header, "X-Amz-Decoded-Content-Length", opsAll, "", nil, "payload length of aws-chunked bodies"},
	{header, "X-Amz-Trailer", opsAll, "", nil, "trailing checksum of aws-chunked bodies"},
	{header, "X-Amz-Security-Token", "", "", errNI, "temporary (STS) credentials"},
	{header, "X-Amz-User-Agent", opsAll, "", nil, "informational"},
	{header, "Content-Length", opsAll, "", nil, "body length; over the size limit is EntityTooLarge"},
	{header, "Transfer-Encoding", opsAll, "", nil, "chunked bodies, also without a length (streamed; EntityTooLarge past the size limit)"},
	{header, "Expect", opsAll, "", nil, "100-continue"},
	{query, "X-Amz-Algorithm", opsAll, "", errNI, "SigV4 presigned URL"},
	{query, "X-Amz-Credential", opsAll, "", errNI, "SigV4 presigned URL"},
	{query, "X-Amz-Date", opsAll, "", errNI, "SigV4 presigned URL"},
	{query, "X-Amz-Expires", opsAll, "", errNI, "SigV4 presigned URL"},
	{query, "X-Amz-SignedHeaders", opsAll, "", errNI, "SigV4 presigned URL"},
	{query, "X-Amz-Signature", opsAll, "", errNI, "SigV4 presigned URL"},
	{query, "X-Amz-Security-Token", "", "", errNI, "temporary (STS) credentials"},
	{query, "AWSAccessKeyId", opsAll, "", errNI, "SigV2 presigned URL"},
	{query, "Signature", opsAll, "", errNI, "SigV2 presigned URL"},
	{query, "Expires", opsAll, "", errNI, "SigV2 presigned URL"},
	{query, "x-id", opsAll, "", errNI, "operation name some SDKs add; informational"},

	// Object metadata.
	{header, "Content-Type", opsObjectWrite, "", nil, "stored and returned"},
	{header, "Content-Encoding", opsObjectWrite, "", nil, "stored and returned (aws-chunked removed)"},
	{header, "Content-Disposition", opsObjectWrite, "", nil, "stored and returned"},
	{header, "Content-Language", opsObjectWrite, "", nil, "stored and returned"},
	{header, "Cache-Control", opsObjectWrite, "", nil, "stored and returned"},
	{header, "Expires", opsObjectWrite, "", nil, "stored and returned"},
	{header, "X-Amz-Meta-*", opsObjectWrite, "", nil, "user metadata, 2 KiB at most"},
	{header, "X-Amz-Storage-Class", opsObjectWrite, "", nil, "the cluster's storage classes; others are InvalidStorageClass"},
	{header, "X-Amz-Metadata-Directive", "CopyObject", "", nil, "COPY or REPLACE"},
	{header, "X-Amz-Website-Redirect-Location", "", "", errNI, "website redirects"},

	// Integrity.
	{header, "Content-Md5", opsBodyDigest, "", nil, "verified against the body: BadDigest"},
	{header, "X-Amz-Checksum-Crc32", opsBodyDigest, "", nil, "verified against the body (on completion: the object's checksum), stored"},
	{header, "X-Amz-Checksum-Crc32c", opsBodyDigest, "", nil, "verified against the body (on completion: the object's checksum), stored"},
	{header, "X-Amz-Checksum-Crc64nvme", opsBodyDigest, "", nil, "verified against the body (on completion: the object's checksum), stored"},
	{header, "X-Amz-Checksum-Sha1", opsBodyDigest, "", nil, "verified against the body (on completion: the object's checksum), stored"},
	{header, "X-Amz-Checksum-Sha256", opsBodyDigest, "", nil, "verified against the body (on completion: the object's checksum), stored"},
	{header, "X-Amz-Sdk-Checksum-Algorithm", opsBodyDigest, "", nil, "algorithm of the body's checksum"},
	{header, "X-Amz-Checksum-Algorithm", "CreateMultipartUpload CopyObject", "", nil, "checksum kept for the object"},
	{header, "X-Amz-Checksum-Type", "CreateMultipartUpload CompleteMultipartUpload", "", nil, "COMPOSITE or FULL_OBJECT; checked on completion"},
	{header, "X-Amz-Checksum-Mode", opsObjectRead, "", nil, "ENABLED returns the stored checksum"},
	{header, "X-Amz-Mp-Object-Size", "", "", errNI, "object size check on completion"},

	// Conditions and ranges.
	{header, "If-Match", "GetObject HeadObject PutObject CopyObject CompleteMultipartUpload", "", errNI, "conditional reads; conditional writes, atomic across gateways (on CopyObject: the destination); not on DeleteObject"},
	{header, "If-None-Match", "GetObject HeadObject PutObject CopyObject CompleteMultipartUpload", "", errNI, "conditional reads; conditional writes, atomic across gateways, with '*' only (an ETag is NotImplemented: S3 takes only '*')"},
	{header, "If-Modified-Since", opsObjectRead, "", errNI, "conditional reads"},
	{header, "If-Unmodified-Since", opsObjectRead, "", errNI, "conditional reads"},
	{header, "X-Amz-If-Match-Last-Modified-Time", "", "", errNI, "conditional deletes"},
	{header, "X-Amz-If-Match-Size", "", "", errNI, "conditional deletes"},
	{header, "X-Amz-If-Match-Initiated-Time", "", "", errNI, "conditional aborts"},
	{header, "Range", opsObjectRead, "", nil, "one byte range"},
	{header, "X-Amz-Write-Offset-Bytes", "", "", errNI, "appends"},

	// Copies.
	{header, "X-Amz-Copy-Source", opsCopy, "", nil, "bucket/key, with ?versionId= a version of it"},
	{header, "X-Amz-Copy-Source-If-Match", opsCopy, "", nil, "conditional copies"},
	{header, "X-Amz-Copy-Source-If-None-Match", opsCopy, "", nil, "conditional copies"},
	{header, "X-Amz-Copy-Source-If-Modified-Since", opsCopy, "", nil, "conditional copies"},
	{header, "X-Amz-Copy-Source-If-Unmodified-Since", opsCopy, "", nil, "conditional copies"},
	{header, "X-Amz-Copy-Source-Range", "UploadPartCopy", "", errNI, "part copies of a byte range"},
	{header, "X-Amz-Source-Expected-Bucket-Owner", "", "", errNI, "bucket owner checks"},

	// Access control: canned ACLs and explicit grant lists (acl.go). Where a
	// bucket's Object Ownership is BucketOwnerEnforced (the default) only the ACLs that
	// grant the owner alone are taken; others are AccessControlListNotSupported there.
	{header, "X-Amz-Acl", opsACL, cannedACLsSupported, errNI, "canned ACLs: " + cannedACLsSupported + "; S3's others are NotImplemented, a value that is none of S3's is 400 InvalidArgument"},
	{header, "X-Amz-Grant-Full-Control", opsACL, "", errNI, grantsDoc},
	{header, "X-Amz-Grant-Read", opsACL, "", errNI, grantsDoc},
	{header, "X-Amz-Grant-Read-Acp", opsACL, "", errNI, grantsDoc},
	{header, "X-Amz-Grant-Write", opsACL, "", errNI, grantsDoc},
	{header, "X-Amz-Grant-Write-Acp", opsACL, "", errNI, grantsDoc},
	{header, "X-Amz-Object-Ownership", "CreateBucket", "BucketOwnerEnforced BucketOwnerPreferred ObjectWriter", errInvalidObjectOwnership, "Object Ownership of the new bucket (default BucketOwnerEnforced: ACLs disabled)"},
	{header, "X-Amz-Expected-Bucket-Owner", "", "", errNI, "bucket owner checks"},
	{header, "X-Amz-Request-Payer", opsAll, "requester", errNI, "requester-pays acknowledgement; nothing is charged"},
	{header, "X-Amz-Mfa", "", "", errNI, "MFA delete"},
	{header, "X-Amz-Confirm-Remove-Self-Bucket-Access", "", "", errNI, "bucket policies"},

	// Encryption at rest (docs/design/sse.md): SSE-S3 and SSE-C; SSE-KMS is not implemented.
	{header, "X-Amz-Server-Side-Encryption", opsObjectWrite, "AES256", errNI, "SSE-S3 (AES256, needs --master-key-file); aws:kms is NotImplemented"},
	{header, "X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id", "", "", errNI, "SSE-KMS"},
	{header, "X-Amz-Server-Side-Encryption-Context", "", "", errNI, "SSE-KMS"},
	{header, "X-Amz-Server-Side-Encryption-Bucket-Key-Enabled", opsObjectWrite, "false", errNI, "false only: bucket keys are an SSE-KMS feature"},
	{header, "X-Amz-Server-Side-Encryption-Customer-Algorithm", opsSSEC, "", errNI, "SSE-C (AES256; HTTPS only)"},
	{header, "X-Amz-Server-Side-Encryption-Customer-Key", opsSSEC, "", errNI, "SSE-C (AES256; HTTPS only)"},
	{header, "X-Amz-Server-Side-Encryption-Customer-Key-Md5", opsSSEC, "", errNI, "SSE-C (AES256; HTTPS only)"},
	{header, "X-Amz-Copy-Source-Server-Side-Encryption-Customer-Algorithm", opsCopy, "", errNI, "SSE-C key of the copy source"},
	{header, "X-Amz-Copy-Source-Server-Side-Encryption-Customer-Key", opsCopy, "", errNI, "SSE-C key of the copy source"},
	{header, "X-Amz-Copy-Source-Server-Side-Encryption-Customer-Key-Md5", opsCopy, "", errNI, "SSE-C key of the copy source"},

	// Tagging, object lock and other object features.
	{header, "X-Amz-Tagging", opsObjectWrite, "", errNI, "the new object's tags (URL-query-encoded; with CopyObject only under x-amz-tagging-directive REPLACE)"},
	{header, "X-Amz-Tagging-Directive", "CopyObject", "", errNI, "COPY (the source's tags, the default) or REPLACE (those of x-amz-tagging); others are InvalidArgument"},
	{header, "X-Amz-Object-Lock-Mode", "PutObject CopyObject CreateMultipartUpload", "", errNI, "object lock: the new version's retention (a bucket with Object Lock)"},
	{header, "X-Amz-Object-Lock-Retain-Until-Date", "PutObject CopyObject CreateMultipartUpload", "", errNI, "object lock: the new version's retention (a bucket with Object Lock)"},
	{header, "X-Amz-Object-Lock-Legal-Hold", "PutObject CopyObject CreateMultipartUpload", "", errNI, "object lock: the new version's legal hold (a bucket with Object Lock)"},
	{header, "X-Amz-Bypass-Governance-Retention", "DeleteObject DeleteObjects PutObjectRetention", "", errNI, "object lock: GOVERNANCE retentions yield to it (s3:BypassGovernanceRetention)"},
	{header, "X-Amz-Bucket-Object-Lock-Enabled", "CreateBucket", "", errNI, "object lock: true makes the bucket with Object Lock and versioning"},
	{header, "X-Amz-Bucket-Object-Lock-Token", "", "", errNI, "object lock"},
	{header, "X-Amz-Object-Attributes", "GetObjectAttributes", "", errNI, "the attributes GetObjectAttributes returns"},
	{header, "X-Amz-Optional-Object-Attributes", "", "", errNI, "extra listing attributes"},
	{header, "X-Amz-Max-Parts", "GetObjectAttributes", "", errNI, "GetObjectAttributes part paging"},
	{header, "X-Amz-Part-Number-Marker", "GetObjectAttributes", "", errNI, "GetObjectAttributes part paging"},
	{header, "X-Amz-Rename-Source", "", "", errNI, "RenameObject"},
	{header, "X-Amz-Create-Session-Mode", "", "", errNI, "directory-bucket sessions"},
	{header, "X-Amz-Skip-Destination-Validation", "", "", errNI, "replication"},
	{header, "X-Amz-Transition-Default-Minimum-Object-Size", "PutBucketLifecycleConfiguration", "", errNI, "accepted and without effect: Transition rules move objects of any size"},

	// Sub-resources: the query parameters that choose an operation. Outside the operations
	// listed each is refused, so none can fall through to a plain GET or PUT of the object.
	{query, "acl", "GetBucketAcl GetObjectAcl PutBucketAcl PutObjectAcl", "", errNI, "bucket and object ACLs: canned ACLs, grant headers or an AccessControlPolicy document (users of the cluster by canonical ID, AllUsers, AuthenticatedUsers; at most 100 grants)"},
	{query, "location", "GetBucketLocation", "", errNI, "GetBucketLocation"},
	{query, "versioning", "GetBucketVersioning PutBucketVersioning", "", errNI, "versioning: Enabled or Suspended (MFA delete is NotImplemented)"},
	{query, "versionId", "GetObject HeadObject DeleteObject GetObjectAttributes GetObjectTagging PutObjectTagging DeleteObjectTagging GetObjectRetention PutObjectRetention GetObjectLegalHold PutObjectLegalHold GetObjectAcl PutObjectAcl", "", errNI, "any version (GetObject, HeadObject, DeleteObject, tagging, attributes, retention, legal hold, ACL)"},
	{query, "uploads", "CreateMultipartUpload ListMultipartUploads", "", errNI, "multipart uploads"},
	{query, "uploadId", opsUpload, "", errNI, "multipart uploads"},
	{query, "partNumber", "UploadPart UploadPartCopy GetObject HeadObject", "", errNI, "parts"},
	{query, "delete", "DeleteObjects", "", errNI, "DeleteObjects"},
	{query, "list-type", "ListObjectsV2", "2", errNI, "ListObjectsV2"},
	{query, "versions", "ListObjectVersions", "", errNI, "ListObjectVersions: every version and delete marker, the null version of objects written without versioning"},
	{query, "tagging", opsTagging, "", errNI, "object tagging (10 tags) and bucket tagging (50 tags)"},
	{query, "policy", "GetBucketPolicy PutBucketPolicy DeleteBucketPolicy", "", errNI, "bucket policies"},
	{query, "policyStatus", "GetBucketPolicyStatus", "", errNI, "bucket policy status"},
	{query, "cors", "PutBucketCors GetBucketCors DeleteBucketCors", "", errNI, "bucket CORS configurations; preflight OPTIONS answered from them"},
	{query, "lifecycle", "PutBucketLifecycleConfiguration GetBucketLifecycleConfiguration DeleteBucketLifecycle", "", errNI, "lifecycle configurations: Expiration (Days, Date, ExpiredObjectDeleteMarker), NoncurrentVersionExpiration, AbortIncompleteMultipartUpload, filters by prefix, tags and size, applied daily by every storage node; Transition (Days or Date) of current versions and NoncurrentVersionTransition (NoncurrentDays from the successor's creation, NewerNoncurrentVersions) of noncurrent ones through the tiers' migration (one of each per rule; StorageClass names an archive tier of the cluster: cairn admin tier list); x-amz-expiration on PUT, copy, multipart completion, GET and HEAD; more than one Transition or NoncurrentVersionTransition per rule is NotImplemented (an archived version does not move on from tier to tier)"},
	{query, "replication", "", "", errNI, "bucket replication"},
	{query, "website", "", "", errNI, "website hosting"},
	{query, "encryption", "PutBucketEncryption GetBucketEncryption DeleteBucketEncryption", "", errNI, "bucket default encryption: AES256 (SSE-S3) only"},
	{query, "object-lock", "GetObjectLockConfiguration PutObjectLockConfiguration", "", errNI, "object lock configuration, with a default retention"},
	{query, "retention", "GetObjectRetention PutObjectRetention", "", errNI, "object lock: a version's retention"},
	{query, "legal-hold", "GetObjectLegalHold PutObjectLegalHold", "", errNI, "object lock: a version's legal hold"},
	{query, "torrent", "", "", errNI, "BitTorrent"},
	{query, "restore", "RestoreObject", "", errNI, "RestoreObject of an object archived in a restore-mode tier (Days: a temporary copy, x-amz-restore with its expiry-date, dropped after it; SELECT restores refused)"},
	{query, "select", "", "", errNI, "SelectObjectContent"},
	{query, "select-type", "", "", errNI, "SelectObjectContent"},
	{query, "notification", "PutBucketNotificationConfiguration GetBucketNotificationConfiguration", "", errNI, "bucket notifications: Queue and Topic configurations naming operator targets (webhook, Redis), ObjectCreated:Put/CompleteMultipartUpload and ObjectRemoved:Delete/DeleteMarkerCreated with prefix/suffix filters, delivered at least once (docs/design/notifications.md)"},
	{query, "logging", "GetBucketLogging PutBucketLogging", "", errNI, "server access logging"},
	{query, "requestPayment", "", "", errNI, "requester pays"},
	{query, "accelerate", "", "", errNI, "transfer acceleration"},
	{query, "analytics", "", "", errNI, "analytics"},
	{query, "inventory", "", "", errNI, "inventory"},
	{query, "metrics", "", "", errNI, "request metrics"},
	{query, "intelligent-tiering", "", "", errNI, "intelligent tiering"},
	{query, "id", "", "", errNI, "analytics, inventory and metrics configurations"},
	{query, "ownershipControls", "GetBucketOwnershipControls PutBucketOwnershipControls DeleteBucketOwnershipControls", "", errNI, "Object Ownership: BucketOwnerEnforced (the default, ACLs disabled), BucketOwnerPreferred, ObjectWriter; deleted, the bucket behaves as ObjectWriter"},
	{query, "publicAccessBlock", "GetPublicAccessBlock PutPublicAccessBlock DeletePublicAccessBlock", "", errNI, "Block Public Access settings of a bucket"},
	{query, "attributes", "GetObjectAttributes", "", errNI, "GetObjectAttributes"},
	{query, "renameObject", "", "", errNI, "RenameObject"},
	{query, "session", "", "", errNI, "directory-bucket sessions"},
	{query, "metadataTable", "", "", errNI, "metadata tables"},
	{query, "metadataConfiguration", "", "", errNI, "metadata tables"},

	// Operation parameters.
	{query, "prefix", "ListBuckets " + opsList, "", errNI, "listings"},
	{query, "delimiter", opsList, "", errNI, "listings"},
	{query, "encoding-type", opsList, "url", errEncoding, "listings"},
	{query, "max-keys", "ListObjects ListObjectsV2 ListObjectVersions", "", errNI, "listings"},
	{query, "marker", "ListObjects", "", errNI, "ListObjects"},
	{query, "continuation-token", "ListBuckets ListObjectsV2", "", errNI, "paging"},
	{query, "start-after", "ListObjectsV2", "", errNI, "ListObjectsV2"},
	{query, "fetch-owner", "ListObjectsV2", "", errNI, "ListObjectsV2"},
	{query, "key-marker", "ListMultipartUploads ListObjectVersions", "", errNI, "ListMultipartUploads and ListObjectVersions paging"},
	{query, "upload-id-marker", "ListMultipartUploads", "", errNI, "ListMultipartUploads"},
	{query, "max-uploads", "ListMultipartUploads", "", errNI, "ListMultipartUploads"},
	{query, "max-parts", "ListParts", "", errNI, "ListParts"},
	{query, "part-number-marker", "ListParts", "", errNI, "ListParts"},
	{query, "version-id-marker", "ListObjectVersions", "", errNI, "ListObjectVersions paging"},
	{query, "max-buckets", "ListBuckets", "", errNI, "ListBuckets paging"},
	{query, "bucket-region", "ListBuckets", "", errNI, "ListBuckets filtering (all buckets are in the configured region)"},
	{query, "response-content-type", opsObjectRead, "", errNI, "response header override (signed requests only; anonymous ones are 400 InvalidRequest, as in S3)"},
	{query, "response-content-language", opsObjectRead, "", errNI, "response header override (signed requests only; anonymous ones are 400 InvalidRequest, as in S3)"},
	{query, "response-expires", opsObjectRead, "", errNI, "response header override (signed requests only; anonymous ones are 400 InvalidRequest, as in S3)"},
	{query, "response-cache-control", opsObjectRead, "", errNI, "response header override (signed requests only; anonymous ones are 400 InvalidRequest, as in S3)"},
	{query, "response-content-disposition", opsObjectRead, "", errNI, "response header override (signed requests only; anonymous ones are 400 InvalidRequest, as in S3)"},
	{query, "response-content-encoding", opsObjectRead, "", errNI, "response header override (signed requests only; anonymous ones are 400 InvalidRequest, as in S3)"},
}

// opNames are the operations operation returns, each given one bit.
var opNames = []string{
	"ListBuckets", "CreateBucket", "HeadBucket", "DeleteBucket", "GetBucketLocation",
	"GetBucketVersioning", "GetBucketAcl", "GetObjectAcl", "ListObjects", "ListObjectsV2", "ListObjectVersions",
	"ListMultipartUploads", "DeleteObjects", "PutObject", "CopyObject", "GetObject",
	"HeadObject", "DeleteObject", "CreateMultipartUpload", "UploadPart", "UploadPartCopy",
	"CompleteMultipartUpload", "AbortMultipartUpload", "ListParts", "GetObjectAttributes",
	"PutObjectTagging", "GetObjectTagging", "DeleteObjectTagging", "PutBucketTagging", "GetBucketTagging", "DeleteBucketTagging",
	"PutBucketCors", "GetBucketCors", "DeleteBucketCors", "PostObject", "Preflight",
	"GetBucketOwnershipControls", "PutBucketOwnershipControls", "DeleteBucketOwnershipControls",
	"PutBucketAcl", "PutObjectAcl",
	"GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy", "GetBucketPolicyStatus",
	"GetPublicAccessBlock", "PutPublicAccessBlock", "DeletePublicAccessBlock",
	"GetBucketLogging", "PutBucketLogging", "PutBucketVersioning",
	"GetObjectLockConfiguration", "PutObjectLockConfiguration", "GetObjectRetention", "PutObjectRetention",
	"GetObjectLegalHold", "PutObjectLegalHold",
	"PutBucketEncryption", "GetBucketEncryption", "DeleteBucketEncryption",
	"PutBucketLifecycleConfiguration", "GetBucketLifecycleConfiguration", "DeleteBucketLifecycle",
	"PutBucketNotificationConfiguration", "GetBucketNotificationConfiguration",
	"RestoreObject",
	"Unsupported", "Unknown",
}

// opMask is a set of operations: bit i%64 of word i/64 is opNames[i]. Two words hold 128
// operations (one held 64, which the lifecycle operations filled).
type opMask [2]uint64

// has reports whether m and b share an operation.
func (m opMask) has(b opMask) bool { return m[0]&b[0] != 0 || m[1]&b[1] != 0 }

// rule is a feature ready for lookup.
type rule struct {
	*feature
	mask   opMask   // bit i set: opNames[i] honours it
	values []string // the only values honoured; nil: any
	prefix string   // for a header prefix entry, the prefix ("X-Amz-Meta-")
}

var (
	opBits       = map[string]opMask{}
	headerRules  = map[string]*rule{}
	queryRules   = map[string]*rule{}
	prefixRules  []*rule // header prefixes ("X-Amz-Meta-")
	unknownAmzHd = &rule{feature: &feature{kind: header, err: errNI, doc: "a header cairn does not know"}}
	unknownSub   = &rule{feature: &feature{kind: query, err: errNI, doc: "a sub-resource cairn does not know"}}
	amzQuery     = &rule{feature: &feature{kind: query, err: errNI, doc: "x-amz-* headers are taken from headers only, not from the query"}}
)

func init() {
	if len(opNames) > 128 {
		panic("s3api: more operations than an opMask holds")
	}
	for i, n := range opNames {
		var b opMask
		b[i/64] = 1 << (i % 64)
		opBits[n] = b
	}
	for i := range features {
		f := &features[i]
		r := &rule{feature: f}
		if f.ops == opsAll {
			r.mask = opMask{^uint64(0), ^uint64(0)}
		}
		for _, o := range strings.Fields(f.ops) {
			if o == opsAll {
				continue
			}
			b, ok := opBits[o]
			if !ok {
				panic("s3api: feature " + f.name + " names unknown operation " + o)
			}
			r.mask[0] |= b[0]
			r.mask[1] |= b[1]
		}
		if f.only != "" {
			r.values = strings.Fields(f.only)
			if f.err == nil {
				panic("s3api: feature " + f.name + " restricts values but has no refusal")
			}
		}
		m := headerRules
		if f.kind == query {
			m = queryRules
			if f.err == nil {
				panic("s3api: query parameter " + f.name + " has no refusal")
			}
		} else if p, ok := strings.CutSuffix(f.name, "*"); ok {
			r.prefix = p
			prefixRules = append(prefixRules, r)
			continue
		} else if textproto.CanonicalMIMEHeaderKey(f.name) != f.name {
			panic("s3api: feature header " + f.name + " is not in canonical form")
		}
		if m[f.name] != nil {
			panic("s3api: feature " + f.name + " listed twice")
		}
		m[f.name] = r
	}
}

// featureError is the answer to a refused feature: the table's code and status, with a
// message naming what was refused.
func featureError(r *rule, name string, op string) *apiError {
	what := "Header " + name
	if r.kind == query {
		what = "Query parameter ?" + name
	}
	where := ""
	if r.mask != (opMask{}) && op != "" {
		where = " in " + op
	}
	return &apiError{Code: r.err.Code, Status: r.err.Status, Message: what + " is not supported" + where + " (cairn: " + r.doc + "). " + r.err.Message}
}

// check returns the refusal for values of the feature in the operation with bit op, or nil.
func (r *rule) check(op opMask, values []string) *rule {
	if !r.mask.has(op) {
		if r.err == nil {
			return nil
		}
		return r
	}
	if r.values != nil {
		for _, v := range values {
			if !oneOf(r.values, v) {
				return r
			}
		}
	}
	return nil
}

// s3CannedACLs are every canned ACL of S3: a value of x-amz-acl outside them is 400
// InvalidArgument; the ones cairn does not keep (cannedACLsSupported) are NotImplemented.
var s3CannedACLs = strings.Fields(cannedACLsSupported + " aws-exec-read bucket-owner-read log-delivery-write")

func allOf(list, vs []string) bool {
	for _, v := range vs {
		if !oneOf(list, v) {
			return false
		}
	}
	return true
}

func oneOf(list []string, v string) bool {
	for _, s := range list {
		if s == v {
			return true
		}
	}
	return false
}

// headerRule finds the rule for a header name as net/http stores it, or nil if the header
// is none of S3's business.
func headerRule(k string) *rule {
	if r := headerRules[k]; r != nil {
		return r
	}
	if len(k) < 6 || !strings.EqualFold(k[:6], "x-amz-") {
		return nil
	}
	for _, p := range prefixRules {
		if len(k) > len(p.prefix) && strings.EqualFold(k[:len(p.prefix)], p.prefix) {
			return p
		}
	}
	if c := textproto.CanonicalMIMEHeaderKey(k); c != k {
		if r := headerRules[c]; r != nil {
			return r
		}
	}
	return unknownAmzHd
}

// checkFeatures consults the refusal table for every header and query parameter of r,
// in operation op, and returns the answer to the first refused one, or nil. It does not
// allocate unless it refuses (or a query parameter name is percent-encoded).
func checkFeatures(r *http.Request, op string) error {
	bit := opBits[op]
	for k, vs := range r.Header {
		rl := headerRule(k)
		if rl == nil {
			continue
		}
		if bad := rl.check(bit, vs); bad != nil {
			if bad.name == "X-Amz-Acl" && bad.mask.has(bit) && !allOf(s3CannedACLs, vs) {
				return errInvalidCannedACL // not a canned ACL of S3's: invalid, not unimplemented
			}
			return featureError(bad, k, op)
		}
	}
	q := r.URL.RawQuery
	for q != "" {
		var part string
		part, q, _ = strings.Cut(q, "&")
		if part == "" {
			continue
		}
		name, value, hasValue := strings.Cut(part, "=")
		if strings.ContainsAny(name, "%+") {
			if n, err := url.QueryUnescape(name); err == nil {
				name = n
			}
		}
		rl := queryRules[name]
		if rl == nil {
			// Unknown parameters with a value (cache-busters and the like) are ignored, as S3
			// ignores them; an unknown bare one names a sub-resource cairn does not have, and
			// an unknown x-amz-* one is a header moved into the query.
			if len(name) >= 6 && strings.EqualFold(name[:6], "x-amz-") {
				return featureError(amzQuery, name, "")
			}
			if hasValue {
				continue
			}
			return featureError(unknownSub, name, "")
		}
		if rl.values != nil && strings.ContainsAny(value, "%+") {
			if v, err := url.QueryUnescape(value); err == nil {
				value = v
			}
		}
		if !rl.mask.has(bit) || (rl.values != nil && !oneOf(rl.values, value)) {
			return featureError(rl, name, op)
		}
	}
	return nil
}
