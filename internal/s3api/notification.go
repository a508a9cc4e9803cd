package s3api

import (
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"

	"github.com/cairnfs/cairn/internal/notify"
)

// Bucket notifications: a bucket's NotificationConfiguration, kept as its "notification"
// configuration in the map. The S3 layer only validates and stores it; every storage node
// matches its changes against it and queues the events in its outbox (package notify,
// docs/design/notifications.md).

const (
	notificationKind = "notification"
	maxNotifyDoc     = 64 << 10
)

func (h *Handler) putBucketNotification(w http.ResponseWriter, r *http.Request, rq *request) error {
	data, err := readBody(r, rq, maxNotifyDoc)
	if err != nil {
		return err
	}
	exists := h.cfg.NotifyTarget
	if exists == nil {
		exists = func(string) bool { return false }
	}
	if _, err := h.store.HeadBucket(r.Context(), rq.bucket); err != nil {
		return err
	}
	c, doc, err := notify.Parse(data, exists)
	var ce *notify.ConfigError
	if errors.As(err, &ce) {
		status := http.StatusBadRequest
		if ce.Code == "NotImplemented" {
			status = http.StatusNotImplemented
		}
		return errf(status, ce.Code, "%s", ce.Msg)
	}
	if err != nil {
		return err
	}
	if c.Empty() {
		doc = nil // no rules: notifications off
	}
	if err := h.store.SetBucketConfig(r.Context(), rq.bucket, notificationKind, doc); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

func (h *Handler) getBucketNotification(w http.ResponseWriter, r *http.Request, rq *request) error {
	b, err := h.store.HeadBucket(r.Context(), rq.bucket)
	if err != nil {
		return err
	}
	doc := b.Config[notificationKind]
	if doc == "" {
		empty, _ := xml.Marshal(&notify.Configuration{Xmlns: xmlns})
		doc = string(empty)
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(doc)))
	w.WriteHeader(http.StatusOK)
	w.Write([]byte(xml.Header))
	w.Write([]byte(doc))
	return nil
}
