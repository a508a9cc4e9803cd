package s3api

import (
	"context"
	"encoding/xml"
	"net/http"
)

// restoreRequest is RestoreObject's document; cairn restores archived objects only (no
// SELECT restores): Days is required, and is the restored copy's lifetime.
type restoreRequest struct {
	XMLName              xml.Name `xml:"RestoreRequest"`
	Days                 *int
	Type                 string
	GlacierJobParameters struct {
		Tier string
	}
}

// restorer is the optional capability of a Backend that archives objects in tiers
// (gateway.Gateway.RestoreObject).
type restorer interface {
	// RestoreObject starts restoring bucket/key's archived current version for days;
	// false if it is not archived, or restored already (the restore is renewed).
	RestoreObject(ctx context.Context, bucket, key string, days int) (bool, error)
}

// restoreObject serves RestoreObject: 202 Accepted when a restore starts, 200 OK when the
// object is restored already, 409 RestoreAlreadyInProgress while one runs.
func (h *Handler) restoreObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	var doc restoreRequest
	if err := readXML(r, rq, 64<<10, &doc); err != nil {
		return err
	}
	if doc.Type != "" {
		return errf(501, "NotImplemented", "SELECT restores are not implemented")
	}
	if doc.Days == nil || *doc.Days < 1 {
		return errMalformedXML
	}
	rs, ok := h.store.(restorer)
	if !ok {
		return &apiError{"InvalidObjectState", "The operation is not valid for the object's storage class", 403}
	}
	started, err := rs.RestoreObject(r.Context(), rq.bucket, rq.key, *doc.Days)
	if err != nil {
		return err
	}
	if started {
		w.WriteHeader(http.StatusAccepted)
	} else {
		w.WriteHeader(http.StatusOK)
	}
	return nil
}
