package s3api

import (
	"context"
	"encoding/xml"
	"net/http"
	"slices"
	"strings"

	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/object"
)

// Canned ACLs and S3 Object Ownership (docs/design/acl.md). cairn keeps an ACL as the
// name of the canned ACL it is ("" for private, the default): on an object in
// object.Object.ACL, on a bucket as its "acl" configuration. A grant list (x-amz-grant-*
// headers or an AccessControlPolicy document) is accepted when it is the grant list of
// one of the canned ACLs and kept as that one; grants no canned ACL has (other users,
// LogDelivery, e-mail addresses) are refused, never kept in part. A bucket's Object
// Ownership is its "ownershipControls" configuration: none is BucketOwnerEnforced (ACLs
// disabled, the default), "none" is what DeleteBucketOwnershipControls leaves (the
// bucket behaves as ObjectWriter, as on AWS).

// The canned ACLs cairn keeps.
const (
	aclPrivate          = "private"
	aclPublicRead       = "public-read"
	aclPublicReadWrite  = "public-read-write"
	aclAuthenticated    = "authenticated-read"
	aclBucketOwnerFull  = "bucket-owner-full-control"
	cannedACLsSupported = aclPrivate + " " + aclPublicRead + " " + aclPublicReadWrite + " " + aclAuthenticated + " " + aclBucketOwnerFull
)

// The bucket configurations (object.Bucket.Config) of ACLs and Object Ownership, and the
// Object Ownership settings.
const (
	aclKind       = "acl"
	ownershipKind = "ownershipControls"
	ownEnforced   = "BucketOwnerEnforced"
	ownPreferred  = "BucketOwnerPreferred"
	ownWriter     = "ObjectWriter"
	ownDeleted    = "none" // the configuration DeleteBucketOwnershipControls leaves
)

// Grantee groups and the AccessControlPolicy document.
const (
	groupAllUsers      = "http://acs.amazonaws.com/groups/global/AllUsers"
	groupAuthenticated = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
	groupLogDelivery   = "http://acs.amazonaws.com/groups/s3/LogDelivery"
	xsiNamespace       = "http://www.w3.org/2001/XMLSchema-instance"
	maxACLDocument     = 64 << 10
)

// ACL errors, as S3 words them.
var (
	errACLNotSupported        = &apiError{"AccessControlListNotSupported", "The bucket does not allow ACLs", 400}
	errBucketACLOwnership     = &apiError{"InvalidBucketAclWithObjectOwnership", "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting", 400}
	errPublicACLBlocked       = &apiError{"AccessDenied", "Access Denied: the ACL is public and the bucket's BlockPublicAcls setting blocks public ACLs", 403}
	errNoOwnershipControls    = &apiError{"OwnershipControlsNotFoundError", "The bucket ownership controls were not found", 404}
	errMissingACL             = &apiError{"MissingSecurityHeader", "Your request was missing a required header: x-amz-acl, x-amz-grant-* or an AccessControlPolicy document", 400}
	errMalformedACL           = &apiError{"MalformedACLError", "The XML you provided was not well-formed or did not validate against our published schema", 400}
	errCannedAndGrants        = &apiError{"InvalidRequest", "Specifying both Canned ACLs and Header Grants is not allowed", 400}
	errACLHeaderAndBody       = &apiError{"UnexpectedContent", "This request does not support content", 400}
	errACLOwnerChange         = &apiError{"AccessDenied", "Access Denied: the ACL's Owner is not the owner of the resource (owners cannot be changed)", 403}
	errUpgradingACL           = &apiError{"ServiceUnavailable", "The cluster is being upgraded: ACLs and object owners are kept once every node runs a build at feature level 5.", 503}
	errACLGrantNotCanned      = &apiError{"NotImplemented", "cairn keeps only the grants of the canned ACLs " + cannedACLsSupported + " (grants to other users: cairn admin user grant or a bucket policy)", 501}
	errACLOwnerNotFull        = &apiError{"NotImplemented", "cairn keeps only the grants of the canned ACLs " + cannedACLsSupported + ", each of which grants the owner FULL_CONTROL: an AccessControlPolicy must grant it too", 501}
	errInvalidCannedACL       = &apiError{"InvalidArgument", "Invalid canned ACL: cairn supports " + cannedACLsSupported, 400}
	errInvalidObjectOwnership = &apiError{"InvalidArgument", "Invalid x-amz-object-ownership header: BucketOwnerEnforced, BucketOwnerPreferred or ObjectWriter", 400}
)

// stored is a canned ACL as kept: "" for private.
func stored(canned string) string {
	if canned == aclPrivate {
		return ""
	}
	return canned
}

// publicACL reports whether a canned ACL grants anything to AllUsers or
// AuthenticatedUsers (both are public for Block Public Access, as on AWS).
func publicACL(canned string) bool {
	return canned == aclPublicRead || canned == aclPublicReadWrite || canned == aclAuthenticated
}

// ownership is a bucket's Object Ownership as it behaves.
func ownership(b *object.Bucket) string {
	switch d := b.Config[ownershipKind]; d {
	case "":
		return ownEnforced
	case ownDeleted:
		return ownWriter
	default:
		return d
	}
}

// perm is what an ACL grant permits.
type perm uint8

const (
	permRead perm = 1 << iota
	permWrite
	permReadACP
	permWriteACP
	permFull = permRead | permWrite | permReadACP | permWriteACP
)

// aclActions are the policy actions an ACL can allow: on the bucket (its ACL) or on the
// object (its own ACL, checked once the object's record is read).
var aclActions = map[string]struct {
	object bool
	p      perm
}{
	"s3:ListBucket": {false, permRead}, "s3:ListBucketVersions": {false, permRead}, "s3:ListBucketMultipartUploads": {false, permRead},
	"s3:PutObject": {false, permWrite}, "s3:DeleteObject": {false, permWrite}, "s3:AbortMultipartUpload": {false, permWrite},
	"s3:ListMultipartUploadParts": {false, permWrite},
	"s3:GetObject":                {true, permRead}, "s3:GetObjectVersion": {true, permRead},
	"s3:GetObjectAcl": {true, permReadACP}, "s3:GetObjectVersionAcl": {true, permReadACP},
	"s3:PutObjectAcl": {true, permWriteACP}, "s3:PutObjectVersionAcl": {true, permWriteACP},
}

// cannedAllows reports whether canned grants p to the principal through its group
// grants (AllUsers, AuthenticatedUsers; none if public ACLs are ignored).
func cannedAllows(canned string, who Principal, p perm, ignorePublic bool) bool {
	if ignorePublic {
		return false
	}
	switch canned {
	case aclPublicRead:
		return p == permRead
	case aclPublicReadWrite:
		return p == permRead || p == permWrite
	case aclAuthenticated:
		return p == permRead && !who.Anonymous
	}
	return false
}

// aclAllowed decides, for a request that neither the owner, a grant nor a policy
// allows, whether an ACL does: the bucket's ACL for a bucket permission, and for the
// request's own object operations (GetObject, HeadObject, Get/PutObjectAcl) the object's,
// which the handler checks once it has read the record (rq.objectACL). ACLs count only
// in a bucket whose Object Ownership is not BucketOwnerEnforced.
func aclAllowed(rq *request, b *object.Bucket, bucket, key, action string) bool {
	a, ok := aclActions[action]
	if !ok || ownership(b) == ownEnforced {
		return false
	}
	if a.object {
		if bucket != rq.bucket || key != rq.key || key == "" {
			return false // a copy's source: only grants and policies
		}
		switch rq.op {
		case "GetObject", "HeadObject", "GetObjectAcl", "PutObjectAcl":
			rq.objectACL = a.p
			return true
		}
		return false
	}
	canned := b.Config[aclKind]
	return canned != "" && cannedAllows(canned, rq.who, a.p, parsePAB(b.Config[publicAccessBlockKind]).IgnorePublicAcls)
}

// checkObjectACL is the second half of an object permission aclAllowed deferred: the
// version's owner has every permission on it, the others what its ACL grants.
func checkObjectACL(rq *request, o *object.Object) error {
	if rq.objectACL == 0 {
		return nil
	}
	if !rq.who.Anonymous && o.Owner != "" && o.Owner == rq.who.User {
		return nil
	}
	ignore := rq.hasBkt && parsePAB(rq.bkt.Config[publicAccessBlockKind]).IgnorePublicAcls
	if cannedAllows(o.ACL, rq.who, rq.objectACL, ignore) {
		return nil
	}
	return errAccessDenied
}

// deferredReadError is the answer to a read that failed for a request only an object's
// ACL could allow: that the key (or version) does not exist is told only to who may list
// the bucket (its ACL grants READ), as S3 does; the others get AccessDenied.
func deferredReadError(hd http.Header, rq *request, err error) error {
	if rq.objectACL == 0 {
		return readError(hd, err)
	}
	ae := toAPIError(readError(http.Header{}, err))
	if ae.Status != 404 && ae.Status != 405 {
		return ae
	}
	if rq.hasBkt && cannedAllows(rq.bkt.Config[aclKind], rq.who, permRead, parsePAB(rq.bkt.Config[publicAccessBlockKind]).IgnorePublicAcls) {
		return readError(hd, err)
	}
	return errAccessDenied
}

// aclGrantee is one grantee of a grant list, resolved against the resource's owner.
type aclGrantee uint8

const (
	granteeOwner aclGrantee = iota
	granteeBucketOwner
	granteeAllUsers
	granteeAuthenticated
)

// aclGrant is a grant of a grant list: a grantee and what it is given.
type aclGrant struct {
	who aclGrantee
	p   perm
}

// cannedGrants are the grants of each canned ACL but the owner's FULL_CONTROL, which
// every ACL has.
var cannedGrants = map[string][]aclGrant{
	aclPrivate:         nil,
	aclPublicRead:      {{granteeAllUsers, permRead}},
	aclPublicReadWrite: {{granteeAllUsers, permRead | permWrite}},
	aclAuthenticated:   {{granteeAuthenticated, permRead}},
	aclBucketOwnerFull: {{granteeBucketOwner, permFull}},
}

// cannedOf returns the canned ACL whose grants are grants (the owner's own are left
// out: the owner always has full control), or errACLGrantNotCanned.
func cannedOf(grants []aclGrant) (string, error) {
	by := map[aclGrantee]perm{}
	for _, g := range grants {
		if g.who != granteeOwner {
			by[g.who] |= g.p
		}
	}
	for _, name := range []string{aclPrivate, aclPublicRead, aclPublicReadWrite, aclAuthenticated, aclBucketOwnerFull} {
		want := cannedGrants[name]
		if len(want) != len(by) {
			continue
		}
		match := true
		for _, g := range want {
			if by[g.who] != g.p {
				match = false
			}
		}
		if match {
			return name, nil
		}
	}
	return "", errACLGrantNotCanned
}

// aclIDs are the canonical IDs a grant list is resolved against.
type aclIDs struct {
	owner, bucketOwner string
}

// grantee resolves one grantee: a canonical user (the owner or the bucket's owner), a
// group (AllUsers, AuthenticatedUsers), or something cairn cannot keep.
func (ids aclIDs) grantee(kind, value string) (aclGrantee, error) {
	switch kind {
	case "id", "CanonicalUser":
		switch value {
		case ids.owner:
			return granteeOwner, nil
		case ids.bucketOwner:
			return granteeBucketOwner, nil
		}
		return 0, errACLGrantNotCanned
	case "uri", "Group":
		switch value {
		case groupAllUsers:
			return granteeAllUsers, nil
		case groupAuthenticated:
			return granteeAuthenticated, nil
		case groupLogDelivery:
			return 0, errACLGrantNotCanned
		}
		return 0, errf(400, "InvalidArgument", "Invalid group uri")
	case "emailAddress", "AmazonCustomerByEmail":
		return 0, errACLGrantNotCanned
	}
	return 0, errf(400, "InvalidArgument", "Invalid grantee type %q", kind)
}

var permNames = map[string]perm{"READ": permRead, "WRITE": permWrite, "READ_ACP": permReadACP, "WRITE_ACP": permWriteACP, "FULL_CONTROL": permFull}

// grantHeaders are the x-amz-grant-* headers with the permission each gives.
var grantHeaders = []struct {
	name string
	p    perm
}{
	{"X-Amz-Grant-Read", permRead}, {"X-Amz-Grant-Write", permWrite}, {"X-Amz-Grant-Read-Acp", permReadACP},
	{"X-Amz-Grant-Write-Acp", permWriteACP}, {"X-Amz-Grant-Full-Control", permFull},
}

// headerACL returns the canned ACL a request's x-amz-acl or x-amz-grant-* headers give
// (ok false if it has neither).
func headerACL(hd http.Header, ids aclIDs) (canned string, ok bool, err error) {
	acl, hasACL := hd["X-Amz-Acl"]
	var grants []aclGrant
	hasGrants := false
	for _, gh := range grantHeaders {
		for _, v := range hd[gh.name] {
			hasGrants = true
			for _, part := range strings.Split(v, ",") {
				kind, value, found := strings.Cut(strings.TrimSpace(part), "=")
				if !found {
					return "", false, errf(400, "InvalidArgument", "Invalid grant header %s", gh.name)
				}
				g, err := ids.grantee(strings.TrimSpace(kind), strings.Trim(strings.TrimSpace(value), `"`))
				if err != nil {
					return "", false, err
				}
				grants = append(grants, aclGrant{g, gh.p})
			}
		}
	}
	switch {
	case hasACL && hasGrants:
		return "", false, errCannedAndGrants
	case hasACL:
		if len(acl) != 1 || !slices.Contains(strings.Fields(cannedACLsSupported), acl[0]) {
			return "", false, errInvalidCannedACL
		}
		return acl[0], true, nil
	case hasGrants:
		c, err := cannedOf(grants)
		return c, err == nil, err
	}
	return "", false, nil
}

// accessControlPolicy is the document of PutBucketAcl and PutObjectAcl.
type accessControlPolicy struct {
	XMLName xml.Name `xml:"AccessControlPolicy"`
	Owner   *struct {
		ID string
	}
	Grants []struct {
		Grantee *struct {
			Type         string `xml:"type,attr"`
			ID           string
			URI          string
			EmailAddress string
		}
		Permission string
	} `xml:"AccessControlList>Grant"`
}

// parseACL parses an AccessControlPolicy document into the canned ACL it is.
func parseACL(data []byte, ids aclIDs) (string, error) {
	var doc accessControlPolicy
	if err := xml.Unmarshal(data, &doc); err != nil {
		return "", errMalformedACL
	}
	if doc.Owner != nil && doc.Owner.ID != "" && doc.Owner.ID != ids.owner {
		return "", errACLOwnerChange
	}
	grants := make([]aclGrant, 0, len(doc.Grants))
	var owner perm // what the document grants the owner
	for _, g := range doc.Grants {
		p, ok := permNames[g.Permission]
		if !ok || g.Grantee == nil {
			return "", errMalformedACL
		}
		kind, value := g.Grantee.Type, g.Grantee.ID
		switch {
		case g.Grantee.URI != "":
			kind, value = "Group", g.Grantee.URI
		case g.Grantee.EmailAddress != "":
			kind = "AmazonCustomerByEmail"
		case g.Grantee.ID != "":
			kind = "CanonicalUser"
		}
		who, err := ids.grantee(kind, value)
		if err != nil {
			return "", err
		}
		if who == granteeOwner {
			owner |= p
		}
		grants = append(grants, aclGrant{who, p})
	}
	if owner != permFull {
		// Every canned ACL grants the owner FULL_CONTROL, and cairn keeps no other
		// owner's grant: a document that takes some of it away is not one cairn can keep.
		return "", errACLOwnerNotFull
	}
	return cannedOf(grants)
}

// requestACL returns the ACL of Put*Acl: from its headers or its document.
func requestACL(r *http.Request, rq *request, ids aclIDs) (string, error) {
	canned, ok, err := headerACL(r.Header, ids)
	if err != nil {
		return "", err
	}
	data, err := readBody(r, rq, maxACLDocument)
	if err != nil {
		return "", err
	}
	switch {
	case ok && len(data) > 0:
		return "", errACLHeaderAndBody
	case ok:
		return canned, nil
	case len(data) == 0:
		return "", errMissingACL
	}
	return parseACL(data, ids)
}

// allowedACL refuses an ACL the bucket does not take: any but the owner's alone where
// ACLs are disabled, a public one where Block Public Access blocks them.
func allowedACL(b *object.Bucket, canned string) error {
	if ownership(b) == ownEnforced && canned != aclPrivate && canned != aclBucketOwnerFull {
		return errACLNotSupported
	}
	if publicACL(canned) && parsePAB(b.Config[publicAccessBlockKind]).BlockPublicAcls {
		return errPublicACLBlocked
	}
	return nil
}

// aclWrite gives a new object (PutObject, CopyObject, CreateMultipartUpload,
// PostObject: hd holds the request's headers or the form's fields) its ACL and owner.
// The bucket is looked up only if the request has an ACL or its writer is not the
// bucket's owner (authorize looked it up then).
func (h *Handler) aclWrite(ctx context.Context, hd http.Header, rq *request, meta *object.Object) error {
	meta.ACL, meta.ACLHLC, meta.Owner = "", 0, ""
	_, hasACL := hd["X-Amz-Acl"]
	if !hasACL && rq.full {
		for _, gh := range grantHeaders {
			if _, ok := hd[gh.name]; ok {
				hasACL = true
			}
		}
		if !hasACL {
			return nil // the bucket's owner's object, private
		}
	}
	b := &rq.bkt
	if !rq.hasBkt {
		hb, err := h.store.HeadBucket(ctx, rq.bucket)
		if err != nil {
			return err
		}
		b = &hb
	}
	own := ownership(b)
	writer := b.Owner // the bucket's owner, the root user and owner grants write as the owner
	if !rq.full && !rq.who.Anonymous && own != ownEnforced {
		writer = rq.who.User // an anonymous writer's objects are the bucket owner's
	}
	canned, ok, err := headerACL(hd, aclIDs{owner: ownerOf(writer).ID, bucketOwner: ownerOf(b.Owner).ID})
	if err != nil {
		return err
	}
	if !ok {
		canned = aclPrivate
	}
	if err := allowedACL(b, canned); err != nil {
		return err
	}
	if own == ownEnforced || (own == ownPreferred && canned == aclBucketOwnerFull) {
		writer = b.Owner // the bucket's owner owns it
	}
	if writer != b.Owner {
		meta.Owner = writer
	}
	if own != ownEnforced && !(writer == b.Owner && canned == aclBucketOwnerFull) {
		meta.ACL = stored(canned)
	}
	if (meta.ACL != "" || meta.Owner != "") && !h.levelAtLeast(5) {
		return errUpgradingACL
	}
	return nil
}

// objectOwner is the owner of a version: its writer, or the bucket's owner.
func objectOwner(b *object.Bucket, o *object.Object) string {
	if o.Owner != "" {
		return o.Owner
	}
	return b.Owner
}

// getACL answers GetBucketAcl and GetObjectAcl: the owner and the grants of the canned
// ACL the bucket or version has.
func (h *Handler) getACL(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	owner, canned := b.Owner, b.Config[aclKind]
	if rq.key != "" {
		o, err := h.aclVersion(w, r, rq)
		if err != nil {
			return err
		}
		owner, canned = objectOwner(&b, o), o.ACL
	}
	if ownership(&b) == ownEnforced {
		canned = "" // ACLs disabled: the bucket's owner has full control, nobody else anything
	}
	x := newXMLWriter()
	x.open("AccessControlPolicy", `xmlns="`+xmlns+`"`)
	writeOwner(x, ownerOf(owner))
	x.open("AccessControlList", "")
	user := func(name, p string) {
		o := ownerOf(name)
		x.open("Grant", "")
		x.open("Grantee", `xmlns:xsi="`+xsiNamespace+`" xsi:type="CanonicalUser"`)
		x.elem("ID", o.ID)
		x.elem("DisplayName", o.DisplayName)
		x.close("Grantee")
		x.elem("Permission", p)
		x.close("Grant")
	}
	group := func(uri, p string) {
		x.open("Grant", "")
		x.open("Grantee", `xmlns:xsi="`+xsiNamespace+`" xsi:type="Group"`)
		x.elem("URI", uri)
		x.close("Grantee")
		x.elem("Permission", p)
		x.close("Grant")
	}
	user(owner, "FULL_CONTROL")
	switch canned {
	case aclPublicRead:
		group(groupAllUsers, "READ")
	case aclPublicReadWrite:
		group(groupAllUsers, "READ")
		group(groupAllUsers, "WRITE")
	case aclAuthenticated:
		group(groupAuthenticated, "READ")
	case aclBucketOwnerFull:
		if b.Owner != owner {
			user(b.Owner, "FULL_CONTROL")
		}
	}
	x.close("AccessControlList")
	x.close("AccessControlPolicy")
	return x.send(w)
}

// aclVersion reads the record of the version an object ACL request names and checks
// the object's ACL where only it could allow the request.
func (h *Handler) aclVersion(w http.ResponseWriter, r *http.Request, rq *request) (*object.Object, error) {
	ref, err := queryVersion(r)
	if err != nil {
		return nil, err
	}
	o, rd, err := h.openVersion(r.Context(), rq.bucket, rq.key, ref, true)
	if err != nil {
		return nil, deferredReadError(w.Header(), rq, err)
	}
	if rd != nil {
		rd.Close()
	}
	if err := checkObjectACL(rq, o); err != nil {
		return nil, err
	}
	if ref.set || o.Versioned {
		w.Header().Set("x-amz-version-id", versionIDOf(o))
	}
	return o, nil
}

// putBucketACL answers PutBucketAcl: the bucket's ACL becomes its "acl" configuration.
func (h *Handler) putBucketACL(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	id := ownerOf(b.Owner).ID
	canned, err := requestACL(r, rq, aclIDs{owner: id, bucketOwner: id})
	if err != nil {
		return err
	}
	if err := allowedACL(&b, canned); err != nil {
		return err
	}
	var doc []byte
	if s := stored(canned); s != "" && s != aclBucketOwnerFull { // on a bucket: the owner's alone
		doc = []byte(s)
	}
	if doc == nil && b.Config[aclKind] == "" {
		w.WriteHeader(http.StatusOK) // nothing changes
		return nil
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, aclKind, doc); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// putObjectACL answers PutObjectAcl: the version's ACL changes in place, on every
// holder (ChangeMeta), like its tags.
func (h *Handler) putObjectACL(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	_, named := r.URL.Query()["versionId"]
	var o *object.Object
	if named || !rq.full {
		if o, err = h.aclVersion(w, r, rq); err != nil {
			return err
		}
	} else if o, err = h.store.StatObject(r.Context(), rq.bucket, rq.key); err != nil {
		return readError(w.Header(), err)
	}
	owner := objectOwner(&b, o)
	canned, err := requestACL(r, rq, aclIDs{owner: ownerOf(owner).ID, bucketOwner: ownerOf(b.Owner).ID})
	if err != nil {
		return err
	}
	if err := allowedACL(&b, canned); err != nil {
		return err
	}
	acl := stored(canned)
	if ownership(&b) == ownEnforced || (owner == b.Owner && canned == aclBucketOwnerFull) {
		acl = ""
	}
	if acl == o.ACL {
		w.WriteHeader(http.StatusOK)
		return nil
	}
	if !h.levelAtLeast(5) {
		return errUpgradingACL
	}
	if _, err := h.store.ChangeMeta(r.Context(), rq.bucket, rq.key, o.HLC, gateway.MetaChange{ACL: &acl}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// ownershipControls is the document of Get/PutBucketOwnershipControls.
type ownershipControls struct {
	XMLName xml.Name `xml:"OwnershipControls"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Rules   []struct {
		ObjectOwnership string
	} `xml:"Rule"`
}

func (h *Handler) getOwnershipControls(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	if b.Config[ownershipKind] == ownDeleted {
		return errNoOwnershipControls
	}
	doc := ownershipControls{Xmlns: xmlns}
	doc.Rules = append(doc.Rules, struct{ ObjectOwnership string }{ownership(&b)})
	return writeXML(w, doc)
}

// putOwnershipControls sets the bucket's Object Ownership. BucketOwnerEnforced needs a
// bucket ACL that grants nobody else anything (InvalidBucketAclWithObjectOwnership).
func (h *Handler) putOwnershipControls(w http.ResponseWriter, r *http.Request, rq *request) error {
	data, err := readBody(r, rq, 4<<10)
	if err != nil {
		return err
	}
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	var doc ownershipControls
	if err := xml.Unmarshal(data, &doc); err != nil || len(doc.Rules) != 1 {
		return errMalformedXML
	}
	var cfg []byte // BucketOwnerEnforced: no configuration, the default
	switch own := doc.Rules[0].ObjectOwnership; own {
	case ownEnforced:
		if b.Config[aclKind] != "" {
			return errBucketACLOwnership
		}
	case ownPreferred, ownWriter:
		cfg = []byte(own)
	default:
		return errMalformedXML
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, ownershipKind, cfg); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// deleteOwnershipControls removes the bucket's Object Ownership: it then behaves as
// ObjectWriter (as on AWS) and GetBucketOwnershipControls answers
// OwnershipControlsNotFoundError.
func (h *Handler) deleteOwnershipControls(w http.ResponseWriter, r *http.Request, rq *request) error {
	if _, err := h.store.HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, ownershipKind, []byte(ownDeleted)); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// createBucketACL checks the Object Ownership and ACL a CreateBucket asks for and
// returns the configurations to set once the bucket exists (none for the defaults).
func (h *Handler) createBucketACL(hd http.Header, rq *request) (own, acl []byte, err error) {
	o := hd.Get("X-Amz-Object-Ownership")
	switch o {
	case "", ownEnforced:
	case ownPreferred, ownWriter:
		own = []byte(o)
	default:
		return nil, nil, errInvalidObjectOwnership
	}
	id := ownerOf(rq.who.owner()).ID
	canned, ok, err := headerACL(hd, aclIDs{owner: id, bucketOwner: id})
	if err != nil || !ok {
		return own, nil, err
	}
	if own == nil && canned != aclPrivate && canned != aclBucketOwnerFull {
		return nil, nil, errBucketACLOwnership
	}
	if s := stored(canned); s != "" && s != aclBucketOwnerFull {
		acl = []byte(s)
	}
	if (own != nil || acl != nil) && !h.levelAtLeast(5) {
		return nil, nil, errUpgradingACL
	}
	return own, acl, nil
}
