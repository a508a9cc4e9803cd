package server

import (
	"sync"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/tier"
)

// tierClients gives the gateway the clients of the map's external tiers, made from each
// tier's entry (its secret opened with the secret store) and kept while the entry is the
// same.
type tierClients struct {
	mgr *clustermap.Manager
	box *secrets.Box
	mu  sync.Mutex
	by  map[string]cachedTier
}

type cachedTier struct {
	t clustermap.Tier
	c *tier.Client
}

func newTierClients(mgr *clustermap.Manager, box *secrets.Box) *tierClients {
	return &tierClients{mgr: mgr, box: box, by: map[string]cachedTier{}}
}

func (tc *tierClients) get(name string) (gateway.TierStore, error) {
	t, ok := tc.mgr.Current().Tiers[name]
	if !ok {
		return nil, errors.Errorf("", errors.NotExist, "no tier %q in the cluster map", name)
	}
	if t.Kind != clustermap.TierS3 {
		return nil, errors.Errorf("", errors.Precondition, "tier %s is a class tier: the gateway stores its copies itself", name)
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if c, ok := tc.by[name]; ok && c.t == t {
		return c.c, nil
	}
	if tc.box == nil {
		return nil, errors.E(errors.Precondition, "this node has no secret store")
	}
	sk, err := tc.box.Open(secrets.TierKey, t.Name, t.Secret)
	if err != nil {
		return nil, err
	}
	c, err := tier.New(tier.Config{Endpoint: t.Endpoint, Bucket: t.Bucket, Region: t.Region, AccessKey: t.AccessKey, SecretKey: string(sk)})
	if err != nil {
		return nil, err
	}
	tc.by[name] = cachedTier{t: t, c: c}
	return c, nil
}
