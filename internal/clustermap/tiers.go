package clustermap

import (
	"net/url"
	"regexp"

	"github.com/cairnfs/cairn/internal/errors"
)

// Tier is an archive tier (docs/design/tiering.md): where the objects of a device class
// past its high water mark are to be moved. It is either one of the cluster's own storage
// classes (Kind TierClass: the class's nodes, of a colder device class, hold the objects)
// or a bucket of an external S3 endpoint (Kind TierS3: another cairn, or any S3 service).
type Tier struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // TierS3 or TierClass
	// Class is a TierClass tier's storage class.
	Class string `json:"class,omitempty"`
	// Endpoint (an http or https URL without a path), Bucket and Region address a TierS3
	// tier's bucket; AccessKey and Secret are the credentials its requests are signed
	// with, Secret sealed by the secret store (purpose secrets.TierKey, name the tier's
	// name): the map never holds it in the clear.
	Endpoint  string `json:"endpoint,omitempty"`
	Bucket    string `json:"bucket,omitempty"`
	Region    string `json:"region,omitempty"`
	AccessKey string `json:"access_key,omitempty"`
	Secret    string `json:"secret,omitempty"`
	// Recall is how a GET of an object in the tier is answered: RecallTransparent or
	// RecallRestore ("": the kind's default, see RecallMode).
	Recall  string `json:"recall,omitempty"`
	Created int64  `json:"created"` // unix nanoseconds
}

// The tier kinds and recall modes.
const (
	TierS3    = "s3"
	TierClass = "class"
	// RecallTransparent: a GET streams the object from the tier (the default of a
	// TierClass tier).
	RecallTransparent = "transparent"
	// RecallRestore: a GET answers InvalidObjectState until a RestoreObject has brought
	// the object back, as S3 Glacier does (the default of a TierS3 tier).
	RecallRestore = "restore"
)

// RecallMode returns the tier's recall mode, its kind's default if unset.
func (t Tier) RecallMode() string {
	if t.Recall != "" {
		return t.Recall
	}
	if t.Kind == TierClass {
		return RecallTransparent
	}
	return RecallRestore
}

// WaterMarks are a device class's high and low water marks, in percent of the capacity of
// its storage nodes (Node.Capacity): past High, the class's nodes move objects to Tier
// until they are under Low. Paused stops the moving without forgetting the marks.
type WaterMarks struct {
	DeviceClass string `json:"device_class"`
	High        int    `json:"high"`
	Low         int    `json:"low"`
	Tier        string `json:"tier"`
	Paused      bool   `json:"paused,omitempty"`
}

// TierBucket holds the archived copies of every class tier (TierClass): the copy of an
// archived version is the object "<tier>/<key in the tier>" of TierBucket, stored in the
// tier's class, so the class's nodes hold its shards and the cluster heals, scrubs and
// collects them like any object's; and the temporary copies RestoreObject makes of
// versions archived in restore-mode tiers (object.RestoredKey, in STANDARD). Its name is
// not a valid S3 bucket name, so no S3 request can reach it. OpPutTier creates it once
// the map's Level is TierBucketLevel or more (a decision on the map's state alone: every
// manager makes it the same); a class tier added below that level has no bucket and
// takes no migrations (remove it and add it again), and without it a RestoreObject
// brings the object back for good instead.
const TierBucket = "_tiers"

// TierBucketLevel is the feature level from which class tiers take migrations.
const TierBucketLevel = 9

// MaxTiers bounds the tiers of a map.
const MaxTiers = 64

var tierName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// The tier commands:
//
//   - OpPutTier (Tier): adds a tier. Exist if the name is taken (a tier is removed and
//     added again to change it); Invalid for a name outside [a-z0-9][a-z0-9_.-]{0,62}, an
//     unknown kind or recall mode, a TierS3 tier without an http(s) endpoint URL without
//     path, query or credentials, a bucket, an access key or a sealed secret, a TierClass
//     tier naming a class the map lacks, STANDARD or a class without a device class, or a
//     map holding MaxTiers tiers already. A tier added at map Level TierBucketLevel or
//     later also creates TierBucket if the map lacks it. (That the endpoint answers is checked by the
//     admin API before it proposes the command; the state machine cannot do I/O.)
//   - OpRemoveTier (Name): removes a tier. NotExist if absent; Precondition while a
//     device class's water marks name it.
//   - OpSetWaterMarks (Marks): sets a device class's water marks; a Marks with High 0
//     removes them. Invalid unless 0 < Low < High <= 100 or for a device class no node
//     of the map has; NotExist for an unknown tier; Invalid for a TierClass tier whose
//     class is on the marked device class itself.
const (
	OpPutTier       = "put_tier"
	OpRemoveTier    = "remove_tier"
	OpSetWaterMarks = "set_water_marks"
)

// secretSealed mirrors secrets.IsSealed (clustermap does not import secrets).
func secretSealed(s string) bool { return len(s) > 3 && s[:3] == "v1." }

func validateTier(nm *Map, t *Tier) error {
	switch {
	case t == nil:
		return errors.E(opFSM, errors.Invalid, "put_tier: missing tier")
	case !tierName.MatchString(t.Name):
		return errors.Errorf(opFSM, errors.Invalid, "tier name %q: 1 to 63 lower-case letters, digits, '_', '.' or '-', starting with a letter or digit", t.Name)
	case t.Recall != "" && t.Recall != RecallTransparent && t.Recall != RecallRestore:
		return errors.Errorf(opFSM, errors.Invalid, "tier %s: recall %q is neither %s nor %s", t.Name, t.Recall, RecallTransparent, RecallRestore)
	}
	switch t.Kind {
	case TierS3:
		u, err := url.Parse(t.Endpoint)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil:
			return errors.Errorf(opFSM, errors.Invalid, "tier %s: endpoint %q is not an http:// or https:// URL without path, query or credentials", t.Name, t.Endpoint)
		case t.Bucket == "":
			return errors.Errorf(opFSM, errors.Invalid, "tier %s: no bucket", t.Name)
		case t.AccessKey == "" || !secretSealed(t.Secret):
			return errors.Errorf(opFSM, errors.Invalid, "tier %s: an access key and a sealed secret are needed", t.Name)
		case t.Class != "":
			return errors.Errorf(opFSM, errors.Invalid, "tier %s: an s3 tier has no class", t.Name)
		}
	case TierClass:
		c, ok := nm.Classes[t.Class]
		switch {
		case !ok:
			return errors.Errorf(opFSM, errors.Invalid, "tier %s: no storage class %q", t.Name, t.Class)
		case t.Class == StandardClass || c.DeviceClass == "":
			return errors.Errorf(opFSM, errors.Invalid, "tier %s: class %s is not restricted to a device class (create one with --device-class)", t.Name, t.Class)
		case t.Endpoint != "" || t.Bucket != "" || t.AccessKey != "" || t.Secret != "":
			return errors.Errorf(opFSM, errors.Invalid, "tier %s: a class tier has no endpoint or credentials", t.Name)
		}
	default:
		return errors.Errorf(opFSM, errors.Invalid, "tier %s: kind %q is neither %s nor %s", t.Name, t.Kind, TierS3, TierClass)
	}
	return nil
}

func applyTierCommand(nm *Map, c Command) error {
	switch c.Op {
	case OpPutTier:
		if err := validateTier(nm, c.Tier); err != nil {
			return err
		}
		if _, ok := nm.Tiers[c.Tier.Name]; ok {
			return errors.Errorf(opFSM, errors.Exist, "tier %s exists (remove it first to change it)", c.Tier.Name)
		}
		if len(nm.Tiers) >= MaxTiers {
			return errors.Errorf(opFSM, errors.Invalid, "the cluster has %d tiers, the most it can have", MaxTiers)
		}
		if nm.Tiers == nil {
			nm.Tiers = map[string]Tier{}
		}
		nm.Tiers[c.Tier.Name] = *c.Tier
		if nm.Level >= TierBucketLevel {
			// The archived copies of a class tier are objects of TierBucket, in the class;
			// so are the temporary copies RestoreObject makes (object.RestoredKey).
			if _, ok := nm.Buckets[TierBucket]; !ok {
				if nm.Buckets == nil {
					nm.Buckets = map[string]Bucket{}
				}
				nm.Buckets[TierBucket] = Bucket{Name: TierBucket, Created: c.Tier.Created}
			}
		}
	case OpRemoveTier:
		if _, ok := nm.Tiers[c.Name]; !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no tier %q (see cairn admin tier list)", c.Name)
		}
		for _, w := range nm.WaterMarks {
			if w.Tier == c.Name {
				return errors.Errorf(opFSM, errors.Precondition, "tier %s is the tier of device class %s's water marks: change or clear them first", c.Name, w.DeviceClass)
			}
		}
		delete(nm.Tiers, c.Name)
		if len(nm.Tiers) == 0 {
			nm.Tiers = nil
		}
	case OpSetWaterMarks:
		w := c.Marks
		if w == nil || w.DeviceClass == "" {
			return errors.E(opFSM, errors.Invalid, "set_water_marks: missing device class")
		}
		if w.High == 0 {
			if _, ok := nm.WaterMarks[w.DeviceClass]; !ok {
				return errors.Errorf(opFSM, errors.NotExist, "device class %s has no water marks", w.DeviceClass)
			}
			delete(nm.WaterMarks, w.DeviceClass)
			if len(nm.WaterMarks) == 0 {
				nm.WaterMarks = nil
			}
			break
		}
		if w.Low <= 0 || w.High > 100 || w.Low >= w.High {
			return errors.Errorf(opFSM, errors.Invalid, "water marks of %s: low %d %% and high %d %% must satisfy 0 < low < high <= 100", w.DeviceClass, w.Low, w.High)
		}
		found := false
		for _, n := range nm.Nodes {
			found = found || n.DeviceClass == w.DeviceClass
		}
		if !found {
			return errors.Errorf(opFSM, errors.Invalid, "no node of the cluster has device class %q", w.DeviceClass)
		}
		t, ok := nm.Tiers[w.Tier]
		if !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no tier %q (see cairn admin tier list)", w.Tier)
		}
		if t.Kind == TierClass && nm.Classes[t.Class].DeviceClass == w.DeviceClass {
			return errors.Errorf(opFSM, errors.Invalid, "tier %s keeps its objects on device class %s itself", t.Name, w.DeviceClass)
		}
		if nm.WaterMarks == nil {
			nm.WaterMarks = map[string]WaterMarks{}
		}
		nm.WaterMarks[w.DeviceClass] = *w
	}
	return nil
}
