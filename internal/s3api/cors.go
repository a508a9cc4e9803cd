package s3api

import "net/http"

// CORS is being built (issue 15); until then the routes answer as the refusal table does.

func (h *Handler) putBucketCors(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}

func (h *Handler) getBucketCors(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}

func (h *Handler) deleteBucketCors(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}

func (h *Handler) preflight(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}
