package s3api

import "net/http"

// Object and bucket tagging are being built (issue 15); until then the routes answer as
// the refusal table does.

func (h *Handler) putObjectTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}

func (h *Handler) getObjectTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}

func (h *Handler) deleteObjectTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}

func (h *Handler) putBucketTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}

func (h *Handler) getBucketTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}

func (h *Handler) deleteBucketTagging(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}
