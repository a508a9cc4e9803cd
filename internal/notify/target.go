package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cairnfs/cairn/internal/errors"
)

// Target is where events go. Send must return nil only once the target acknowledged
// every message (a Redis list holds them, a webhook answered 2xx); msgs are the event
// messages of one target in outbox order, and Send keeps that order. Send is called by
// one goroutine at a time; it must honour ctx's deadline.
type Target interface {
	Send(ctx context.Context, msgs [][]byte) error
	Close() error
}

// EntryTarget is a Target that takes the outbox entries themselves rather than their S3
// event messages (a replication link: it reads each change's record and body and ships
// them to the remote cluster). The Deliverer calls SendEntries instead of Send; the same
// rules hold (nil only once every entry is acknowledged; order kept).
type EntryTarget interface {
	Target
	SendEntries(ctx context.Context, es []*Entry) error
}

// TargetSpec is an operator's target as the cluster map holds it (secrets already opened).
type TargetSpec struct {
	Name string
	// Webhook is the URL events are POSTed to ("" for a Redis target).
	Webhook string
	// Redis is the address (HOST:PORT) of a Redis server; List the list events are
	// pushed to (RPUSH, acknowledged); Channel a channel they are published to
	// (PUBLISH: best effort, Redis keeps nothing for a subscriber that is away).
	Redis, List, Channel string
	// Secret is the Redis password, or the key of a webhook's X-Cairn-Signature
	// (HMAC-SHA256 of the body); empty for none.
	Secret string
	// Timeout bounds one delivery (default 5s).
	Timeout time.Duration
}

// Open returns the target of spec.
func Open(spec TargetSpec) (Target, error) {
	if spec.Timeout <= 0 {
		spec.Timeout = 5 * time.Second
	}
	switch {
	case spec.Webhook != "" && spec.Redis == "":
		return &webhook{url: spec.Webhook, secret: []byte(spec.Secret), hc: &http.Client{Timeout: spec.Timeout}}, nil
	case spec.Redis != "" && spec.Webhook == "" && (spec.List != "" || spec.Channel != ""):
		c := redis.NewClient(&redis.Options{
			Addr: spec.Redis, Password: spec.Secret,
			DialTimeout: spec.Timeout, ReadTimeout: spec.Timeout, WriteTimeout: spec.Timeout,
			MaxRetries: -1, // the Deliverer retries, with backoff
			PoolSize:   2,
		})
		return &redisTarget{c: c, list: spec.List, channel: spec.Channel, timeout: spec.Timeout}, nil
	}
	return nil, errors.Errorf(errors.Op("notify.Open"), errors.Invalid, "target %s: a webhook URL, or a Redis address with a list or a channel", spec.Name)
}

type webhook struct {
	url    string
	secret []byte
	hc     *http.Client
}

func (w *webhook) Send(ctx context.Context, msgs [][]byte) error {
	for _, m := range msgs {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(m))
		if err != nil {
			return errors.E(errors.Invalid, err)
		}
		req.Header.Set("Content-Type", "application/json")
		if len(w.secret) > 0 {
			mac := hmac.New(sha256.New, w.secret)
			mac.Write(m)
			req.Header.Set("X-Cairn-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		}
		resp, err := w.hc.Do(req)
		if err != nil {
			return errors.E(errors.Transient, err)
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return errors.Errorf("", errors.Transient, "webhook answered %s", resp.Status)
		}
	}
	return nil
}

func (w *webhook) Close() error { w.hc.CloseIdleConnections(); return nil }

type redisTarget struct {
	c             *redis.Client
	list, channel string
	timeout       time.Duration
}

func (r *redisTarget) Send(ctx context.Context, msgs [][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if r.list != "" {
		vals := make([]any, len(msgs))
		for i, m := range msgs {
			vals[i] = m
		}
		// One RPUSH of the whole batch: Redis applies it atomically, in order.
		if err := r.c.RPush(ctx, r.list, vals...).Err(); err != nil {
			return errors.E(errors.Transient, fmt.Errorf("redis RPUSH %s: %w", r.list, err))
		}
	}
	if r.channel != "" {
		pipe := r.c.Pipeline()
		for _, m := range msgs {
			pipe.Publish(ctx, r.channel, m)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return errors.E(errors.Transient, fmt.Errorf("redis PUBLISH %s: %w", r.channel, err))
		}
	}
	return nil
}

func (r *redisTarget) Close() error { return r.c.Close() }
