package clustermap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/errors"
)

func TestUserCommands(t *testing.T) {
	sealed := "v1.c2VhbGVkLXNlY3JldC1ieXRlcw"
	m := initialized(t)
	m, err := applyCommand(m, Command{Op: OpPutUser, User: &User{AccessKey: "LEGACYKEY", SecretKey: "plain"}})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		c    Command
		kind errors.Kind // 0: accepted
	}{
		{"seal legacy", Command{Op: OpSealUsers, Keys: []Key{{AccessKey: "LEGACYKEY", Secret: sealed, Created: 5}}}, 0},
		{"seal again", Command{Op: OpSealUsers, Keys: []Key{{AccessKey: "LEGACYKEY", Secret: sealed}}}, errors.Precondition},
		{"add alice", Command{Op: OpAddAccount, Account: &Account{Name: "alice", Created: 7}}, 0},
		{"add alice twice", Command{Op: OpAddAccount, Account: &Account{Name: "alice"}}, errors.Exist},
		{"bad name", Command{Op: OpAddAccount, Account: &Account{Name: "a/b"}}, errors.Invalid},
		{"key for alice", Command{Op: OpPutKey, Keys: []Key{{AccessKey: "ALICEKEY00000001", Account: "alice", Secret: sealed}}}, 0},
		{"key taken", Command{Op: OpPutKey, Keys: []Key{{AccessKey: "ALICEKEY00000001", Account: "alice", Secret: sealed}}}, errors.Exist},
		{"key taken by root", Command{Op: OpPutKey, Keys: []Key{{AccessKey: "LEGACYKEY", Account: "alice", Secret: sealed}}}, errors.Exist},
		{"key in the clear", Command{Op: OpPutKey, Keys: []Key{{AccessKey: "ALICEKEY00000002", Account: "alice", Secret: "plain"}}}, errors.Invalid},
		{"key with a slash", Command{Op: OpPutKey, Keys: []Key{{AccessKey: "ALICE/KEY", Account: "alice", Secret: sealed}}}, errors.Invalid},
		{"key of nobody", Command{Op: OpPutKey, Keys: []Key{{AccessKey: "BOBKEY0000000001", Account: "bob", Secret: sealed}}}, errors.NotExist},
		{"bucket of nobody", Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "b0", Owner: "bob"}}, errors.NotExist},
		{"alice's bucket", Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "b1", Owner: "alice"}}, 0},
		{"remove alice with a bucket", Command{Op: OpRemoveAccount, Name: "alice"}, errors.NotEmpty},
		{"disable root", Command{Op: OpSetAccount, Account: &Account{Name: RootAccount, Disabled: true}}, errors.Invalid},
		{"remove root", Command{Op: OpRemoveAccount, Name: RootAccount}, errors.Invalid},
		{"disable alice", Command{Op: OpSetAccount, Account: &Account{Name: "alice", Disabled: true}}, 0},
	}
	for _, s := range steps {
		nm, err := applyCommand(m, s.c)
		if s.kind == 0 {
			if err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			if nm.Epoch != m.Epoch+1 {
				t.Fatalf("%s: epoch %d after %d", s.name, nm.Epoch, m.Epoch)
			}
			m = nm
			continue
		}
		if err == nil || !errors.Is(s.kind, err) {
			t.Fatalf("%s: err %v, want %v", s.name, err, s.kind)
		}
	}
	if len(m.Users) != 0 {
		t.Fatalf("legacy users left after sealing: %v", m.Users)
	}
	if c, ok := m.Credential("LEGACYKEY"); !ok || c.Legacy || !c.Account.Root || c.Secret != sealed || m.Accounts[RootAccount].Created != 5 {
		t.Fatalf("sealed legacy key: %+v %v (root %+v)", c, ok, m.Accounts[RootAccount])
	}
	if _, ok := m.Credential("ALICEKEY00000001"); ok {
		t.Fatal("a disabled user's key is a credential")
	}
	m, _ = applyCommand(m, Command{Op: OpSetAccount, Account: &Account{Name: "alice"}})
	if c, ok := m.Credential("ALICEKEY00000001"); !ok || c.Account.Name != "alice" {
		t.Fatalf("enabled again: %+v %v", c, ok)
	}
	m, err = applyCommand(m, Command{Op: OpRevokeKey, Name: "ALICEKEY00000001"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Credential("ALICEKEY00000001"); ok {
		t.Fatal("a revoked key is a credential")
	}
	if _, err := applyCommand(m, Command{Op: OpRevokeKey, Name: "ALICEKEY00000001"}); !errors.Is(errors.NotExist, err) {
		t.Fatalf("revoking twice: %v", err)
	}
	m, _ = applyCommand(m, Command{Op: OpPutKey, Keys: []Key{{AccessKey: "ALICEKEY00000003", Account: "alice", Secret: sealed}}})
	m, _ = applyCommand(m, Command{Op: OpDeleteBucket, Name: "b1"})
	m, err = applyCommand(m, Command{Op: OpRemoveAccount, Name: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Keys["ALICEKEY00000003"]; ok {
		t.Fatal("a removed user's key remains")
	}
}

// A map without users and keys digests as builds before them did: the new fields are
// omitted when empty, so nodes of both builds agree during an upgrade.
func TestDigestWithoutAccounts(t *testing.T) {
	m := initialized(t)
	b, _ := json.Marshal(m.canonical())
	for _, field := range []string{`"accounts"`, `"keys"`, `"owner"`} {
		if strings.Contains(string(b), field) {
			t.Fatalf("empty %s in the map's JSON: %s", field, b)
		}
	}
}

// Compact leaves no byte of an earlier command in the Raft files: a secret put in the
// clear and sealed since is gone from every file under the manager's directory, on the
// leader and on a follower, and the map survives a restart from the snapshot alone.
func TestCompactForgetsSecrets(t *testing.T) {
	c := newCluster(t, "a", "b")
	n1, n2 := c.nodes[0], c.nodes[1]
	c.start(n1, true)
	c.join(n2)
	const plain = "PLAINTEXT-SECRET-0123456789"
	c.apply(Command{Op: OpPutUser, User: &User{AccessKey: "LEGACYKEY", SecretKey: plain}})
	for i := 0; i < 5; i++ { // more entries before the seal
		c.apply(Command{Op: OpCreateBucket, Bucket: &Bucket{Name: fmt.Sprintf("b%d", i)}})
	}
	m := c.apply(Command{Op: OpSealUsers, Keys: []Key{{AccessKey: "LEGACYKEY", Secret: "v1.c2VhbGVk"}}})
	c.waitFor("the seal on n2", func() string {
		if n2.m.Current().Epoch < m.Epoch {
			return "behind"
		}
		return ""
	})
	holds := func(n *tnode) []string {
		var found []string
		filepath.WalkDir(n.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(plain)) {
				found = append(found, p)
			}
			return nil
		})
		return found
	}
	if len(holds(n1)) == 0 {
		t.Fatal("the secret is in no Raft file before Compact: the test checks nothing")
	}
	for _, n := range []*tnode{n1, n2} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.m.Compact(ctx)
		cancel()
		if err != nil {
			t.Fatalf("Compact on %s: %v", n.id, err)
		}
		if f := holds(n); len(f) > 0 {
			t.Fatalf("after Compact, %s still holds the secret in %v", n.id, f)
		}
	}
	c.stop(n2)
	c.start(n2, false)
	c.waitFor("n2's map after a restart", func() string {
		if got := n2.m.Current(); got.Epoch < m.Epoch || len(got.Buckets) != 5 || got.Keys["LEGACYKEY"].Secret != "v1.c2VhbGVk" {
			return fmt.Sprintf("epoch %d, %d buckets", got.Epoch, len(got.Buckets))
		}
		return ""
	})
	c.apply(Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "after"}})
}

func TestGrants(t *testing.T) {
	m := initialized(t)
	apply := func(c Command) error {
		nm, err := applyCommand(m, c)
		if err == nil {
			m = nm
		}
		return err
	}
	must := func(c Command) {
		t.Helper()
		if err := apply(c); err != nil {
			t.Fatalf("%s: %v", c.Op, err)
		}
	}
	must(Command{Op: OpAddAccount, Account: &Account{Name: "alice"}})
	must(Command{Op: OpCreateBucket, Bucket: &Bucket{Name: "b"}})
	for _, tc := range []struct {
		name  string
		user  string
		grant *Grant
		kind  errors.Kind
	}{
		{"no bucket", "alice", &Grant{Prefix: "x", Read: true}, errors.Invalid},
		{"owner of a prefix", "alice", &Grant{Bucket: "b", Prefix: "x/", Owner: true}, errors.Invalid},
		{"unknown user", "bob", &Grant{Bucket: "b", Read: true}, errors.NotExist},
		{"unknown bucket", "alice", &Grant{Bucket: "later", Read: true}, errors.NotExist},
		{"long prefix", "alice", &Grant{Bucket: "b", Prefix: strings.Repeat("p", 1025), Read: true}, errors.Invalid},
	} {
		if err := apply(Command{Op: OpSetGrant, Name: tc.user, Grant: tc.grant}); !errors.Is(tc.kind, err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.kind)
		}
	}
	must(Command{Op: OpSetGrant, Name: "alice", Grant: &Grant{Bucket: "b", Prefix: "logs/", Write: true}})
	must(Command{Op: OpSetGrant, Name: "alice", Grant: &Grant{Bucket: "b", Prefix: "", Read: true}})
	must(Command{Op: OpSetGrant, Name: "alice", Grant: &Grant{Bucket: "b", Prefix: "logs/", Read: true, Write: true}}) // replaces
	if got := m.Accounts["alice"].Grants; len(got) != 2 || got[0].Prefix != "" || !got[1].Read || !got[1].Write {
		t.Fatalf("grants %+v", got)
	}
	must(Command{Op: OpSetGrant, Name: "alice", Grant: &Grant{Bucket: "b", Prefix: ""}}) // nothing: removed
	if got := m.Accounts["alice"].Grants; len(got) != 1 || got[0].Prefix != "logs/" {
		t.Fatalf("grants after a removal %+v", got)
	}
	must(Command{Op: OpDeleteBucket, Name: "b"})
	if got := m.Accounts["alice"].Grants; got != nil {
		t.Fatalf("grants outlive their bucket: %+v", got)
	}
}
