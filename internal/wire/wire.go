// Package wire is cairn's internode protocol: the paths a storage node serves to the other
// nodes, the query keys and headers of each request, the JSON messages with their explicit
// field names, the object metadata codec, the error codes, and the protocol version. Both
// sides (replica.Handler serving, replica.Remote asking) use these names, so the protocol is
// written down once; renaming a Go field does not change it.
//
// Transport and authentication (signatures, capabilities, Raft framing) are package rpc's.
package wire

import (
	"fmt"
	"strconv"

	"github.com/cairnfs/cairn/internal/errors"
)

// Version is the internode protocol version this build speaks. Every signed request and
// answer carries it in HdrProto. A node accepts peers of its own version and of the one
// before (so a cluster can be upgraded one node at a time); a peer that sends no version
// is version 0, which predates versioning and is refused.
//
// Version 1: the first versioned protocol (explicit JSON field names, stable error codes).
const Version = 1

// MinVersion is the oldest peer version this build accepts.
const MinVersion = max(1, Version-1)

// HdrProto carries the sender's protocol version on requests and answers.
const HdrProto = "X-Cairn-Proto"

// ProtoValue is HdrProto's value for this build.
var ProtoValue = strconv.Itoa(Version)

// CheckVersion checks a peer's HdrProto value: an error naming both versions if this node
// cannot talk to it.
func CheckVersion(value string) error {
	v := 0
	if value != "" {
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return errors.E(errors.Op("wire.CheckVersion"), errors.Invalid, fmt.Sprintf("malformed internode protocol version %q; this node speaks version %d", value, Version))
		}
		v = n
	}
	if v >= MinVersion && v <= Version {
		return nil
	}
	what := fmt.Sprintf("version %d", v)
	if v == 0 {
		what = "version 0 (it sent no version: a cairn from before versioning)"
	}
	accepts := fmt.Sprintf("%d", Version)
	if MinVersion < Version {
		accepts = fmt.Sprintf("%d to %d", MinVersion, Version)
	}
	return errors.E(errors.Op("wire.CheckVersion"), errors.Invalid,
		fmt.Sprintf("peer speaks internode protocol %s; this node speaks version %d and accepts %s: upgrade the older node", what, Version, accepts))
}

// Headers of the object requests and answers (besides rpc's authentication headers).
const (
	HdrMeta    = "X-Cairn-Meta"    // object metadata (EncodeMeta) in requests and answers
	HdrFinal   = "X-Cairn-Final"   // the coordinator's final metadata: a trailer once a streamed body is complete, or a header with a small body
	HdrVersion = "X-Cairn-Version" // HLC of the stored record, in answers
	HdrError   = "X-Cairn-Error"   // error code and sentinel name of a failed request
)

// Paths served by a storage node to the other nodes.
const (
	// PathObject: PUT a replica (HdrMeta, body, HdrFinal), GET a replica or a range of it,
	// HEAD its record, DELETE it (writes a tombstone at QVersion).
	PathObject = "/internal/v1/o"
	// PathUpload: POST creates a multipart upload with the given id (HdrMeta); DELETE aborts it.
	PathUpload = "/internal/v1/upload"
	// PathPart: PUT a part of an upload (body, HdrFinal).
	PathPart = "/internal/v1/part"
	// PathParts: GET an upload's record and a page of its parts (PartsAnswer).
	PathParts = "/internal/v1/parts"
	// PathComplete: POST completes an upload (CompleteRequest) at QVersion.
	PathComplete = "/internal/v1/complete"
	// PathList: GET a page of a bucket's records, tombstones included (ListAnswer).
	PathList = "/internal/v1/list"
	// PathUploads: GET a page of a bucket's pending uploads (UploadsAnswer).
	PathUploads = "/internal/v1/uploads"
	// PathUploadEnd: POST an upload's end record (UploadEnd): the replica drops the upload
	// and its parts and keeps the record.
	PathUploadEnd = "/internal/v1/uploadend"
	// PathScan: POST a ScanRequest; the answer streams ScanEntry lines (JSON), ending with
	// an entry with no bucket.
	PathScan = "/internal/v1/scan"
	// PathDigest: POST a ScanRequest; the answer is a DigestAnswer.
	PathDigest = "/internal/v1/digest"
	// PathMeta: POST a MetaUpdate: the replica changes the metadata (tags) of its record
	// in place if that record is the version named; the answer carries the record it
	// holds afterwards (HdrMeta), whichever it is.
	PathMeta = "/internal/v1/meta"
	// PathVersions: GET a page of a bucket's versions, tombstones and purge records
	// included (VersionsAnswer).
	PathVersions = "/internal/v1/versions"
	// PathRange: POST an in-place write of a mutable object (a volume's data object):
	// QSize, QOffset, QLength, QPrev, QNext and QZero in the query, the bytes as the body
	// (none for zeroes); the answer carries the record afterwards (HdrMeta).
	PathRange = "/internal/v1/range"
	// PathJournalSync: POST: the holder syncs its volume journal (every range write it
	// took with QUnsynced before is durable when it answers; feature level 9).
	PathJournalSync = "/internal/v1/journal/sync"
	// PathRangeBatch: POST several in-place writes of mutable objects of one bucket
	// (QBucket) in one body (DecodeRangeBatch); the answer is a RangeBatchAnswer, one
	// result per write, its body signed (HdrBodySum). Feature level 11.
	PathRangeBatch = "/internal/v1/range/batch"
	// PathObjectBatch: POST several replica writes of small object versions of one
	// bucket (QBucket) in one body of QLength bytes (DecodeObjectBatch); the answer is a
	// RangeBatchAnswer, one result per write, its body signed (HdrBodySum). Feature
	// level 12 (put batches).
	PathObjectBatch = "/internal/v1/object/batch"
)

// Paths of the cluster protocol, served on the node address by every node (package
// server); their messages are clustermap's types.
const (
	PathMap   = "/internal/v1/map"   // GET: the node's cluster map
	PathJoin  = "/internal/v1/join"  // POST a clustermap.Node: add it to the cluster (leader)
	PathApply = "/internal/v1/apply" // POST a clustermap.Command: apply it to the map (leader)
	PathStats = "/internal/v1/stats" // GET: the node's figures (disk, hints, sync, recovery)
	// PathMapInfo answers the epoch and digest of a node's map (the ring monitor).
	PathMapInfo = "/internal/v1/mapinfo"
	// PathScrub answers a node's deep-scrub status; POST ?action=start|pause acts on it.
	PathScrub = "/internal/v1/scrub"
	// PathNotify answers a node's bucket-notification figures (outbox, deliveries).
	PathNotify = "/internal/v1/notify"
	// PathNotifyHeld answers whether a node wrote the outbox entries of a change
	// (?bucket=&key=&version=) and sent them: {"held": bool, "sent": bool}.
	PathNotifyHeld = "/internal/v1/notify/held"
	// PathMDC starts the paths of the multi-data-center replication link endpoint: on
	// the S3 listener (no bucket name has a '_'), signed with a link's secret (rpc.Secret
	// of it, the sender its cluster id) rather than the cluster's, the link named by the
	// X-Cairn-Link header. Hello (GET) answers the cluster's id; Apply (POST) takes a
	// batch of changes (package mdc's frames); Digests (POST a query) answers the
	// digests or records of the linked buckets; Push (POST records) makes the receiver
	// send them back in a batch of its own (an investigation's pull).
	PathMDC        = "/_cairn/mdc/"
	PathMDCHello   = "/_cairn/mdc/hello"
	PathMDCApply   = "/_cairn/mdc/apply"
	PathMDCDigests = "/_cairn/mdc/digests"
	PathMDCPush    = "/_cairn/mdc/push"
	// PathRecovery answers a node's recovery progress; POST ?rate=N sets its copy rate.
	PathRecovery = "/internal/v1/recovery"
	// PathReplace answers a node's progress re-placing objects by their bucket's policy.
	PathReplace = "/internal/v1/replace"
	// PathLifecycle answers a node's lifecycle runner state per bucket; POST starts a
	// round of every bucket now.
	PathLifecycle = "/internal/v1/lifecycle"
	// PathEnrol takes a certificate request (EnrolRequest) and answers the node's
	// certificate and the cluster CA (EnrolAnswer, its body bound to the signed answer by
	// HdrBodySum). The one path a connection without a client certificate may reach.
	PathEnrol = "/internal/v1/enrol"
	// PathCAKey answers the cluster CA's private key (PEM, HdrBodySum) to a voting manager
	// that asks over mutual TLS.
	PathCAKey = "/internal/v1/cakey"
	// PathInternodeTLS answers the cluster's internode TLS state (InternodeStatus); POST
	// ?action=enable turns it on (the Raft leader).
	PathInternodeTLS = "/internal/v1/internode-tls"
)

// ALPN protocols of the node address under TLS: a connection is Raft or HTTP by the
// protocol it negotiates (one that offers none is HTTP).
const (
	ALPNRaft = "cairn-raft/1"
	ALPNHTTP = "http/1.1"
)

// HdrBodySum is the hex SHA-256 of an answer's body: in the signed headers, it binds the
// body of an answer that must not be changed in transit to the request (enrolment
// answers, the CA key).
const HdrBodySum = "X-Cairn-Body-Sum"

// EnrolRequest asks for a node certificate: Node is the node's id, CSR its PKCS #10
// certificate request (DER; base64 in JSON) for that id. Forwarded is set by a node that
// passes the request on to a manager holding the CA key (which must sign or refuse).
type EnrolRequest struct {
	Node      string `json:"node"`
	CSR       []byte `json:"csr"`
	Forwarded bool   `json:"forwarded,omitempty"`
}

// EnrolAnswer is a node's certificate (PEM), the cluster CA's certificate (PEM) it chains
// to, and whether the cluster refuses plain internode connections.
type EnrolAnswer struct {
	Cert     string `json:"cert"`
	CA       string `json:"ca"`
	Required bool   `json:"required"`
}

// InternodeStatus is a cluster's internode TLS as one node sees it: the CA's fingerprint
// (hex SHA-256 of its DER; empty: no CA, internode traffic is plain), whether plain
// connections are refused, and per node what its certificate is.
type InternodeStatus struct {
	CA       string          `json:"ca,omitempty"`
	Required bool            `json:"required"`
	Nodes    []InternodeNode `json:"nodes,omitempty"`
	// Missing names the nodes without a certificate of the CA (enable waits for them).
	Missing []string `json:"missing,omitempty"`
}

// InternodeNode is one node's internode certificate: the fingerprint of the CA it chains
// to (empty: none), its expiry (RFC 3339), whether the node holds the CA key and whether
// it refuses plain connections.
type InternodeNode struct {
	ID       string `json:"id"`
	CA       string `json:"ca,omitempty"`
	NotAfter string `json:"not_after,omitempty"`
	CAKey    bool   `json:"ca_key,omitempty"`
	Required bool   `json:"required,omitempty"` // the node refuses plain connections
	Err      string `json:"error,omitempty"`
}

// Query keys.
const (
	QBucket    = "b"        // bucket
	QKey       = "k"        // object key
	QVersion   = "v"        // HLC of the version written, deleted or expected
	QModTime   = "mod"      // modification time, Unix nanoseconds
	QRepair    = "repair"   // "1": replace a record of the same version (PutOptions.Repair)
	QIfAbsent  = "ifnone"   // "1": store only if the key holds nothing
	QOffset    = "off"      // first byte of a ranged GET
	QLength    = "n"        // length of a ranged GET (absent: to the end)
	QUploadID  = "id"       // multipart upload id
	QPart      = "n"        // part number (PathPart)
	QAfter     = "after"    // list after this key, or parts after this number
	QMax       = "max"      // page size
	QPrefix    = "prefix"   // key prefix of a listing
	QDelimiter = "delim"    // delimiter of a listing
	QKeyMarker = "km"       // uploads listing: key marker
	QUploadMkr = "um"       // uploads listing: upload id marker
	QNullMkr   = "nm"       // versions listing: "1": resume after the key marker's null version
	QFlags     = "flags"    // DELETE: the record's flags: "v" versioned, "m" delete marker, "p" purge
	QOrigin    = "origin"   // DELETE: the linked cluster a replicated deletion came from (object.Object.Origin)
	QSize      = "size"     // range write: the mutable object's size
	QPrev      = "prev"     // range write: the order the object must be at
	QNext      = "next"     // range write: the order it is left at
	QZero      = "zero"     // range write: "1": zeroes (a hole), no body
	QUnsynced  = "unsynced" // range write: "1": answer once it is in the volume journal, unsynced (level 9)
)
