package s3api

import "net/http"

func (h *Handler) getObjectAttributes(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errNotImplemented
}
