package clustermap

import (
	"slices"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
)

// Account is an S3 user (the CLI's "user"): it owns the buckets it creates and signs
// requests with its keys.
type Account struct {
	Name    string `json:"name"`
	Created int64  `json:"created"` // unix nanoseconds
	// Disabled users' keys are refused everywhere; the keys stay, for when it is enabled.
	Disabled bool `json:"disabled,omitempty"`
	// Root marks the user made at bootstrap (and the owner of the keys moved from the
	// legacy Users): it may use every bucket, whoever owns it, and cannot be disabled or
	// removed.
	Root bool `json:"root,omitempty"`
	// Grants give the user access to buckets it does not own (sorted by bucket, then
	// prefix; one per pair).
	Grants []Grant `json:"grants,omitempty"`
}

// Grant gives a user access to the objects of a bucket whose keys start with Prefix (all
// of them if it is empty): Read (get, head, list under the prefix), Write (put, copy to,
// multipart uploads, delete, tag), or Owner (everything the bucket's owner may do, bucket
// configuration and deletion included; only with an empty Prefix).
type Grant struct {
	Bucket string `json:"bucket"`
	Prefix string `json:"prefix,omitempty"`
	Read   bool   `json:"read,omitempty"`
	Write  bool   `json:"write,omitempty"`
	Owner  bool   `json:"owner,omitempty"`
}

// None reports whether g grants nothing.
func (g Grant) None() bool { return !g.Read && !g.Write && !g.Owner }

// Key is an S3 access key of an account. Secret is sealed by package secrets under a key
// derived from the cluster secret: the map, the Raft log and the snapshots never hold a
// secret key in the clear.
type Key struct {
	AccessKey string `json:"access_key"`
	Account   string `json:"account"`
	Secret    string `json:"secret"`
	Created   int64  `json:"created"` // unix nanoseconds
}

// RootAccount is the name of the user made at bootstrap.
const RootAccount = "root"

// The user and key commands (feature level 3):
//
//   - OpAddAccount (Account): adds a user. Exist if the name is taken; Invalid for a name
//     outside [A-Za-z0-9_.@+=,-]{1,64}.
//   - OpSetAccount (Account): sets an existing user's Disabled. NotExist if absent;
//     Invalid to disable the root user.
//   - OpRemoveAccount (Name): removes a user and its keys. NotExist if absent; Invalid for
//     the root user; NotEmpty while it owns buckets.
//   - OpPutKey (Keys, one): adds a key to an existing user. Exist if the access key is
//     taken (by a key or a legacy user); Invalid without a sealed secret or for an access
//     key outside [A-Za-z0-9_.-]{3,128}.
//   - OpRevokeKey (Name: the access key): removes a key. NotExist if absent.
//   - OpSetGrant (Name, Grant): sets user Name's grant on (Grant.Bucket, Grant.Prefix),
//     replacing the one it had there; a grant of nothing removes it. NotExist for an
//     unknown user or bucket (a grant on a name nobody holds would pass to whoever creates
//     it; deleting a bucket removes the grants on it); Invalid without a bucket, for a
//     prefix over 1024 bytes, or for Owner with a prefix.
//   - OpSealUsers (Keys): moves legacy users to sealed keys of the root user, which it
//     creates if it is missing: each key replaces the legacy user with its access key
//     (Precondition if there is none).
const (
	OpAddAccount    = "add_account"
	OpSetAccount    = "set_account"
	OpRemoveAccount = "remove_account"
	OpPutKey        = "put_key"
	OpRevokeKey     = "revoke_key"
	OpSealUsers     = "seal_users"
	OpSetGrant      = "set_grant"
)

// sealedPrefix starts every secret sealed by package secrets (which this package does not
// import: the map only checks the form, the nodes open the secrets).
const sealedPrefix = "v1."

// ValidAccountName reports whether name can name a user.
func ValidAccountName(name string) bool {
	if len(name) < 1 || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.@+=,-", r)) {
			return false
		}
	}
	return true
}

// ValidAccessKey reports whether id can be an access key id: 3 to 128 letters, digits or
// "-_." (generated ones are 20 capitals and digits, as AWS's; a slash, a comma or a
// space would break the SigV4 Credential field).
func ValidAccessKey(id string) bool {
	if len(id) < 3 || len(id) > 128 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func validateKey(k Key, legacyOK bool) error {
	if k.AccessKey == "" || (!legacyOK && !ValidAccessKey(k.AccessKey)) {
		return errors.Errorf(opFSM, errors.Invalid, "access key %q: 3 to 128 letters, digits or -_.", k.AccessKey)
	}
	if !strings.HasPrefix(k.Secret, sealedPrefix) {
		return errors.Errorf(opFSM, errors.Invalid, "key %s: the secret is not sealed", k.AccessKey)
	}
	return nil
}

// applyUserCommand applies a user or key command to nm, a private copy.
func applyUserCommand(nm *Map, c Command) error {
	switch c.Op {
	case OpAddAccount:
		a := c.Account
		if a == nil || !ValidAccountName(a.Name) {
			return errors.E(opFSM, errors.Invalid, "add_account: a user name is 1 to 64 letters, digits or _.@+=,-")
		}
		if _, ok := nm.Accounts[a.Name]; ok {
			return errors.Errorf(opFSM, errors.Exist, "user %s already exists", a.Name)
		}
		nm.Accounts[a.Name] = *a
	case OpSetAccount:
		if c.Account == nil {
			return errors.E(opFSM, errors.Invalid, "set_account: missing user")
		}
		a, ok := nm.Accounts[c.Account.Name]
		if !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no user %q", c.Account.Name)
		}
		if a.Root && c.Account.Disabled {
			return errors.Errorf(opFSM, errors.Invalid, "%s is the root user: it cannot be disabled", a.Name)
		}
		a.Disabled = c.Account.Disabled
		nm.Accounts[a.Name] = a
	case OpRemoveAccount:
		a, ok := nm.Accounts[c.Name]
		if !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no user %q", c.Name)
		}
		if a.Root {
			return errors.Errorf(opFSM, errors.Invalid, "%s is the root user: it cannot be removed", a.Name)
		}
		var owned []string
		for _, b := range nm.Buckets {
			if b.Owner == a.Name {
				owned = append(owned, b.Name)
			}
		}
		if len(owned) > 0 {
			slices.Sort(owned)
			return errors.Errorf(opFSM, errors.NotEmpty, "user %s owns %d bucket(s) (%s): delete them first", a.Name, len(owned), strings.Join(owned, ", "))
		}
		delete(nm.Accounts, a.Name)
		for id, k := range nm.Keys {
			if k.Account == a.Name {
				delete(nm.Keys, id)
			}
		}
	case OpPutKey:
		if len(c.Keys) != 1 {
			return errors.E(opFSM, errors.Invalid, "put_key: want one key")
		}
		k := c.Keys[0]
		if err := validateKey(k, false); err != nil {
			return err
		}
		if _, ok := nm.Accounts[k.Account]; !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no user %q", k.Account)
		}
		_, legacy := nm.Users[k.AccessKey]
		if _, ok := nm.Keys[k.AccessKey]; ok || legacy {
			return errors.Errorf(opFSM, errors.Exist, "access key %s already exists", k.AccessKey)
		}
		nm.Keys[k.AccessKey] = k
	case OpSetGrant:
		g := c.Grant
		a, ok := nm.Accounts[c.Name]
		switch {
		case g == nil || g.Bucket == "" || len(g.Prefix) > 1024:
			return errors.E(opFSM, errors.Invalid, "set_grant: a grant names a bucket (and a prefix of at most 1024 bytes)")
		case g.Owner && g.Prefix != "":
			return errors.E(opFSM, errors.Invalid, "set_grant: owner access is to a whole bucket, not a prefix")
		case !ok:
			return errors.Errorf(opFSM, errors.NotExist, "no user %q", c.Name)
		}
		if _, ok := nm.Buckets[g.Bucket]; !ok && !g.None() {
			// A grant on a name nobody holds would pass to whoever creates it.
			return errors.Errorf(opFSM, errors.NotExist, "set_grant: bucket %q does not exist", g.Bucket)
		}
		gs := slices.DeleteFunc(slices.Clone(a.Grants), func(x Grant) bool { return x.Bucket == g.Bucket && x.Prefix == g.Prefix })
		if !g.None() {
			gs = append(gs, *g)
			slices.SortFunc(gs, func(x, y Grant) int {
				if x.Bucket != y.Bucket {
					return strings.Compare(x.Bucket, y.Bucket)
				}
				return strings.Compare(x.Prefix, y.Prefix)
			})
		}
		if len(gs) == 0 {
			gs = nil
		}
		a.Grants = gs
		nm.Accounts[a.Name] = a
	case OpRevokeKey:
		if _, ok := nm.Keys[c.Name]; !ok {
			return errors.Errorf(opFSM, errors.NotExist, "no key %q", c.Name)
		}
		delete(nm.Keys, c.Name)
	case OpSealUsers:
		if len(c.Keys) == 0 {
			return errors.E(opFSM, errors.Invalid, "seal_users: no keys")
		}
		root, ok := nm.Accounts[RootAccount]
		if !ok {
			root = Account{Name: RootAccount, Root: true}
		}
		if !root.Root {
			return errors.Errorf(opFSM, errors.Invalid, "seal_users: user %s is not the root user", RootAccount)
		}
		for _, k := range c.Keys {
			if err := validateKey(k, true); err != nil {
				return err
			}
			if _, ok := nm.Users[k.AccessKey]; !ok {
				return errors.Errorf(opFSM, errors.Precondition, "seal_users: no legacy user %s", k.AccessKey)
			}
			if _, ok := nm.Keys[k.AccessKey]; ok {
				return errors.Errorf(opFSM, errors.Exist, "access key %s already exists", k.AccessKey)
			}
			if root.Created == 0 || (k.Created != 0 && k.Created < root.Created) {
				root.Created = k.Created
			}
			k.Account = RootAccount
			nm.Keys[k.AccessKey] = k
			delete(nm.Users, k.AccessKey)
		}
		nm.Accounts[RootAccount] = root
	}
	return nil
}

// validateInitAccounts checks the users and keys of an initial map: every key belongs to
// a user and is sealed, and no access key is both a key and a legacy user.
func validateInitAccounts(m *Map) error {
	for name, a := range m.Accounts {
		if a.Name != name || !ValidAccountName(name) {
			return errors.Errorf(opFSM, errors.Invalid, "init: user %q stored under %q", a.Name, name)
		}
	}
	for id, k := range m.Keys {
		if k.AccessKey != id {
			return errors.Errorf(opFSM, errors.Invalid, "init: key %q stored under %q", k.AccessKey, id)
		}
		if err := validateKey(k, true); err != nil {
			return err
		}
		if _, ok := m.Accounts[k.Account]; !ok {
			return errors.Errorf(opFSM, errors.Invalid, "init: key %s of unknown user %q", id, k.Account)
		}
		if _, ok := m.Users[id]; ok {
			return errors.Errorf(opFSM, errors.Invalid, "init: access key %s is both a key and a legacy user", id)
		}
	}
	return nil
}

// Credential is what an access key stands for when a request is signed with it.
type Credential struct {
	// Secret is the key's secret as the map holds it: sealed (for a Key), or in the clear
	// (for a legacy User; Legacy is set).
	Secret  string
	Legacy  bool
	Account Account
}

// Credential returns what access key id stands for: a key of an enabled user, or a legacy
// user (which belongs to the root user). It reports false for an unknown or revoked key
// and for a key of a disabled user.
func (m *Map) Credential(id string) (Credential, bool) {
	if k, ok := m.Keys[id]; ok {
		a, ok := m.Accounts[k.Account]
		if !ok || a.Disabled {
			return Credential{}, false
		}
		return Credential{Secret: k.Secret, Account: a}, true
	}
	if u, ok := m.Users[id]; ok {
		return Credential{Secret: u.SecretKey, Legacy: true, Account: Account{Name: RootAccount, Root: true}}, true
	}
	return Credential{}, false
}
