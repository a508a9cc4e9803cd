package lifecycle

import (
	"strings"
	"time"
)

// Version is what evaluation needs of one version of a key (a record of the key: an
// object or a delete marker).
type Version struct {
	HLC          uint64
	ModTime      time.Time
	Size         int64
	Tags         [][2]string
	DeleteMarker bool
	// Archived: the version is in an archive tier already (no Transition is due on it).
	Archived bool
}

// Kind is the kind of an action. The names are the metric labels and the admin view's.
type Kind string

const (
	// ExpireCurrent expires the current version: a delete marker in a versioned bucket,
	// a delete otherwise.
	ExpireCurrent Kind = "expire_current"
	// ExpireNoncurrent removes a noncurrent version for good.
	ExpireNoncurrent Kind = "expire_noncurrent"
	// RemoveMarker removes a delete marker that is its key's only version.
	RemoveMarker Kind = "remove_marker"
	// AbortUpload aborts an incomplete multipart upload.
	AbortUpload Kind = "abort_upload"
	// TransitionCurrent moves the current version to the archive tier Action.Tier.
	TransitionCurrent Kind = "transition"
	// TransitionNoncurrent moves a noncurrent version to the archive tier Action.Tier.
	TransitionNoncurrent Kind = "transition_noncurrent"
)

// Action is an action due on one version.
type Action struct {
	Kind Kind
	HLC  uint64 // the version acted on
	Rule string // the ID of the rule that asks for it
	Tier string // a Transition's tier
}

// maxDays is the largest number of days dueAfter adds: about 270 years, below the
// 106751 days a time.Duration holds. More days than that are due in the year 9999.
const maxDays = 100000

// never is when an action more than maxDays away is due.
var never = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// dueAfter is S3's rounding: days after t, rounded up to the next midnight UTC.
func dueAfter(t time.Time, days int) time.Time {
	if days > maxDays {
		// Days*24h would overflow a Duration and wrap to the past: due at once.
		return never
	}
	d := t.UTC().Add(time.Duration(days) * 24 * time.Hour)
	if m := d.Truncate(24 * time.Hour); !m.Equal(d) {
		return m.Add(24 * time.Hour)
	}
	return d
}

// matches reports whether the rule's filter takes an object with key, size and tags.
func (rl *Rule) matches(key string, size int64, tags [][2]string) bool {
	if !rl.prefixOK(key) {
		return false
	}
	f := rl.Filter
	if rl.Prefix != nil || f == nil {
		return true // a rule-level prefix is the whole filter
	}
	if f.Tag != nil && !hasTag(tags, *f.Tag) {
		return false
	}
	if !sizeOK(size, f.SizeGreater, f.SizeLess) {
		return false
	}
	if a := f.And; a != nil {
		for _, t := range a.Tags {
			if !hasTag(tags, t) {
				return false
			}
		}
		if !sizeOK(size, a.SizeGreater, a.SizeLess) {
			return false
		}
	}
	return true
}

// prefixOK reports whether key can match the rule at all (its prefixes), for uploads
// and for skipping keys cheaply.
func (rl *Rule) prefixOK(key string) bool {
	if rl.Prefix != nil {
		return strings.HasPrefix(key, *rl.Prefix)
	}
	f := rl.Filter
	if f == nil {
		return true
	}
	if f.Prefix != nil && !strings.HasPrefix(key, *f.Prefix) {
		return false
	}
	if f.And != nil && f.And.Prefix != nil && !strings.HasPrefix(key, *f.And.Prefix) {
		return false
	}
	return true
}

func hasTag(tags [][2]string, t Tag) bool {
	for _, kv := range tags {
		if kv[0] == t.Key {
			return kv[1] == t.Value
		}
	}
	return false
}

func sizeOK(size int64, gt, lt *int64) bool {
	return (gt == nil || size > *gt) && (lt == nil || size < *lt)
}

// Evaluate returns the actions due at now on a key's versions, given newest first (the
// first is the current one). Rules may overlap, as current S3 allows: every enabled
// rule that matches a version is considered, and a version gets one action, from the
// first rule (in document order) under which it is due; an expiry before a Transition
// (of the current version) or a NoncurrentVersionTransition (of a noncurrent one), and
// neither is due on an archived version or a delete marker. ExpireCurrent is never due on a
// delete marker; RemoveMarker only on a current delete marker with no other version (by
// ExpiredObjectDeleteMarker, or by Days once the marker is that old).
func (c *Config) Evaluate(key string, versions []Version, now time.Time) []Action {
	if len(versions) == 0 {
		return nil
	}
	var out []Action
	cur := versions[0]
	for i := range c.Rules {
		rl := &c.Rules[i]
		if rl.Status != "Enabled" || !rl.prefixOK(key) {
			continue
		}
		e := rl.Expiration
		if e == nil {
			continue
		}
		if cur.DeleteMarker {
			// A delete marker that is the key's only version goes with ExpiredObjectDeleteMarker
			// at once, and with Days once it is as old as the rule's objects (S3: "When you
			// specify Days, Amazon S3 automatically performs ExpiredObjectDeleteMarker cleanup
			// when the delete markers are old enough").
			lone := len(versions) == 1 && rl.matches(key, 0, nil)
			eodm := e.ExpiredObjectDeleteMarker != nil && *e.ExpiredObjectDeleteMarker
			if lone && (eodm || e.Days != nil && !now.Before(dueAfter(cur.ModTime, *e.Days))) {
				out = append(out, Action{Kind: RemoveMarker, HLC: cur.HLC, Rule: rl.ID})
				break
			}
			continue
		}
		if due, ok := e.due(cur.ModTime); ok && !now.Before(due) && rl.matches(key, cur.Size, cur.Tags) {
			out = append(out, Action{Kind: ExpireCurrent, HLC: cur.HLC, Rule: rl.ID})
			break
		}
	}
	// A Transition of the current version, unless it expires now (why move what goes?) or
	// is archived already: the first rule under which one is due.
	if len(out) == 0 && !cur.DeleteMarker && !cur.Archived {
		for i := range c.Rules {
			rl := &c.Rules[i]
			if rl.Status != "Enabled" || len(rl.Transitions) == 0 || !rl.prefixOK(key) {
				continue
			}
			t := &rl.Transitions[0]
			if !now.Before(t.due(cur.ModTime)) && rl.matches(key, cur.Size, cur.Tags) {
				out = append(out, Action{Kind: TransitionCurrent, HLC: cur.HLC, Rule: rl.ID, Tier: t.Tier()})
				break
			}
		}
	}
	// Noncurrent versions: version i became noncurrent when version i-1 was written.
	for i := 1; i < len(versions); i++ {
		if a, ok := c.noncurrent(key, i, versions, now); ok {
			out = append(out, a)
		}
	}
	return out
}

// noncurrent returns the action due on versions[i], a noncurrent version: its
// expiration by the first rule under which one is due, else (a version that is neither
// a delete marker nor archived already) its NoncurrentVersionTransition by the first
// rule under which one is due. Permanent deletion comes before transition, as in S3.
func (c *Config) noncurrent(key string, i int, versions []Version, now time.Time) (Action, bool) {
	v := versions[i]
	since := versions[i-1].ModTime
	kept := func(newer *int) bool { return newer != nil && i-1 < *newer } // one of the newest noncurrent versions a rule keeps
	for j := range c.Rules {
		rl := &c.Rules[j]
		nc := rl.NoncurrentVersionExpiration
		if rl.Status != "Enabled" || nc == nil || !rl.prefixOK(key) || kept(nc.NewerNoncurrentVersions) {
			continue
		}
		if now.Before(dueAfter(since, *nc.NoncurrentDays)) || !rl.matches(key, v.Size, v.Tags) {
			continue
		}
		return Action{Kind: ExpireNoncurrent, HLC: v.HLC, Rule: rl.ID}, true
	}
	if v.DeleteMarker || v.Archived {
		return Action{}, false
	}
	for j := range c.Rules {
		rl := &c.Rules[j]
		if rl.Status != "Enabled" || len(rl.NoncurrentTransitions) == 0 || !rl.prefixOK(key) {
			continue
		}
		t := &rl.NoncurrentTransitions[0]
		if kept(t.NewerNoncurrentVersions) || now.Before(dueAfter(since, *t.NoncurrentDays)) || !rl.matches(key, v.Size, v.Tags) {
			continue
		}
		return Action{Kind: TransitionNoncurrent, HLC: v.HLC, Rule: rl.ID, Tier: t.Tier()}, true
	}
	return Action{}, false
}

// due returns when a current version written at mod expires by e (false: e does not
// expire current versions).
func (e *Expiration) due(mod time.Time) (time.Time, bool) {
	switch {
	case e.Days != nil:
		return dueAfter(mod, *e.Days), true
	case e.Date != nil:
		d := e.date
		if d.IsZero() {
			// A Config built without Parse, or the Date 0001-01-01: parsed here, never
			// written back (configurations are shared by concurrent requests).
			d, _ = parseDate(*e.Date)
		}
		return d, true
	}
	return time.Time{}, false
}

// due returns when a current version written at mod is due to move by t.
func (t *Transition) due(mod time.Time) time.Time {
	if t.Days != nil {
		return dueAfter(mod, *t.Days)
	}
	d := t.date
	if d.IsZero() && t.Date != nil {
		d, _ = parseDate(*t.Date) // a Config built without Parse: parsed here, never written back
	}
	return d
}

// Expiry returns when the current version v of key expires by the first enabled rule
// whose Expiration (Days or Date) matches it, and that rule's ID: the x-amz-expiration
// header. False if no rule expires it.
func (c *Config) Expiry(key string, v Version) (time.Time, string, bool) {
	var best time.Time
	id := ""
	for i := range c.Rules {
		rl := &c.Rules[i]
		if rl.Status != "Enabled" || rl.Expiration == nil || !rl.matches(key, v.Size, v.Tags) {
			continue
		}
		if due, ok := rl.Expiration.due(v.ModTime); ok && (id == "" || due.Before(best)) {
			best, id = due, rl.ID
		}
	}
	return best, id, id != ""
}

// AbortDue returns the ID of the first enabled rule under which an upload of key
// initiated at the given time is to be aborted at now ("" if none).
func (c *Config) AbortDue(key string, initiated, now time.Time) string {
	for i := range c.Rules {
		rl := &c.Rules[i]
		a := rl.AbortIncompleteMultipartUpload
		if rl.Status != "Enabled" || a == nil || !rl.prefixOK(key) {
			continue
		}
		if !now.Before(dueAfter(initiated, *a.DaysAfterInitiation)) {
			return rl.ID
		}
	}
	return ""
}

// Uploads reports whether any enabled rule aborts uploads (so a runner can skip the
// scan of pending uploads).
func (c *Config) Uploads() bool {
	for i := range c.Rules {
		if c.Rules[i].Status == "Enabled" && c.Rules[i].AbortIncompleteMultipartUpload != nil {
			return true
		}
	}
	return false
}
