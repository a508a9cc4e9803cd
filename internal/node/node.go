// Package node serves a storage node's local store to the other nodes of the cluster: the
// replica side of object and multipart writes (with versions chosen by the coordinating
// gateway), reads, version stats including tombstones, and raw listings for the gateway to
// merge. Every request must carry a valid internode signature (checked by the caller's
// middleware) and a capability for its bucket, key and operation (checked here). It knows
// nothing of S3 or users.
package node

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/placement"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/store"
	"github.com/cairnfs/cairn/internal/wire"
)

// Config configures a Handler.
type Config struct {
	Store  *store.Store
	Secret *rpc.Secret
	// EnsureBucket creates the bucket locally if the cluster map has it (replicas learn of
	// buckets from the map, not from a create call), or returns a NotExist error.
	EnsureBucket func(name string) error
	// OnCorrupt, if set, is told when a read finds this node's copy of a version damaged
	// (it fetches a good copy from another replica).
	OnCorrupt func(bucket, key string, version uint64)
	Logger    *slog.Logger
}

// Handler is the replica side of the internode protocol.
type Handler struct {
	cfg Config
	mux *http.ServeMux
	log *slog.Logger
}

// New returns a Handler.
func New(cfg Config) *Handler {
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), log: cfg.Logger.With("component", "node")}
	h.mux.HandleFunc(wire.PathObject, h.object)
	h.mux.HandleFunc(wire.PathUpload, h.upload)
	h.mux.HandleFunc(wire.PathPart, h.part)
	h.mux.HandleFunc(wire.PathParts, h.parts)
	h.mux.HandleFunc(wire.PathComplete, h.complete)
	h.mux.HandleFunc(wire.PathList, h.list)
	h.mux.HandleFunc(wire.PathUploads, h.uploads)
	h.mux.HandleFunc(wire.PathUploadEnd, h.uploadEnd)
	h.mux.HandleFunc(wire.PathScan, h.scan)
	h.mux.HandleFunc(wire.PathDigest, h.digest)
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// capFor checks the request's capability for op on the bucket and key in its query.
func (h *Handler) capFor(r *http.Request, op string) (bucket, key string, err error) {
	q := r.URL.Query()
	bucket, key = q.Get(wire.QBucket), q.Get(wire.QKey)
	if op == rpc.CapList {
		key = q.Get(wire.QPrefix)
	}
	if err := h.cfg.Secret.CheckCap(r.Header.Get(rpc.HdrCap), op, bucket, key, time.Now()); err != nil {
		h.log.Warn("refused an internode request", "path", r.URL.Path, "from", r.Header.Get(rpc.HdrNode), "remote", r.RemoteAddr, "err", err)
		return "", "", err
	}
	return bucket, key, nil
}

func uintParam(r *http.Request, name string) uint64 {
	v, _ := strconv.ParseUint(r.URL.Query().Get(name), 10, 64)
	return v
}

func intParam(r *http.Request, name string) int64 {
	v, _ := strconv.ParseInt(r.URL.Query().Get(name), 10, 64)
	return v
}

func writeMeta(w http.ResponseWriter, o *object.Object) {
	w.Header().Set(wire.HdrMeta, wire.EncodeMeta(o))
	w.Header().Set(wire.HdrVersion, strconv.FormatUint(o.HLC, 10))
}

// finalFrom returns a Finish function that copies the gateway's final metadata (ETag,
// checksums) into the record: sent as a trailer once a streamed body is complete, or as a
// header with a body the gateway had in memory. A missing trailer means the gateway gave
// up on the write: nothing is committed.
func finalFrom(r *http.Request) func(o *object.Object) error {
	return func(o *object.Object) error {
		f := r.Trailer.Get(wire.HdrFinal)
		if f == "" {
			f = r.Header.Get(wire.HdrFinal) // small bodies: known before they were sent
		}
		if f == "" {
			return errors.E(errors.Invalid, "the coordinator did not confirm the body (no final metadata)")
		}
		fin, err := wire.DecodeMeta(f)
		if err != nil {
			return err
		}
		if fin.Striped && !o.Striped {
			// A part of an erasure-coded upload: its bytes are shards elsewhere.
			if o.Size != 0 {
				return errors.Errorf("", errors.Invalid, "received %d bytes for a striped part", o.Size)
			}
			o.Striped, o.Stripe, o.Size = true, fin.Stripe, fin.Size
		}
		if fin.Size != o.Size {
			return errors.Errorf("", errors.Invalid, "received %d bytes, the coordinator sent %d", o.Size, fin.Size)
		}
		o.ETag, o.ChecksumAlgo, o.Checksum, o.ChecksumType = fin.ETag, fin.ChecksumAlgo, fin.Checksum, fin.ChecksumType
		return nil
	}
}

func (h *Handler) object(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPut:
		bucket, key, err := h.capFor(r, rpc.CapWrite)
		if err == nil {
			err = h.cfg.EnsureBucket(bucket)
		}
		var meta *object.Object
		if err == nil {
			meta, err = wire.DecodeMeta(r.Header.Get(wire.HdrMeta))
		}
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		meta.ModTime = intParam(r, wire.QModTime)
		o, err := h.cfg.Store.PutObject(r.Context(), bucket, key, meta, r.Body, r.ContentLength,
			object.PutOptions{Version: uintParam(r, wire.QVersion), Finish: finalFrom(r), Repair: r.URL.Query().Get(wire.QRepair) == "1", IfNoneMatch: r.URL.Query().Get(wire.QIfAbsent) == "1"})
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeMeta(w, o)
	case http.MethodHead:
		bucket, key, err := h.capFor(r, rpc.CapRead)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		o, err := h.cfg.Store.StatVersion(bucket, key)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeMeta(w, o)
	case http.MethodGet:
		bucket, key, err := h.capFor(r, rpc.CapRead)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		rd, err := h.cfg.Store.OpenObject(bucket, key)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		defer rd.Close()
		if v := uintParam(r, wire.QVersion); v != 0 && v != rd.Object.HLC {
			wire.WriteError(w, errors.E(errors.Precondition, "the object changed since it was opened"))
			return
		}
		off, n := intParam(r, wire.QOffset), intParam(r, wire.QLength)
		size := rd.Object.BodySize() // zero for a striped object: its record alone
		if r.URL.Query().Get(wire.QLength) == "" {
			n = size - off
		}
		if off < 0 || n < 0 || off > size || n > size-off {
			wire.WriteError(w, errors.E(errors.Invalid, "range out of bounds"))
			return
		}
		writeMeta(w, rd.Object)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		if _, err := rd.WriteRange(r.Context(), w, off, n); err != nil {
			// Headers are sent: the short body tells the gateway; no corrupt byte was sent.
			h.log.Error("replica read failed", "bucket", bucket, "key", key, "err", err)
			if errors.Is(errors.Corrupt, err) && h.cfg.OnCorrupt != nil {
				h.cfg.OnCorrupt(bucket, key, rd.Object.HLC)
			}
			panic(http.ErrAbortHandler)
		}
	case http.MethodDelete:
		bucket, key, err := h.capFor(r, rpc.CapDelete)
		if err == nil {
			err = h.cfg.EnsureBucket(bucket)
		}
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		o, err := h.cfg.Store.DeleteVersion(bucket, key, uintParam(r, wire.QVersion), intParam(r, wire.QModTime))
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeMeta(w, o)
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (h *Handler) upload(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get(wire.QUploadID)
	switch r.Method {
	case http.MethodPost:
		bucket, key, err := h.capFor(r, rpc.CapWrite)
		if err == nil {
			err = h.cfg.EnsureBucket(bucket)
		}
		var meta *object.Object
		if err == nil {
			meta, err = wire.DecodeMeta(r.Header.Get(wire.HdrMeta))
		}
		if err == nil {
			err = h.cfg.Store.CreateUploadID(bucket, key, id, meta)
		}
		if err != nil {
			wire.WriteError(w, err)
		}
	case http.MethodDelete:
		bucket, key, err := h.capFor(r, rpc.CapDelete)
		if err == nil {
			err = h.cfg.Store.AbortUpload(bucket, key, id)
		}
		if err != nil {
			wire.WriteError(w, err)
		}
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

func (h *Handler) part(w http.ResponseWriter, r *http.Request) {
	bucket, key, err := h.capFor(r, rpc.CapWrite)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	p, err := h.cfg.Store.PutPart(r.Context(), bucket, key, r.URL.Query().Get(wire.QUploadID), int(intParam(r, wire.QPart)), r.Body, r.ContentLength, finalFrom(r))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeMeta(w, p)
}

func (h *Handler) parts(w http.ResponseWriter, r *http.Request) {
	bucket, key, err := h.capFor(r, rpc.CapRead)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	id := r.URL.Query().Get(wire.QUploadID)
	if e, err := h.cfg.Store.UploadEnd(bucket, key, id); err == nil {
		writeJSON(w, wire.PartsAnswerOf(&object.PartsPage{End: e}))
		return
	} else if !errors.Is(errors.NotExist, err) {
		wire.WriteError(w, err)
		return
	}
	up, err := h.cfg.Store.Upload(bucket, key, id)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	parts, trunc, err := h.cfg.Store.ListParts(bucket, key, id, int(intParam(r, wire.QAfter)), int(intParam(r, wire.QMax)))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, wire.PartsAnswerOf(&object.PartsPage{Upload: up, Parts: parts, Truncated: trunc}))
}

func (h *Handler) uploadEnd(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	bucket, key, err := h.capFor(r, rpc.CapDelete)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	var we wire.UploadEnd
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&we); err != nil || we.Bucket != bucket || we.Key != key {
		wire.WriteError(w, errors.E(errors.Invalid, "malformed upload end record"))
		return
	}
	if err := h.cfg.EnsureBucket(bucket); err != nil {
		wire.WriteError(w, err)
		return
	}
	if err := h.cfg.Store.EndUpload(we.UploadEnd()); err != nil {
		wire.WriteError(w, err)
	}
}

func (h *Handler) complete(w http.ResponseWriter, r *http.Request) {
	bucket, key, err := h.capFor(r, rpc.CapWrite)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	var req wire.CompleteRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&req); err != nil || req.Final == nil {
		wire.WriteError(w, errors.E(errors.Invalid, "malformed completion"))
		return
	}
	o, err := h.cfg.Store.CompleteUploadVersion(bucket, key, r.URL.Query().Get(wire.QUploadID), wire.CompleteParts(req.Parts), req.MinPart,
		uintParam(r, wire.QVersion), intParam(r, wire.QModTime), func(o *object.Object, _ []*object.Object) error {
			o.ChecksumAlgo, o.Checksum, o.ChecksumType = req.Final.ChecksumAlgo, req.Final.Checksum, req.Final.ChecksumType
			return nil
		})
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeMeta(w, o)
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	bucket, _, err := h.capFor(r, rpc.CapList)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	q := r.URL.Query()
	res, err := h.cfg.Store.List(bucket, object.ListOptions{Prefix: q.Get(wire.QPrefix), Delimiter: q.Get(wire.QDelimiter),
		After: q.Get(wire.QAfter), Max: int(intParam(r, wire.QMax)), Tombstones: true})
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, wire.ListAnswerOf(res))
}

func (h *Handler) uploads(w http.ResponseWriter, r *http.Request) {
	bucket, _, err := h.capFor(r, rpc.CapList)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	q := r.URL.Query()
	res, err := h.cfg.Store.ListUploads(bucket, object.UploadListOptions{Prefix: q.Get(wire.QPrefix), Delimiter: q.Get(wire.QDelimiter),
		KeyMarker: q.Get(wire.QKeyMarker), UploadMarker: q.Get(wire.QUploadMkr), Max: int(intParam(r, wire.QMax))})
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, wire.UploadsAnswerOf(res))
}

// readScanRequest decodes a ScanRequest and returns the partitions it asks for.
func readScanRequest(r *http.Request) (*wire.ScanRequest, []bool, error) {
	var req wire.ScanRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&req); err != nil || req.Partitions <= 0 || req.Partitions > 1<<20 {
		return nil, nil, errors.E(errors.Invalid, "malformed scan request")
	}
	want := make([]bool, req.Partitions)
	for _, p := range req.Parts {
		if p >= 0 && p < req.Partitions {
			want[p] = true
		}
	}
	return &req, want, nil
}

// digest answers a digest of each requested partition's versions (see Digests): replicas
// compare digests first and scan only the partitions that differ.
func (h *Handler) digest(w http.ResponseWriter, r *http.Request) {
	if _, _, err := h.capFor(r, rpc.CapList); err != nil {
		wire.WriteError(w, err)
		return
	}
	req, _, err := readScanRequest(r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	d, err := Digests(h.cfg.Store, req.Partitions, nil)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	out := wire.DigestAnswer{Digests: make([]uint64, len(req.Parts))}
	for i, p := range req.Parts {
		if p >= 0 && p < req.Partitions {
			out.Digests[i] = d[p]
		}
	}
	writeJSON(w, out)
}

// Digests returns a digest of the versions st holds (internal buckets aside) in each of the partitions of a map
// with the given partition count (zero for an empty partition), calling each, if set,
// for every record as well. A digest sums a hash of (bucket, key, version, deleted) over
// the partition's records, so two stores holding the same versions have equal digests
// whatever their order, and one differing record changes it: a one-level hash tree over
// the partition's metadata.
func Digests(st *store.Store, partitions int, each func(p int, e object.VersionEntry)) ([]uint64, error) {
	d := make([]uint64, partitions)
	err := st.Scan(notInternal, func(e object.VersionEntry) error {
		p := placement.Partition(e.Bucket, e.Key, partitions)
		d[p] += entryHash(e)
		if each != nil {
			each(p, e)
		}
		return nil
	})
	return d, err
}

// notInternal keeps the records of S3 buckets: anti-entropy compares those; the
// internal buckets (erasure-code shards) have placement rules of their own.
func notInternal(bucket, _ string) bool { return !store.Internal(bucket) }

// entryHash is FNV-1a over the record's identity and version, finished with a 64-bit
// mixer so that sums of hashes stay well spread.
func entryHash(e object.VersionEntry) uint64 {
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for i := 0; i < len(e.Bucket); i++ {
		h = (h ^ uint64(e.Bucket[i])) * prime
	}
	h = (h ^ 0xff) * prime
	for i := 0; i < len(e.Key); i++ {
		h = (h ^ uint64(e.Key[i])) * prime
	}
	v := e.HLC << 1
	if e.Deleted {
		v |= 1
	}
	h ^= v * 0x9e3779b97f4a7c15
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// scan streams, as JSON lines, the version of every object record (tombstones included)
// in the requested partitions: replicas compare them to find what they lack.
func (h *Handler) scan(w http.ResponseWriter, r *http.Request) {
	if _, _, err := h.capFor(r, rpc.CapList); err != nil {
		wire.WriteError(w, err)
		return
	}
	req, want, err := readScanRequest(r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	err = h.cfg.Store.Scan(func(b, k string) bool { return !store.Internal(b) && want[placement.Partition(b, k, req.Partitions)] },
		func(e object.VersionEntry) error { return enc.Encode(ScanEntryOf(e)) })
	if err != nil {
		// Lines were sent: the missing end marker tells the caller.
		h.log.Error("scan failed", "err", err)
		return
	}
	enc.Encode(wire.ScanEntry{}) // end marker: an entry with no bucket
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// ScanEntryOf returns e's wire form.
func ScanEntryOf(e object.VersionEntry) wire.ScanEntry {
	return wire.ScanEntry{Bucket: e.Bucket, Key: e.Key, HLC: e.HLC, Deleted: e.Deleted, Size: e.Size, Striped: e.Striped}
}
