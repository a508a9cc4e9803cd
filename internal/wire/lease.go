package wire

// Leases on keys serialize the conditional writes of a key (If-Match, If-None-Match) at
// the key's first live holder in the current map epoch. The bucket and key are in the
// query (QBucket, QKey), and both requests carry a write capability for them.

// PathLease: POST a LeaseRequest asks the holder for a lease on the key; the answer is a
// LeaseAnswer in HdrLease (a header: answers' X-Cairn-* headers are signed, their bodies
// are not) and, with a lease, the holder's record of the key in HdrMeta (absent: it has
// none). DELETE a LeaseRequest with its Token gives the lease back.
const PathLease = "/internal/v1/lease"

// HdrLease carries a LeaseAnswer (JSON).
const HdrLease = "X-Cairn-Lease"

// LeaseRequest asks for a lease, or gives one back.
type LeaseRequest struct {
	// Epoch is the coordinator's map epoch: a holder whose current map has another epoch
	// refuses (LeaseAnswer.Epoch).
	Epoch uint64 `json:"epoch"`
	// Seen is the coordinator's clock: the version granted is later.
	Seen uint64 `json:"seen,omitempty"`
	// Token names the lease given back (DELETE).
	Token string `json:"token,omitempty"`
	// Used is the version the write took under the lease (DELETE), if it took one.
	Used uint64 `json:"used,omitempty"`
}

// LeaseAnswer grants a lease, or says why not.
type LeaseAnswer struct {
	// Token names the lease granted (empty: refused).
	Token string `json:"token,omitempty"`
	// Version is the version the write takes: later than every version granted with an
	// earlier lease on this holder and than Seen.
	Version uint64 `json:"v,omitempty"`
	// TTLMillis is how long the lease lasts from the moment it was granted, unless given
	// back.
	TTLMillis int64 `json:"ttl_ms,omitempty"`
	// Busy: refused because another write held the lease for as long as the holder waits.
	Busy bool `json:"busy,omitempty"`
	// Epoch, on a refusal, is the holder's current map epoch (it differs from the request's).
	Epoch uint64 `json:"epoch,omitempty"`
}
