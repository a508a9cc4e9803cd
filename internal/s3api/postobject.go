package s3api

import "net/http"

// Browser POST uploads are being built (issue 15); until then the route answers as before.

func (h *Handler) postObject(w http.ResponseWriter, r *http.Request, rq *request) error {
	return errMethodNotAllowed
}
