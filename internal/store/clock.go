package store

// Observe advances the store's clock (a node shares it with its gateway) past v: a
// version this node committed that its coordinator took late, once the body was complete
// (replica.Write.Final), so that the node's later writes are newer than what it holds.
func (s *Store) Observe(v uint64) { s.clock.Observe(v) }
