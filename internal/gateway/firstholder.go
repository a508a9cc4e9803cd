package gateway

// FirstHolder reports whether this node is the first live holder of bucket/key in its
// current map: the holder that grants the key's leases and sends its bucket
// notifications (docs/design/notifications.md). False when no holder is live.
func (g *Gateway) FirstHolder(bucket, key string) bool {
	t, err := g.leaseTarget(g.cfg.Maps.Current(), bucket, key)
	return err == nil && t.Local
}

// FirstHolderOf returns the first live holder of bucket/key in this node's current map:
// its node id and internode address, and whether it is this node.
func (g *Gateway) FirstHolderOf(bucket, key string) (id, addr string, local bool, err error) {
	t, err := g.leaseTarget(g.cfg.Maps.Current(), bucket, key)
	if err != nil {
		return "", "", false, err
	}
	return t.ID, t.Addr, t.Local, nil
}
