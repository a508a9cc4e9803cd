package s3api

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/access"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
)

// Principal is who signed a request: a user of the cluster map, or nobody (Anonymous).
// A user may use the buckets it owns, others as far as its grants, their bucket
// policies and their ACLs allow; the root user every bucket, whatever their policies say;
// an anonymous request only what a bucket policy or an ACL allows.
type Principal struct {
	User      string
	Root      bool
	Anonymous bool
	Grants    []Grant
}

// Grant is a user's access to a bucket it does not own (package clustermap's Grant):
// objects under Prefix for reading or writing, or the whole bucket as its owner.
type Grant struct {
	Bucket, Prefix     string
	Read, Write, Owner bool
}

// owner is the owner a bucket created by p gets: "" for the root user, as the buckets
// made before users existed have.
func (p Principal) owner() string {
	if p.Root {
		return ""
	}
	return p.User
}

// What an operation needs of the principal on its bucket, for grants.
type need int

const (
	needOwner need = iota // the bucket's configuration, deletion, ACLs
	needAny               // any grant on the bucket (HeadBucket, GetBucketLocation)
	needRead              // reading the request's key (or listing under its prefix)
	needWrite             // writing or deleting the request's key
)

// opAccess says what each operation needs of a grant and which S3 action a bucket policy
// knows it as; an operation not listed needs the owner and is its own action.
var opAccess = map[string]struct {
	need   need
	action string
}{
	"HeadBucket": {needAny, "s3:ListBucket"}, "GetBucketLocation": {needAny, "s3:GetBucketLocation"},
	"GetBucketVersioning": {needAny, "s3:GetBucketVersioning"}, "PutBucketVersioning": {needOwner, "s3:PutBucketVersioning"},
	"GetObjectLockConfiguration": {needOwner, "s3:GetBucketObjectLockConfiguration"}, "PutObjectLockConfiguration": {needOwner, "s3:PutBucketObjectLockConfiguration"},
	"GetObjectRetention": {needRead, "s3:GetObjectRetention"}, "PutObjectRetention": {needWrite, "s3:PutObjectRetention"},
	"GetObjectLegalHold": {needRead, "s3:GetObjectLegalHold"}, "PutObjectLegalHold": {needWrite, "s3:PutObjectLegalHold"},
	"ListObjects": {needRead, "s3:ListBucket"}, "ListObjectsV2": {needRead, "s3:ListBucket"},
	"ListObjectVersions": {needRead, "s3:ListBucketVersions"}, "ListMultipartUploads": {needRead, "s3:ListBucketMultipartUploads"},
	"GetObject": {needRead, "s3:GetObject"}, "HeadObject": {needRead, "s3:GetObject"}, "RestoreObject": {needWrite, "s3:RestoreObject"},
	"GetObjectAttributes": {needRead, "s3:GetObjectAttributes"}, "GetObjectTagging": {needRead, "s3:GetObjectTagging"},
	"PutObject": {needWrite, "s3:PutObject"}, "CopyObject": {needWrite, "s3:PutObject"}, "PostObject": {needWrite, "s3:PutObject"},
	"DeleteObject":     {needWrite, "s3:DeleteObject"},
	"PutObjectTagging": {needWrite, "s3:PutObjectTagging"}, "DeleteObjectTagging": {needWrite, "s3:DeleteObjectTagging"},
	"CreateMultipartUpload": {needWrite, "s3:PutObject"}, "UploadPart": {needWrite, "s3:PutObject"},
	"UploadPartCopy": {needWrite, "s3:PutObject"}, "CompleteMultipartUpload": {needWrite, "s3:PutObject"},
	"AbortMultipartUpload": {needWrite, "s3:AbortMultipartUpload"}, "ListParts": {needWrite, "s3:ListMultipartUploadParts"},
	// Each key is checked by deleteObjects (as s3:DeleteObject).
	"DeleteObjects": {needAny, ""},
	// Bucket configuration: the owner, and what a policy allows.
	"DeleteBucket": {needOwner, "s3:DeleteBucket"}, "GetBucketAcl": {needOwner, "s3:GetBucketAcl"},
	"GetObjectAcl": {needOwner, "s3:GetObjectAcl"}, "PutBucketAcl": {needOwner, "s3:PutBucketAcl"}, "PutObjectAcl": {needOwner, "s3:PutObjectAcl"},
	"GetBucketCors": {needOwner, "s3:GetBucketCORS"}, "PutBucketCors": {needOwner, "s3:PutBucketCORS"},
	"DeleteBucketCors":                {needOwner, "s3:PutBucketCORS"},
	"GetBucketLifecycleConfiguration": {needOwner, "s3:GetLifecycleConfiguration"}, "PutBucketLifecycleConfiguration": {needOwner, "s3:PutLifecycleConfiguration"},
	"DeleteBucketLifecycle": {needOwner, "s3:PutLifecycleConfiguration"}, "GetBucketTagging": {needOwner, "s3:GetBucketTagging"},
	"GetBucketNotificationConfiguration": {needOwner, "s3:GetBucketNotification"}, "PutBucketNotificationConfiguration": {needOwner, "s3:PutBucketNotification"},
	"PutBucketTagging": {needOwner, "s3:PutBucketTagging"}, "DeleteBucketTagging": {needOwner, "s3:PutBucketTagging"},
	"GetBucketPolicy": {needOwner, "s3:GetBucketPolicy"}, "PutBucketPolicy": {needOwner, "s3:PutBucketPolicy"},
	"DeleteBucketPolicy": {needOwner, "s3:DeleteBucketPolicy"}, "GetBucketPolicyStatus": {needOwner, "s3:GetBucketPolicyStatus"},
	"GetPublicAccessBlock": {needOwner, "s3:GetBucketPublicAccessBlock"}, "PutPublicAccessBlock": {needOwner, "s3:PutBucketPublicAccessBlock"},
	"DeletePublicAccessBlock": {needOwner, "s3:PutBucketPublicAccessBlock"},
	"GetBucketLogging":        {needOwner, "s3:GetBucketLogging"}, "PutBucketLogging": {needOwner, "s3:PutBucketLogging"},
	"GetBucketOwnershipControls": {needOwner, "s3:GetBucketOwnershipControls"}, "PutBucketOwnershipControls": {needOwner, "s3:PutBucketOwnershipControls"},
	"DeleteBucketOwnershipControls": {needOwner, "s3:PutBucketOwnershipControls"},
}

// may reports whether p's grants on bucket allow n for key (for a listing, the prefix
// listed: a grant under a prefix lists only within it).
func (p Principal) may(bucket, key string, n need) bool {
	for _, g := range p.Grants {
		if g.Bucket != bucket {
			continue
		}
		switch {
		case g.Owner:
			return true
		case n == needOwner:
		case n == needAny:
			return true
		case n == needRead && g.Read && strings.HasPrefix(key, g.Prefix):
			return true
		case n == needWrite && g.Write && strings.HasPrefix(key, g.Prefix):
			return true
		}
	}
	return false
}

var (
	errAccessDenied        = &apiError{"AccessDenied", "Access Denied", http.StatusForbidden}
	errBucketAlreadyExists = &apiError{"BucketAlreadyExists", "The requested bucket name is not available. The bucket namespace is shared by all users of the system. Please select a different name and try again.", http.StatusConflict}
)

func (h *Handler) principal(accessKey string) Principal {
	if h.cfg.Principal == nil {
		return Principal{User: accessKey, Root: true}
	}
	return h.cfg.Principal(accessKey)
}

// authorize refuses a request that the principal may not make, and sets rq.full when it
// may do everything in the bucket (the root user, the bucket's owner, an owner grant). A
// bucket this node's map does not have yet is looked up through the leader for a signed
// request (it may have been created through another gateway a moment ago), never for an
// anonymous one; a bucket that does not exist is left to the operation (NoSuchBucket),
// except for anonymous requests, which are refused (nothing allows them).
func (h *Handler) authorize(r *http.Request, rq *request) error {
	switch {
	case rq.who.Root:
		rq.full = true
		return nil
	case rq.op == "ListBuckets", rq.op == "CreateBucket":
		if rq.who.Anonymous {
			return errAccessDenied
		}
		return nil
	case rq.op == "PostObject" && rq.auth == nil:
		return nil // authorized by postObject once its form's signature is verified
	}
	a, ok := opAccess[rq.op]
	if !ok {
		a.need, a.action = needOwner, "s3:"+rq.op
	}
	if _, v := r.URL.Query()["versionId"]; v {
		// A version named: the policy actions of versions.
		switch rq.op {
		case "GetObject", "HeadObject":
			a.action = "s3:GetObjectVersion"
		case "DeleteObject":
			a.action = "s3:DeleteObjectVersion"
		case "GetObjectTagging", "PutObjectTagging", "DeleteObjectTagging":
			a.action += "Version"
		case "GetObjectAcl":
			a.action = "s3:GetObjectVersionAcl"
		case "PutObjectAcl":
			a.action = "s3:PutObjectVersionAcl"
		}
	}
	key := rq.key
	if a.need == needRead && rq.key == "" { // a listing: of its prefix
		key = r.URL.Query().Get("prefix")
	}
	full, err := h.allowed(r, rq, rq.bucket, key, a.need, a.action)
	if err != nil {
		return err
	}
	rq.full = full
	if rq.op == "CopyObject" || rq.op == "UploadPartCopy" {
		if sb, sk, err := copySource(r.Header.Get("x-amz-copy-source")); err == nil {
			_, err := h.allowed(r, rq, sb, sk, needRead, "s3:GetObject")
			return err
		}
	}
	return nil
}

// allowed decides whether the principal may do action (needing n of a grant) on key of
// bucket (key "" for the bucket itself; for a listing, the prefix): an explicit Deny of
// the bucket's policy refuses it (except the owner's managing the policy itself, so that
// no owner locks itself out); the bucket's owner and the grants allow it; else the
// policy's Allow; else an ACL's grant (acl.go; for an object's own ACL, the handler
// checks it once it has the object's record). It reports whether the principal may do
// everything in the bucket. The request's bucket, once looked up, is kept in rq.bkt.
func (h *Handler) allowed(r *http.Request, rq *request, bucket, key string, n need, action string) (bool, error) {
	if bucket == "" || rq.who.Root {
		return rq.who.Root, nil
	}
	b, err := h.store.LocalBucket(bucket)
	if err != nil && !rq.who.Anonymous {
		b, err = h.store.HeadBucket(r.Context(), bucket)
	}
	if err != nil {
		if errors.Is(errors.NotExist, err) && !rq.who.Anonymous {
			return false, nil
		}
		if errors.Is(errors.NotExist, err) {
			return false, errAccessDenied
		}
		return false, err
	}
	if bucket == rq.bucket {
		rq.bkt, rq.hasBkt = b, true
	}
	owner := !rq.who.Anonymous && (b.Owner == rq.who.User || rq.who.may(bucket, "", needOwner))
	decision := access.NoMatch
	if doc := b.Config[policyKind]; doc != "" && action != "" {
		pol, err := h.policies.get(bucket, doc)
		if err != nil {
			h.log.Error("a bucket's stored policy does not parse: ignored", "bucket", bucket, "err", err)
		} else {
			restrict := !owner && b.Config[publicAccessBlockKind] != "" && parsePAB(b.Config[publicAccessBlockKind]).RestrictPublicBuckets
			res := arn(bucket, key, n, action)
			if n == needOwner && key != "" { // Get/PutObjectAcl
				res = "arn:aws:s3:::" + bucket + "/" + key
			}
			var tagErr error
			tags := h.existingTags(r, rq, bucket, key, action, &tagErr)
			decision = pol.Evaluate(&access.Request{User: rq.who.User, Action: action, Resource: res,
				Context: conditionContext(r, rq, h.now(), tags)}, restrict)
			if tagErr != nil {
				// The tags a condition needs could not be read: refuse rather than decide
				// without them (a Deny conditioned on a tag must not be skipped).
				return false, tagErr
			}
		}
	}
	switch {
	case decision == access.Deny && !(owner && strings.HasSuffix(action, "BucketPolicy")):
		return false, errAccessDenied
	case owner:
		return true, nil
	case rq.who.may(bucket, key, n), decision == access.Allow, aclAllowed(rq, &b, bucket, key, action):
		return false, nil
	}
	return false, errAccessDenied
}

// arn is the resource an action is on: the object's ARN for object actions, the
// bucket's for the others (listings included).
func arn(bucket, key string, n need, action string) string {
	if strings.HasPrefix(action, "s3:ListBucket") {
		return "arn:aws:s3:::" + bucket // a listing's prefix is a condition (s3:prefix), not part of the resource
	}
	if n == needRead || n == needWrite {
		if key != "" {
			return "arn:aws:s3:::" + bucket + "/" + key
		}
	}
	return "arn:aws:s3:::" + bucket
}

// existingTags returns the tag set of the object version a policy's
// s3:ExistingObjectTag/KEY conditions are about (key of bucket: the request's object, the
// version its versionId names; or the source of a copy, the version x-amz-copy-source
// names), read once, when a condition first asks; nil for a listing or a bucket action. A
// version that does not exist (or is a delete marker) has no tags; any other failure to
// read it is left in *errp.
func (h *Handler) existingTags(r *http.Request, rq *request, bucket, key, action string, errp *error) func() [][2]string {
	if key == "" || strings.HasPrefix(action, "s3:ListBucket") {
		return nil
	}
	var tags [][2]string
	done := false
	return func() [][2]string {
		if done {
			return tags
		}
		done = true
		var ref versionRef
		if (rq.op == "CopyObject" || rq.op == "UploadPartCopy") && action == "s3:GetObject" {
			// The check of a copy's source (authorize): the version it names.
			if sb, sk, sr, err := copySourceVersion(r.Header.Get("x-amz-copy-source")); err == nil && sb == bucket && sk == key {
				ref = sr
			}
		} else if bucket == rq.bucket && key == rq.key {
			vr, err := queryVersion(r)
			if err != nil {
				*errp = err
				return nil
			}
			ref = vr
		}
		o, rd, err := h.openVersion(r.Context(), bucket, key, ref, true)
		if rd != nil {
			rd.Close()
		}
		var dm *object.DeleteMarkerError
		switch {
		case err == nil:
			tags = o.Tags
		case errors.Is(errors.NotExist, err), errors.As(err, &dm):
		default:
			*errp = err
		}
		return tags
	}
}

// conditionContext gives the values of the condition keys of a bucket policy for r;
// tags, if not nil, gives the tags of the object s3:ExistingObjectTag/KEY is about.
func conditionContext(r *http.Request, rq *request, now time.Time, tags func() [][2]string) func(string) (string, bool) {
	return func(key string) (string, bool) {
		if tk, ok := strings.CutPrefix(key, "s3:existingobjecttag/"); ok {
			if tags == nil {
				return "", false
			}
			for _, t := range tags() {
				if t[0] == tk {
					return t[1], true
				}
			}
			return "", false
		}
		q := r.URL.Query
		switch key {
		case "aws:sourceip":
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			return host, err == nil
		case "aws:securetransport":
			return strconv.FormatBool(r.TLS != nil), true
		case "aws:currenttime":
			return now.UTC().Format(time.RFC3339), true
		case "aws:epochtime":
			return strconv.FormatInt(now.Unix(), 10), true
		case "aws:principaltype":
			if rq.who.Anonymous {
				return "Anonymous", true
			}
			return "User", true
		case "aws:useragent":
			return r.UserAgent(), r.UserAgent() != ""
		case "aws:referer":
			return r.Referer(), r.Referer() != ""
		case "s3:prefix", "s3:delimiter", "s3:max-keys":
			v, ok := q()[strings.TrimPrefix(key, "s3:")]
			if !ok || len(v) == 0 {
				return "", false
			}
			return v[0], true
		case "s3:authtype":
			switch {
			case rq.who.Anonymous:
				return "", false
			case rq.op == "PostObject":
				return "POST", true
			case r.Header.Get("Authorization") != "":
				return "REST-HEADER", true
			}
			return "REST-QUERY-STRING", true
		}
		if h, ok := strings.CutPrefix(key, "s3:x-amz-"); ok {
			v := r.Header.Get("X-Amz-" + h)
			return v, v != ""
		}
		return "", false
	}
}

// policies caches parsed bucket policies: one per bucket, parsed again when its document
// changes.
type policyCache struct {
	m sync.Map // bucket -> *cachedPolicy
}

type cachedPolicy struct {
	doc string
	p   *access.Policy
	err error
}

func (c *policyCache) get(bucket, doc string) (*access.Policy, error) {
	if v, ok := c.m.Load(bucket); ok {
		if cp := v.(*cachedPolicy); cp.doc == doc {
			return cp.p, cp.err
		}
	}
	p, err := access.Parse([]byte(doc), bucket)
	c.m.Store(bucket, &cachedPolicy{doc: doc, p: p, err: err})
	return p, err
}
