package replica

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/object"
	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/wire"
)

// HandlerConfig configures a Handler.
type HandlerConfig struct {
	Local  *Local
	Secret *rpc.Secret
	// OnCorrupt, if set, is told when a read finds this node's copy of a version damaged
	// (it fetches a good copy from another replica).
	OnCorrupt func(bucket, key string, version uint64)
	// Leases, if set, is this node's lease table, served on wire.PathLease (lease.go).
	Leases *Leases
	// ReadLeases, if set, is this node's table of read leases: a version check that asks
	// for one (wire.QReadLease) is granted it from here.
	ReadLeases *ReadLeases
	// Revoked, if set, serves wire.PathRevoke: this node's gateway drops its read lease
	// on the key (ServeRevoke).
	Revoked func(bucket, key string)
	Logger  *slog.Logger
}

// Handler serves a node's Local replica to the other nodes: the server side of Remote.
// Every request must carry a valid internode signature (checked by the caller's
// middleware) and a capability for its bucket, key and operation (checked here). It
// knows nothing of S3 or users.
type Handler struct {
	cfg   HandlerConfig
	local *Local
	mux   *http.ServeMux
	log   *slog.Logger
}

// NewHandler returns a Handler.
func NewHandler(cfg HandlerConfig) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Handler{cfg: cfg, local: cfg.Local, mux: http.NewServeMux(), log: cfg.Logger.With("component", "replica")}
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
	h.mux.HandleFunc(wire.PathMeta, h.meta)
	h.mux.HandleFunc(wire.PathVersions, h.versions)
	h.mux.HandleFunc(wire.PathRange, h.rangeWrite)
	h.mux.HandleFunc(wire.PathJournalSync, h.journalSync)
	h.mux.HandleFunc(wire.PathRangeBatch, h.rangeBatch)
	h.mux.HandleFunc(wire.PathObjectBatch, h.objectBatch)
	if cfg.Leases != nil {
		h.mux.HandleFunc(wire.PathLease, h.lease)
	}
	if cfg.Revoked != nil {
		h.mux.HandleFunc(wire.PathRevoke, ServeRevoke(cfg.Revoked))
	}
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// capFor checks the request's capability for op on the bucket and key in its query.
func (h *Handler) capFor(r *http.Request, op string) (bucket, key string, err error) {
	return h.capForQuery(r, r.URL.Query(), op)
}

// capForQuery is capFor with the request's query already parsed.
func (h *Handler) capForQuery(r *http.Request, q url.Values, op string) (bucket, key string, err error) {
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

func uintParam(r *http.Request, name string) uint64 { return uintQuery(r.URL.Query(), name) }

func intParam(r *http.Request, name string) int64 { return intQuery(r.URL.Query(), name) }

func uintQuery(q url.Values, name string) uint64 {
	v, _ := strconv.ParseUint(q.Get(name), 10, 64)
	return v
}

func intQuery(q url.Values, name string) int64 {
	v, _ := strconv.ParseInt(q.Get(name), 10, 64)
	return v
}

func writeMeta(w http.ResponseWriter, o *object.Object) {
	w.Header().Set(wire.HdrMeta, wire.EncodeMeta(o))
	w.Header().Set(wire.HdrVersion, strconv.FormatUint(o.HLC, 10))
}

// finalOf returns the coordinator's final metadata: sent as a trailer once a streamed
// body is complete, or as a header with a body it had in memory. A missing or malformed
// one means the coordinator gave up on the write (nil): nothing is committed.
func finalOf(r *http.Request) func() *object.Object {
	return func() *object.Object {
		f := r.Trailer.Get(wire.HdrFinal)
		if f == "" {
			f = r.Header.Get(wire.HdrFinal)
		}
		if f == "" {
			return nil
		}
		fin, err := wire.DecodeMeta(f)
		if err != nil {
			return nil
		}
		return fin
	}
}

func (h *Handler) object(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPut:
		q := r.URL.Query() // parsed once: every replica write of every PUT comes here
		bucket, key, err := h.capForQuery(r, q, rpc.CapWrite)
		var meta *object.Object
		if err == nil {
			meta, err = wire.DecodeMeta(r.Header.Get(wire.HdrMeta))
		}
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		meta.ModTime = intQuery(q, wire.QModTime)
		o, err := h.local.Put(r.Context(), Write{Bucket: bucket, Key: key, Meta: meta, Body: r.Body, Size: r.ContentLength,
			Version: uintQuery(q, wire.QVersion), Final: finalOf(r), Repair: q.Get(wire.QRepair) == "1", IfAbsent: q.Get(wire.QIfAbsent) == "1"})
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		writeMeta(w, o)
	case http.MethodHead:
		q := r.URL.Query()
		bucket, key, err := h.capForQuery(r, q, rpc.CapRead)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		// A read lease is recorded before the record is read (ReadLeases.Grant).
		lease := h.cfg.ReadLeases.Grant(r.Header.Get(rpc.HdrNode), bucket, key, parseLease(q.Get(wire.QReadLease)))
		o, err := h.local.Stat(r.Context(), bucket, key)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		if lease > 0 {
			w.Header().Set(wire.HdrReadLease, grantHeader(lease))
		}
		writeMeta(w, o)
	case http.MethodGet:
		bucket, key, err := h.capFor(r, rpc.CapRead)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		rd, err := h.local.Open(r.Context(), bucket, key, OpenOptions{Version: uintParam(r, wire.QVersion)})
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		defer rd.Close()
		o := rd.Info()
		off, n := intParam(r, wire.QOffset), intParam(r, wire.QLength)
		size := o.BodySize() // zero for a striped object: its record alone
		if r.URL.Query().Get(wire.QLength) == "" {
			n = size - off
		}
		if off < 0 || n < 0 || off > size || n > size-off {
			wire.WriteError(w, errors.E(errors.Invalid, "range out of bounds"))
			return
		}
		writeMeta(w, o)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		if _, err := rd.WriteRange(r.Context(), w, off, n); err != nil {
			// Headers are sent: the short body tells the gateway; no corrupt byte was sent.
			h.log.Error("replica read failed", "bucket", bucket, "key", key, "err", err)
			if errors.Is(errors.Corrupt, err) && h.cfg.OnCorrupt != nil {
				h.cfg.OnCorrupt(bucket, key, o.HLC)
			}
			panic(http.ErrAbortHandler)
		}
	case http.MethodDelete:
		bucket, key, err := h.capFor(r, rpc.CapDelete)
		if err != nil {
			wire.WriteError(w, err)
			return
		}
		d := parseDeleteFlags(r.URL.Query().Get(wire.QFlags))
		d.HLC, d.ModTime = uintParam(r, wire.QVersion), intParam(r, wire.QModTime)
		d.Origin = r.URL.Query().Get(wire.QOrigin)
		o, err := h.local.Delete(r.Context(), bucket, key, d)
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
		var meta *object.Object
		if err == nil {
			meta, err = wire.DecodeMeta(r.Header.Get(wire.HdrMeta))
		}
		if err == nil {
			err = h.local.CreateUpload(r.Context(), bucket, key, id, meta)
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
	n := int(intParam(r, wire.QPart))
	if n <= 0 {
		wire.WriteError(w, errors.E(errors.Invalid, "part number must be positive"))
		return
	}
	p, err := h.local.Put(r.Context(), Write{Bucket: bucket, Key: key, UploadID: r.URL.Query().Get(wire.QUploadID), Part: n,
		Body: r.Body, Size: r.ContentLength, Final: finalOf(r)})
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
	p, err := h.local.Parts(r.Context(), bucket, key, r.URL.Query().Get(wire.QUploadID), int(intParam(r, wire.QAfter)), int(intParam(r, wire.QMax)))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, wire.PartsAnswerOf(p))
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
	if err := h.local.EndUpload(r.Context(), we.UploadEnd()); err != nil {
		wire.WriteError(w, err)
	}
}

// meta applies a conditional in-place metadata change and answers the record held
// afterwards.
func (h *Handler) meta(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	bucket, key, err := h.capFor(r, rpc.CapWrite)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	var req wire.MetaUpdate
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || req.HLC == 0 || req.MetaHLC == 0 {
		wire.WriteError(w, errors.E(errors.Invalid, "malformed metadata update"))
		return
	}
	o, err := h.local.UpdateMeta(r.Context(), req.Update(bucket, key))
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeMeta(w, o)
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
	o, err := h.local.Complete(r.Context(), Completion{Bucket: bucket, Key: key, UploadID: r.URL.Query().Get(wire.QUploadID),
		Parts: wire.CompleteParts(req.Parts), MinPart: req.MinPart, Version: uintParam(r, wire.QVersion), ModTime: intParam(r, wire.QModTime),
		Final: req.Final.Object()})
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
	res, err := h.local.List(r.Context(), bucket, object.ListOptions{Prefix: q.Get(wire.QPrefix), Delimiter: q.Get(wire.QDelimiter),
		After: q.Get(wire.QAfter), Max: int(intParam(r, wire.QMax))})
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, wire.ListAnswerOf(res))
}

func (h *Handler) versions(w http.ResponseWriter, r *http.Request) {
	bucket, _, err := h.capFor(r, rpc.CapList)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	q := r.URL.Query()
	res, err := h.local.ListVersions(r.Context(), bucket, object.VersionListOptions{Prefix: q.Get(wire.QPrefix), Delimiter: q.Get(wire.QDelimiter),
		KeyMarker: q.Get(wire.QKeyMarker), VersionMarker: uintParam(r, wire.QVersion), AfterNull: q.Get(wire.QNullMkr) == "1",
		Max: int(intParam(r, wire.QMax))})
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, wire.VersionsAnswerOf(res))
}

// deleteFlags encodes the flags of a record without a body for the wire (wire.QFlags).
func deleteFlags(d object.Object) string {
	var f []byte
	if d.Versioned {
		f = append(f, 'v')
	}
	if d.DeleteMarker {
		f = append(f, 'm')
	}
	if d.Purged {
		f = append(f, 'p')
	}
	if d.Bypass {
		f = append(f, 'b')
	}
	return string(f)
}

// parseDeleteFlags decodes wire.QFlags.
func parseDeleteFlags(f string) object.Object {
	return object.Object{Versioned: strings.Contains(f, "v"), DeleteMarker: strings.Contains(f, "m"), Purged: strings.Contains(f, "p"), Bypass: strings.Contains(f, "b")}
}

func (h *Handler) uploads(w http.ResponseWriter, r *http.Request) {
	bucket, _, err := h.capFor(r, rpc.CapList)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	q := r.URL.Query()
	res, err := h.local.ListUploads(r.Context(), bucket, object.UploadListOptions{Prefix: q.Get(wire.QPrefix), Delimiter: q.Get(wire.QDelimiter),
		KeyMarker: q.Get(wire.QKeyMarker), UploadMarker: q.Get(wire.QUploadMkr), Max: int(intParam(r, wire.QMax))})
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, wire.UploadsAnswerOf(res))
}

// readScanRequest decodes a ScanRequest.
func readScanRequest(r *http.Request) (*wire.ScanRequest, error) {
	var req wire.ScanRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&req); err != nil || req.Partitions <= 0 || req.Partitions > 1<<20 {
		return nil, errors.E(errors.Invalid, "malformed scan request")
	}
	return &req, nil
}

// digest answers a digest of each requested partition's versions (see Digests): replicas
// compare digests first and scan only the partitions that differ.
func (h *Handler) digest(w http.ResponseWriter, r *http.Request) {
	if _, _, err := h.capFor(r, rpc.CapList); err != nil {
		wire.WriteError(w, err)
		return
	}
	req, err := readScanRequest(r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	d, err := h.local.Digests(r.Context(), req.Partitions, req.Parts)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	writeJSON(w, wire.DigestAnswer{Digests: d})
}

// scan streams, as JSON lines, the version of every object record (tombstones included)
// in the requested partitions: replicas compare them to find what they lack.
func (h *Handler) scan(w http.ResponseWriter, r *http.Request) {
	if _, _, err := h.capFor(r, rpc.CapList); err != nil {
		wire.WriteError(w, err)
		return
	}
	req, err := readScanRequest(r)
	if err != nil {
		wire.WriteError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	err = h.local.Scan(r.Context(), req.Partitions, req.Parts, func(e object.VersionEntry) {
		enc.Encode(wire.ScanEntryOf(e))
	})
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
