package server

import (
	"context"
	"crypto/subtle"
	stderrors "errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/errors"
	"github.com/cairnfs/cairn/internal/gateway"
	"github.com/cairnfs/cairn/internal/s3api"
	"github.com/cairnfs/cairn/internal/secrets"
)

// keyring answers the S3 layer's "what is this access key's secret" from the cluster
// map: a key of an enabled user, opened with the secret store (each sealed secret opened
// once and remembered beside the sealed form it came from), or a legacy user's secret in
// the clear. A revoked key or a disabled user's is absent from the map's answer at the
// epoch that made it so: no cache outlives the map.
type keyring struct {
	mgr *clustermap.Manager
	box *secrets.Box
	log *slog.Logger
	// legacyFile is where builds before the secret store kept a generated root key in
	// the clear (DATA/credentials.json): removed with the Raft log that held it.
	legacyFile string

	mu     sync.RWMutex
	opened map[string][2]string // access key -> {sealed, plaintext}
}

func newKeyring(mgr *clustermap.Manager, box *secrets.Box, log *slog.Logger) *keyring {
	return &keyring{mgr: mgr, box: box, log: log, opened: map[string][2]string{}}
}

// Lookup returns the secret of access key id and whether it may sign requests.
func (k *keyring) Lookup(id string) (string, bool) {
	c, ok := k.mgr.Current().Credential(id)
	if !ok {
		return "", false
	}
	if c.Legacy {
		return c.Secret, true
	}
	k.mu.RLock()
	o, hit := k.opened[id]
	k.mu.RUnlock()
	if hit && o[0] == c.Secret {
		return o[1], true
	}
	pt, err := k.box.Open(secrets.S3Key, id, c.Secret)
	if err != nil {
		k.log.Error("an access key's secret does not open: is this node's cluster secret the cluster's?", "key", id, "err", err)
		return "", false
	}
	k.mu.Lock()
	if len(k.opened) > 100_000 { // keys come and go: bound what is remembered
		clear(k.opened)
	}
	k.opened[id] = [2]string{c.Secret, string(pt)}
	k.mu.Unlock()
	return string(pt), true
}

// rootCredentials returns the root user's oldest key in the clear (or the first legacy
// user's): the credentials a node prints at start and writes to its ready file.
func rootCredentials(m *clustermap.Map, box *secrets.Box) Credentials {
	var best *clustermap.Key
	for _, k := range m.Keys {
		if a, ok := m.Accounts[k.Account]; !ok || !a.Root {
			continue
		}
		if best == nil || k.Created < best.Created || (k.Created == best.Created && k.AccessKey < best.AccessKey) {
			best = &k
		}
	}
	if best != nil {
		if pt, err := box.Open(secrets.S3Key, best.AccessKey, best.Secret); err == nil {
			return Credentials{AccessKey: best.AccessKey, SecretKey: string(pt)}
		}
	}
	keys := make([]string, 0, len(m.Users))
	for k := range m.Users {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return Credentials{}
	}
	u := m.Users[keys[0]]
	return Credentials{AccessKey: u.AccessKey, SecretKey: u.SecretKey}
}

// bootstrapAccounts returns the users and keys of a new cluster's map: the root user
// with the bootstrap credentials as its key, sealed.
func bootstrapAccounts(creds Credentials, box *secrets.Box, now time.Time) (map[string]clustermap.Account, map[string]clustermap.Key) {
	return map[string]clustermap.Account{clustermap.RootAccount: {Name: clustermap.RootAccount, Root: true, Created: now.UnixNano()}},
		map[string]clustermap.Key{creds.AccessKey: {AccessKey: creds.AccessKey, Account: clustermap.RootAccount,
			Secret: box.Seal(secrets.S3Key, creds.AccessKey, []byte(creds.SecretKey)), Created: now.UnixNano()}}
}

// registerRootKey makes sure the credentials a node was started with (CAIRN_ACCESS_KEY
// and CAIRN_SECRET_KEY) are accepted by the cluster: a key of the root user. A key that
// exists with another secret is replaced. While a node runs a build without keys, the
// credentials go in as a legacy user, as that build does.
func registerRootKey(ctx context.Context, app *applyer, m *clustermap.Map, box *secrets.Box, creds Credentials) error {
	c, ok := m.Credential(creds.AccessKey)
	if ok {
		same := c.Secret == creds.SecretKey
		if !c.Legacy {
			pt, err := box.Open(secrets.S3Key, creds.AccessKey, c.Secret)
			same = err == nil && string(pt) == creds.SecretKey
		}
		if same {
			return nil
		}
	}
	if _, exists := m.Keys[creds.AccessKey]; exists {
		if _, err := app.Apply(ctx, clustermap.Command{Op: clustermap.OpRevokeKey, Name: creds.AccessKey}); err != nil {
			return err
		}
	}
	now := time.Now().UnixNano()
	var err error
	if _, root := m.Accounts[clustermap.RootAccount]; !root {
		_, err = app.Apply(ctx, clustermap.Command{Op: clustermap.OpAddAccount, Account: &clustermap.Account{Name: clustermap.RootAccount, Root: true, Created: now}})
		if errors.Is(errors.Exist, err) {
			err = nil
		}
	}
	if err == nil {
		_, err = app.Apply(ctx, clustermap.Command{Op: clustermap.OpPutKey, Keys: []clustermap.Key{{AccessKey: creds.AccessKey, Account: clustermap.RootAccount,
			Secret: box.Seal(secrets.S3Key, creds.AccessKey, []byte(creds.SecretKey)), Created: now}}})
	}
	if isUpgrading(err) {
		_, err = app.Apply(ctx, clustermap.Command{Op: clustermap.OpPutUser, User: &clustermap.User{AccessKey: creds.AccessKey, SecretKey: creds.SecretKey}})
	}
	return err
}

// isUpgrading reports whether err is the refusal of a map command that a node's build
// does not know yet.
func isUpgrading(err error) bool {
	return errors.Is(errors.Precondition, err) && stderrors.Is(err, gateway.ErrUpgrading)
}

// sealLegacyUsers, on the Raft leader once every node runs a build that knows keys, moves
// the legacy users (secrets in the clear) to sealed keys of the root user.
func sealLegacyUsers(ctx context.Context, app *applyer, m *clustermap.Map, box *secrets.Box) error {
	if len(m.Users) == 0 {
		return nil
	}
	c := clustermap.Command{Op: clustermap.OpSealUsers}
	if err := app.levels.check(m, app.self, c); err != nil {
		return nil // not every node runs this build yet: later
	}
	ids := make([]string, 0, len(m.Users))
	for id := range m.Users {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	now := time.Now().UnixNano()
	for _, id := range ids {
		c.Keys = append(c.Keys, clustermap.Key{AccessKey: id, Account: clustermap.RootAccount,
			Secret: box.Seal(secrets.S3Key, id, []byte(m.Users[id].SecretKey)), Created: now})
	}
	_, err := app.leaderApply(ctx, c)
	return err
}

// purgeMarker names the file that says this node's Raft log and snapshots hold no
// secret in the clear any more.
const purgeMarker = "secrets-sealed"

// purgePlaintext, once the map holds no legacy user, drops this node's Raft log and older
// snapshots (which hold the secrets in the clear that were sealed since) for a snapshot
// of the map as it is; a marker file in the Raft directory says it was done. Every node
// does it once (in a new cluster, where nothing was in the clear, it costs one snapshot).
func purgePlaintext(ctx context.Context, mgr *clustermap.Manager, raftDir, legacyFile string, log *slog.Logger) error {
	marker := filepath.Join(raftDir, purgeMarker)
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if len(mgr.Current().Users) != 0 || mgr.Current().Epoch == 0 {
		return nil
	}
	if err := mgr.Compact(ctx); err != nil {
		return err
	}
	if legacyFile != "" {
		if err := os.Remove(legacyFile); err == nil {
			log.Warn("removed the root access key kept in the clear by an older build: it is in the cluster map, sealed, and printed at start", "file", legacyFile)
		} else if !os.IsNotExist(err) {
			return err
		}
	}
	log.Info("compacted the Raft log: it holds no access key in the clear")
	return writeFileAtomic(marker, []byte("the Raft log and snapshots before this file hold no S3 secret in the clear\n"), 0o600)
}

// nudgeOp is a map command no build knows: every manager rejects it and leaves the map as
// it is, but it advances the state machine's applied index (see purgeWhenSealed).
const nudgeOp = "nudge"

// purgeWhenSealed runs purgePlaintext once the map holds no legacy user (at once in a
// new cluster, after the leader sealed them in an upgraded one).
func (n *instance) purgeWhenSealed(ctx context.Context) {
	w := n.mgr.Watch(ctx)
	for {
		if m := n.mgr.Current(); m.Epoch > 0 && len(m.Users) == 0 {
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := purgePlaintext(cctx, n.mgr, n.raftDir, n.keys.legacyFile, n.log)
			cancel()
			if err == nil {
				return
			}
			wait := 10 * time.Second
			level := slog.LevelWarn
			if strings.Contains(err.Error(), "cannot take snapshot now") {
				// Raft takes no snapshot while its last configuration change (a member
				// promoted, a node joining) is past the last command the map applied, and
				// nothing may be applied for long in a quiet cluster. Nudge: a command
				// every build rejects ("unknown command") goes through the log and the
				// state machine without changing the map, and the snapshot can follow.
				level, wait = slog.LevelDebug, time.Second
				nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
				n.app.Apply(nctx, clustermap.Command{Op: nudgeOp})
				ncancel()
			}
			n.log.Log(ctx, level, "could not compact the Raft log yet (access keys once in the clear); trying again", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-w:
			if !ok {
				return
			}
		case <-time.After(10 * time.Second):
		}
	}
}

// UserInfo is a user as /admin/v1/users shows it: never a secret.
type UserInfo struct {
	clustermap.Account
	Keys    []KeyInfo `json:"keys"`
	Buckets []string  `json:"buckets"`
}

// KeyInfo is an access key without its secret.
type KeyInfo struct {
	AccessKey string `json:"access_key"`
	Created   int64  `json:"created"`
	// Legacy marks a key kept in the clear by an older build, sealed once every node
	// runs a build with the secret store.
	Legacy bool `json:"legacy,omitempty"`
}

// Users is the answer of /admin/v1/users: every user with its keys and buckets, by name.
func Users(m *clustermap.Map) []UserInfo {
	by := map[string]*UserInfo{}
	get := func(a clustermap.Account) *UserInfo {
		u, ok := by[a.Name]
		if !ok {
			u = &UserInfo{Account: a, Keys: []KeyInfo{}, Buckets: []string{}}
			by[a.Name] = u
		}
		return u
	}
	for _, a := range m.Accounts {
		get(a)
	}
	for _, k := range m.Keys {
		if a, ok := m.Accounts[k.Account]; ok {
			u := get(a)
			u.Keys = append(u.Keys, KeyInfo{AccessKey: k.AccessKey, Created: k.Created})
		}
	}
	for id := range m.Users {
		u := get(clustermap.Account{Name: clustermap.RootAccount, Root: true})
		u.Keys = append(u.Keys, KeyInfo{AccessKey: id, Legacy: true})
	}
	for _, b := range m.Buckets {
		owner := b.Owner
		if owner == "" {
			owner = clustermap.RootAccount
		}
		if u, ok := by[owner]; ok {
			u.Buckets = append(u.Buckets, b.Name)
		}
	}
	out := make([]UserInfo, 0, len(by))
	for _, u := range by {
		sort.Slice(u.Keys, func(i, j int) bool { return u.Keys[i].AccessKey < u.Keys[j].AccessKey })
		sort.Strings(u.Buckets)
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Principal returns the user access key id belongs to, for the S3 layer's checks of
// bucket ownership. A key revoked since its request was verified is nobody's.
func (k *keyring) Principal(id string) s3api.Principal {
	c, ok := k.mgr.Current().Credential(id)
	if !ok {
		return s3api.Principal{User: "\x00revoked"}
	}
	p := s3api.Principal{User: c.Account.Name, Root: c.Account.Root}
	for _, g := range c.Account.Grants {
		p.Grants = append(p.Grants, s3api.Grant{Bucket: g.Bucket, Prefix: g.Prefix, Read: g.Read, Write: g.Write, Owner: g.Owner})
	}
	return p
}

// Users returns the names of the cluster's users, for the S3 layer's ACL grants.
func (k *keyring) Users() []string {
	m := k.mgr.Current()
	names := make([]string, 0, len(m.Accounts))
	for name := range m.Accounts {
		names = append(names, name)
	}
	return names
}

// RootKey reports whether accessKey is a key of the root user whose secret is secretKey
// (compared in constant time): the console's login with a key.
func (k *keyring) RootKey(accessKey, secretKey string) (string, bool) {
	c, ok := k.mgr.Current().Credential(accessKey)
	if !ok || !c.Account.Root {
		return "", false
	}
	secret, ok := k.Lookup(accessKey)
	if !ok || subtle.ConstantTimeCompare([]byte(secret), []byte(secretKey)) != 1 {
		return "", false
	}
	return c.Account.Name, true
}
