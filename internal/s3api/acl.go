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

// ACLs and S3 Object Ownership (docs/design/acl.md). cairn keeps an ACL as the name of
// the canned ACL it is ("" for private, the default) or, from feature level 9, as an
// explicit grant list (explicitPrefix): on an object in object.Object.ACL, on a bucket as
// its "acl" configuration. A grant list (x-amz-grant-* headers or an AccessControlPolicy
// document) that is exactly a canned ACL's is kept as that one; grantees cairn cannot
// keep (unknown users, LogDelivery, e-mail addresses) are refused, never kept in part.
// aclGrants is the one evaluation of a kept ACL. A bucket's Object
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

// publicACL reports whether an ACL (as kept) grants anything to AllUsers or
// AuthenticatedUsers (both are public for Block Public Access, as on AWS).
func publicACL(acl string) bool {
	for _, e := range decodeGrants(acl) {
		if e.group != "" {
			return true
		}
	}
	return acl == aclPublicRead || acl == aclPublicReadWrite || acl == aclAuthenticated
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
	"s3:GetBucketAcl":             {false, permReadACP}, "s3:PutBucketAcl": {false, permWriteACP},
	"s3:GetObject": {true, permRead}, "s3:GetObjectVersion": {true, permRead},
	"s3:GetObjectAcl": {true, permReadACP}, "s3:GetObjectVersionAcl": {true, permReadACP},
	"s3:PutObjectAcl": {true, permWriteACP}, "s3:PutObjectVersionAcl": {true, permWriteACP},
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
	acl := b.Config[aclKind]
	return acl != "" && aclGrants(acl, rq.who, a.p, parsePAB(b.Config[publicAccessBlockKind]).IgnorePublicAcls)
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
	if aclGrants(o.ACL, rq.who, rq.objectACL, ignore) {
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
	if rq.hasBkt && aclGrants(rq.bkt.Config[aclKind], rq.who, permRead, parsePAB(rq.bkt.Config[publicAccessBlockKind]).IgnorePublicAcls) {
		return readError(hd, err)
	}
	return errAccessDenied
}

// An explicit grant list (feature level 9) is kept, on a bucket as its "acl"
// configuration and on an object in object.Object.ACL, as explicitPrefix followed by its
// grants in the order they were given, separated by ';', each "PERMISSION GRANTEE":
// PERMISSION as S3 spells it, GRANTEE "u:NAME" (a cairn user by name, whose canonical ID
// is derived from the name) or "g:AllUsers" / "g:AuthenticatedUsers". No canned ACL's
// name starts with the prefix, and a build from before level 9 finds in it no canned ACL
// (it grants nothing there). An entry that does not decode grants nothing.
const explicitPrefix = "grants:"

const (
	maxGrants     = 100 // grants of one list, as S3
	featureGrants = 9   // the feature level from which explicit grant lists are kept
)

var (
	errTooManyGrants     = &apiError{"MalformedACLError", "The ACL has more than 100 grants", 400}
	errUnresolvableEmail = &apiError{"UnresolvableGrantByEmailAddress", "The e-mail address you provided does not match any account on record: cairn users have no e-mail address (grant by canonical ID)", 400}
	errLogDelivery       = &apiError{"NotImplemented", "cairn writes server access logs itself: grants to the LogDelivery group are not kept", 501}
	errUnknownGrantee    = &apiError{"InvalidArgument", "Invalid id: no user of this cluster has that canonical ID", 400}
)

// aclEntry is one grant of a list: a user (by name) or a group is given p.
type aclEntry struct {
	user  string // a user's name; "" for a group
	group string // groupAllUsers or groupAuthenticated, when user is ""
	p     perm   // one of permNames' values
}

// groupNames are the groups a grant list keeps, by the short name they are kept as.
var groupNames = map[string]string{"AllUsers": groupAllUsers, "AuthenticatedUsers": groupAuthenticated}

var permNames = map[string]perm{"READ": permRead, "WRITE": permWrite, "READ_ACP": permReadACP, "WRITE_ACP": permWriteACP, "FULL_CONTROL": permFull}

func permName(p perm) string {
	for n, v := range permNames {
		if v == p {
			return n
		}
	}
	return ""
}

// encodeGrants is the kept form of an explicit grant list.
func encodeGrants(list []aclEntry) string {
	var b strings.Builder
	b.WriteString(explicitPrefix)
	for i, e := range list {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(permName(e.p))
		if e.user != "" {
			b.WriteString(" u:" + e.user)
		} else {
			b.WriteString(" g:" + e.group[strings.LastIndexByte(e.group, '/')+1:])
		}
	}
	return b.String()
}

// decodeGrants returns the grants of a kept explicit list (nil for a canned ACL).
func decodeGrants(acl string) []aclEntry {
	rest, ok := strings.CutPrefix(acl, explicitPrefix)
	if !ok || rest == "" {
		return nil
	}
	var list []aclEntry
	for _, part := range strings.Split(rest, ";") {
		pn, who, _ := strings.Cut(part, " ")
		p, ok := permNames[pn]
		if !ok {
			continue
		}
		if name, ok := strings.CutPrefix(who, "u:"); ok && name != "" {
			list = append(list, aclEntry{user: name, p: p})
		} else if uri := groupNames[strings.TrimPrefix(who, "g:")]; uri != "" && strings.HasPrefix(who, "g:") {
			list = append(list, aclEntry{group: uri, p: p})
		}
	}
	return list
}

// signed reports whether p is a user of the cluster who signed the request (an
// AuthenticatedUsers grantee): not anonymous, not a key revoked since it was verified.
func (p Principal) signed() bool {
	return !p.Anonymous && p.User != "" && !strings.HasPrefix(p.User, "\x00")
}

// aclGrants is the one place an ACL is evaluated: it reports whether acl (as kept: a
// canned ACL's name, "" for private, or an explicit list) grants p to who. The owner of
// the resource is not asked about (it has every permission, checked before); group
// grants count for nothing when ignorePublic (Block Public Access IgnorePublicAcls).
// Anything it does not recognise grants nothing.
func aclGrants(acl string, who Principal, p perm, ignorePublic bool) bool {
	if p == 0 || p&permFull != p {
		return false
	}
	if strings.HasPrefix(acl, explicitPrefix) {
		for _, e := range decodeGrants(acl) {
			if e.p&p != p {
				continue
			}
			switch {
			case e.user != "":
				if who.signed() && who.User == e.user {
					return true
				}
			case ignorePublic:
			case e.group == groupAllUsers:
				return true
			case e.group == groupAuthenticated:
				if who.signed() {
					return true
				}
			}
		}
		return false
	}
	if ignorePublic {
		return false
	}
	switch acl {
	case aclPublicRead:
		return p == permRead
	case aclPublicReadWrite:
		return p == permRead || p == permWrite
	case aclAuthenticated:
		return p == permRead && who.signed()
	}
	return false
}

// aclScope is what a grant list is resolved against: the resource's owner and its
// bucket's owner (user names), the cluster's users, and whether an explicit list may be
// kept (every node at feature level 9).
type aclScope struct {
	owner, bucketOwner string
	users              func() []string
	explicit           bool
}

// aclScope is the scope of a resource owned by owner in a bucket owned by bucketOwner
// ("" for either: the root user).
func (h *Handler) aclScope(owner, bucketOwner string) aclScope {
	return aclScope{owner: ownerOf(owner).DisplayName, bucketOwner: ownerOf(bucketOwner).DisplayName,
		users: h.cfg.Users, explicit: h.levelAtLeast(featureGrants)}
}

// userByID returns the user whose canonical ID id is.
func (s aclScope) userByID(id string) (string, bool) {
	for _, n := range []string{s.owner, s.bucketOwner, ownerOf("").DisplayName} {
		if ownerOf(n).ID == id {
			return n, true
		}
	}
	if s.users != nil {
		for _, n := range s.users() {
			if ownerOf(n).ID == id {
				return n, true
			}
		}
	}
	return "", false
}

// grantee resolves one grantee: a user of the cluster by canonical ID, or the group
// AllUsers or AuthenticatedUsers.
func (s aclScope) grantee(kind, value string) (aclEntry, error) {
	switch kind {
	case "id", "CanonicalUser":
		name, ok := s.userByID(value)
		if !ok {
			return aclEntry{}, errUnknownGrantee
		}
		return aclEntry{user: name}, nil
	case "uri", "Group":
		switch value {
		case groupAllUsers, groupAuthenticated:
			return aclEntry{group: value}, nil
		case groupLogDelivery:
			return aclEntry{}, errLogDelivery
		}
		return aclEntry{}, errf(400, "InvalidArgument", "Invalid group uri")
	case "emailAddress", "AmazonCustomerByEmail":
		return aclEntry{}, errUnresolvableEmail
	}
	return aclEntry{}, errf(400, "InvalidArgument", "Invalid grantee type %q", kind)
}

// cannedOrder are the canned ACLs a grant list may equal.
var cannedOrder = []string{aclPrivate, aclPublicRead, aclPublicReadWrite, aclAuthenticated, aclBucketOwnerFull}

// cannedGrants are the grants of a canned ACL but the owner's FULL_CONTROL, which every
// canned ACL has.
func (s aclScope) cannedGrants(name string) map[aclEntry]perm {
	switch name {
	case aclPublicRead:
		return map[aclEntry]perm{{group: groupAllUsers}: permRead}
	case aclPublicReadWrite:
		return map[aclEntry]perm{{group: groupAllUsers}: permRead | permWrite}
	case aclAuthenticated:
		return map[aclEntry]perm{{group: groupAuthenticated}: permRead}
	case aclBucketOwnerFull:
		return map[aclEntry]perm{{user: s.bucketOwner}: permFull}
	}
	return map[aclEntry]perm{}
}

// canned returns the canned ACL list is: the owner's FULL_CONTROL (whole or in parts)
// and that ACL's other grants. With lax, the owner's own grants are left out of the
// comparison (the rule before feature level 9).
func (s aclScope) canned(list []aclEntry, lax bool) (string, bool) {
	by := map[aclEntry]perm{}
	var owner perm
	for _, e := range list {
		if e.user == s.owner {
			owner |= e.p
			continue
		}
		p := e.p
		e.p = 0
		by[e] |= p
	}
	if !lax && owner != permFull {
		return "", false
	}
	for _, name := range cannedOrder {
		want := s.cannedGrants(name)
		if len(want) != len(by) {
			continue
		}
		match := true
		for k, p := range want {
			if by[k] != p {
				match = false
			}
		}
		if match {
			return name, true
		}
	}
	return "", false
}

// keep returns how a grant list is kept: as the canned ACL it is, or else (from feature
// level 9) as itself. Before level 9 the rules of canned ACLs alone hold: a list no
// canned ACL has is NotImplemented, and so is a document that grants the owner less than
// FULL_CONTROL (doc).
func (s aclScope) keep(list []aclEntry, doc bool) (string, error) {
	if len(list) > maxGrants {
		return "", errTooManyGrants
	}
	if c, ok := s.canned(list, false); ok {
		return c, nil
	}
	if s.explicit {
		return encodeGrants(list), nil
	}
	var owner perm
	for _, e := range list {
		if e.user == s.owner {
			owner |= e.p
		}
	}
	if doc && owner != permFull {
		return "", errACLOwnerNotFull
	}
	if c, ok := s.canned(list, true); ok {
		return c, nil
	}
	return "", errACLGrantNotCanned
}

// grantHeaders are the x-amz-grant-* headers with the permission each gives.
var grantHeaders = []struct {
	name string
	p    perm
}{
	{"X-Amz-Grant-Read", permRead}, {"X-Amz-Grant-Write", permWrite}, {"X-Amz-Grant-Read-Acp", permReadACP},
	{"X-Amz-Grant-Write-Acp", permWriteACP}, {"X-Amz-Grant-Full-Control", permFull},
}

// headerACL returns the ACL, as kept (a canned ACL's name, "private" included, or an
// explicit list), that a request's x-amz-acl or x-amz-grant-* headers give (ok false if
// it has neither).
func headerACL(hd http.Header, s aclScope) (acl string, ok bool, err error) {
	canned, hasACL := hd["X-Amz-Acl"]
	var list []aclEntry
	hasGrants := false
	for _, gh := range grantHeaders {
		if _, ok := hd[gh.name]; ok {
			hasGrants = true
		}
	}
	if hasACL && hasGrants {
		return "", false, errCannedAndGrants
	}
	for _, gh := range grantHeaders {
		for _, v := range hd[gh.name] {
			for _, part := range strings.Split(v, ",") {
				kind, value, found := strings.Cut(strings.TrimSpace(part), "=")
				if !found {
					return "", false, errf(400, "InvalidArgument", "Invalid grant header %s", gh.name)
				}
				if len(list) == maxGrants {
					return "", false, errTooManyGrants
				}
				e, err := s.grantee(strings.TrimSpace(kind), strings.Trim(strings.TrimSpace(value), `"`))
				if err != nil {
					return "", false, err
				}
				e.p = gh.p
				list = append(list, e)
			}
		}
	}
	switch {
	case hasACL:
		if len(canned) != 1 || !slices.Contains(strings.Fields(cannedACLsSupported), canned[0]) {
			return "", false, errInvalidCannedACL
		}
		return canned[0], true, nil
	case hasGrants:
		acl, err := s.keep(list, false)
		return acl, err == nil, err
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

// parseACL parses an AccessControlPolicy document into the ACL it is, as kept. A
// grantee's xsi:type says which of its fields names it (without a type, the one field it
// has); a grantee without that field, or a permission S3 does not have, is malformed.
func parseACL(data []byte, s aclScope) (string, error) {
	var doc accessControlPolicy
	if err := xml.Unmarshal(data, &doc); err != nil {
		return "", errMalformedACL
	}
	if doc.Owner != nil && doc.Owner.ID != "" && doc.Owner.ID != ownerOf(s.owner).ID {
		return "", errACLOwnerChange
	}
	if len(doc.Grants) > maxGrants {
		return "", errTooManyGrants
	}
	list := make([]aclEntry, 0, len(doc.Grants))
	for _, g := range doc.Grants {
		p, ok := permNames[g.Permission]
		if !ok || g.Grantee == nil {
			return "", errMalformedACL
		}
		kind, value := g.Grantee.Type, ""
		if kind == "" {
			switch {
			case g.Grantee.URI != "":
				kind = "Group"
			case g.Grantee.EmailAddress != "":
				kind = "AmazonCustomerByEmail"
			default:
				kind = "CanonicalUser"
			}
		}
		switch kind {
		case "CanonicalUser":
			value = g.Grantee.ID
		case "Group":
			value = g.Grantee.URI
		case "AmazonCustomerByEmail":
			value = g.Grantee.EmailAddress
		}
		if value == "" && (kind == "CanonicalUser" || kind == "Group" || kind == "AmazonCustomerByEmail") {
			return "", errMalformedACL
		}
		e, err := s.grantee(kind, strings.TrimSpace(value))
		if err != nil {
			return "", err
		}
		e.p = p
		list = append(list, e)
	}
	return s.keep(list, true)
}

// requestACL returns the ACL of Put*Acl, as kept: from its headers or its document.
func requestACL(r *http.Request, rq *request, s aclScope) (string, error) {
	canned, ok, err := headerACL(r.Header, s)
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
	return parseACL(data, s)
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
	canned, ok, err := headerACL(hd, h.aclScope(writer, b.Owner))
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
// ACL the bucket or version has (the owner's FULL_CONTROL and that ACL's), or its
// explicit grants exactly as given.
func (h *Handler) getACL(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	owner, acl := b.Owner, b.Config[aclKind]
	if rq.key != "" {
		o, err := h.aclVersion(w, r, rq)
		if err != nil {
			return err
		}
		owner, acl = objectOwner(&b, o), o.ACL
	}
	if ownership(&b) == ownEnforced {
		acl = "" // ACLs disabled: the bucket's owner has full control, nobody else anything
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
	if !strings.HasPrefix(acl, explicitPrefix) {
		user(owner, "FULL_CONTROL") // an explicit list has the owner's grants it was given
	}
	switch acl {
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
	for _, e := range decodeGrants(acl) {
		if e.user != "" {
			user(e.user, permName(e.p))
		} else {
			group(e.group, permName(e.p))
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
	canned, err := requestACL(r, rq, h.aclScope(b.Owner, b.Owner))
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
	canned, err := requestACL(r, rq, h.aclScope(owner, b.Owner))
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
	canned, ok, err := headerACL(hd, h.aclScope(rq.who.owner(), rq.who.owner()))
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
