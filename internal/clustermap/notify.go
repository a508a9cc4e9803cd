package clustermap

import (
	"net/url"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
)

// NotifyTarget is an operator's bucket-notification target (cairn admin notify target
// add): a webhook, or a Redis server with a list (acknowledged) and/or a pub/sub channel
// (best effort). Bucket notification configurations name it by ARN (package notify).
type NotifyTarget struct {
	Name    string `json:"name"`
	Webhook string `json:"webhook,omitempty"` // URL (http or https)
	Redis   string `json:"redis,omitempty"`   // HOST:PORT
	List    string `json:"list,omitempty"`
	Channel string `json:"channel,omitempty"`
	// Secret is the Redis password or the webhook's signing key, sealed by the secret
	// store (package secrets, purpose "notify-target", named by the target); empty for
	// none. The map never holds it in the clear.
	Secret string `json:"secret,omitempty"`
}

// The notification target commands (feature level 7).
//
//   - OpPutNotifyTarget (Target): creates or replaces a target. Invalid if the name is
//     not 1-64 letters, digits, '-', '_' or '.', if it is neither a webhook (an http or
//     https URL) nor a Redis address with a list or a channel, or if its secret is not
//     sealed.
//   - OpRemoveNotifyTarget (Name): removes a target; NotExist if absent. Events still
//     queued for it wait on the nodes that hold them, as for a target that is down.
const (
	OpPutNotifyTarget    = "put_notify_target"
	OpRemoveNotifyTarget = "remove_notify_target"
)

// ValidTargetName reports whether name can name a notification target.
func ValidTargetName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func validateTarget(t *NotifyTarget) error {
	switch {
	case t == nil:
		return errors.E(opFSM, errors.Invalid, "put_notify_target: missing target")
	case !ValidTargetName(t.Name):
		return errors.Errorf(opFSM, errors.Invalid, "notification target name %q: 1-64 letters, digits, '-', '_' or '.'", t.Name)
	case t.Secret != "" && !strings.HasPrefix(t.Secret, "v1."):
		return errors.Errorf(opFSM, errors.Invalid, "notification target %s: its secret is not sealed", t.Name)
	}
	switch {
	case t.Webhook != "" && t.Redis == "" && t.List == "" && t.Channel == "":
		u, err := url.Parse(t.Webhook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.Errorf(opFSM, errors.Invalid, "notification target %s: webhook %q is not an http or https URL", t.Name, t.Webhook)
		}
	case t.Webhook == "" && t.Redis != "" && (t.List != "" || t.Channel != ""):
		if !strings.Contains(t.Redis, ":") {
			return errors.Errorf(opFSM, errors.Invalid, "notification target %s: redis address %q is not HOST:PORT", t.Name, t.Redis)
		}
	default:
		return errors.Errorf(opFSM, errors.Invalid, "notification target %s: give a webhook URL, or a Redis address with a list and/or a channel", t.Name)
	}
	return nil
}

func applyNotifyCommand(nm *Map, c Command) error {
	switch c.Op {
	case OpPutNotifyTarget:
		if err := validateTarget(c.Target); err != nil {
			return err
		}
		ts := make(map[string]NotifyTarget, len(nm.Targets)+1)
		for k, v := range nm.Targets {
			ts[k] = v
		}
		ts[c.Target.Name] = *c.Target
		nm.Targets = ts
	case OpRemoveNotifyTarget:
		if _, ok := nm.Targets[c.Name]; !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no notification target %q", c.Name)
		}
		ts := make(map[string]NotifyTarget, len(nm.Targets))
		for k, v := range nm.Targets {
			if k != c.Name {
				ts[k] = v
			}
		}
		if len(ts) == 0 {
			ts = nil
		}
		nm.Targets = ts
	}
	return nil
}
