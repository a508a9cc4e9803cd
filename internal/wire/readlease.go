package wire

// Read leases let a gateway serve a cached object with no freshness check while they
// last (docs/design/object-cache-leases.md). Cluster feature level 11.
//
// A gateway asks for one with its version check: a HEAD of PathObject whose query has
// QReadLease, the lease's length in milliseconds. A holder that grants it answers
// HdrReadLease, the milliseconds granted (at most those asked), counted by the holder
// from when it received the request; no header means no lease. A holder that takes any
// change of a key a lease is live on first revokes it: a signed POST of PathRevoke to the
// leaseholding gateway, the bucket and key in the query (QBucket, QKey), answered 204
// once the gateway has dropped the lease. A revoke that is not answered so is waited out
// (the lease expires) before the change is acknowledged.
const (
	QReadLease   = "rlease"
	HdrReadLease = "X-Cairn-Read-Lease"
	PathRevoke   = "/internal/v1/revoke"
)
