package main

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/server"
)

// A new key is made here, by cairn admin, and sealed here with the secret store's key
// (derived from the cluster secret this command signs with): its secret never crosses the
// network, and is printed once, by this command.

const (
	upperDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	base62      = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
)

// randomString returns n characters drawn uniformly from alphabet (rejection sampling:
// no character is likelier than another).
func randomString(n int, alphabet string) string {
	limit := 256 - 256%len(alphabet)
	out := make([]byte, 0, n)
	var buf [64]byte
	for len(out) < n {
		rand.Read(buf[:])
		for _, b := range buf {
			if int(b) < limit && len(out) < n {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}

// newKey makes an access key for user: a 20-character id starting "CK" and a 40-character
// secret (238 bits), the secret sealed for the map.
func newKey(box *secrets.Box, user string) (clustermap.Key, string) {
	id := "CK" + randomString(18, upperDigits)
	secret := randomString(40, base62)
	return clustermap.Key{AccessKey: id, Account: user, Secret: box.Seal(secrets.S3Key, id, []byte(secret)), Created: time.Now().UnixNano()}, secret
}

func (c *adminClient) apply(cmd clustermap.Command) (uint64, error) {
	body, _ := json.Marshal(cmd)
	var ans struct {
		Epoch uint64 `json:"epoch"`
	}
	err := c.doBody(http.MethodPost, "apply", body, &ans)
	return ans.Epoch, err
}

func (c *adminClient) users() ([]server.UserInfo, error) {
	var us []server.UserInfo
	err := c.do(http.MethodGet, "users", &us)
	return us, err
}

func (c *adminClient) user(name string) (server.UserInfo, error) {
	us, err := c.users()
	if err != nil {
		return server.UserInfo{}, err
	}
	for _, u := range us {
		if u.Name == name {
			return u, nil
		}
	}
	return server.UserInfo{}, fmt.Errorf("admin: no user %q (cairn admin user list)", name)
}

// printKey prints a new key, the only time its secret is shown.
func printKey(w io.Writer, k clustermap.Key, secret string, asJSON bool) error {
	if asJSON {
		return printJSON(w, map[string]string{"user": k.Account, "access_key": k.AccessKey, "secret_key": secret})
	}
	fmt.Fprintf(w, "access key: %s\nsecret key: %s\n", k.AccessKey, secret)
	fmt.Fprintln(w, "The secret key is shown only now: keep it (cairn cannot show it again; revoke the key and create another if it is lost).")
	return nil
}

const userUsage = "admin: usage: cairn admin user add NAME [--no-key] | list | info NAME | disable NAME | enable NAME | remove NAME | grant NAME BUCKET[/PREFIX] read|write|readwrite|owner|none"

func (c *adminClient) userCmd(stdout io.Writer, box *secrets.Box, args []string, asJSON bool) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", userUsage)
	}
	if args[0] == "list" {
		if len(args) != 1 {
			return fmt.Errorf("%s", userUsage)
		}
		us, err := c.users()
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, us)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "USER\tSTATE\tKEYS\tBUCKETS\tCREATED")
		for _, u := range us {
			state := "enabled"
			if u.Disabled {
				state = "disabled"
			}
			if u.Root {
				state += " (root)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", u.Name, state, len(u.Keys), len(u.Buckets), created(u.Created))
		}
		return tw.Flush()
	}
	if args[0] == "grant" {
		return c.grantCmd(stdout, args[1:])
	}
	noKey := false
	var rest []string
	for _, a := range args[1:] {
		if a == "--no-key" || a == "-no-key" {
			noKey = true
		} else {
			rest = append(rest, a)
		}
	}
	if len(rest) != 1 || (noKey && args[0] != "add") {
		return fmt.Errorf("%s", userUsage)
	}
	name := rest[0]
	switch args[0] {
	case "add":
		if !clustermap.ValidAccountName(name) {
			return fmt.Errorf("admin: user add: %q: a user name is 1 to 64 letters, digits or _.@+=,-", name)
		}
		if _, err := c.apply(clustermap.Command{Op: clustermap.OpAddAccount, Account: &clustermap.Account{Name: name, Created: time.Now().UnixNano()}}); err != nil {
			return err
		}
		if noKey {
			fmt.Fprintf(stdout, "user %s added (no key: cairn admin key create %s)\n", name, name)
			return nil
		}
		k, secret := newKey(box, name)
		if _, err := c.apply(clustermap.Command{Op: clustermap.OpPutKey, Keys: []clustermap.Key{k}}); err != nil {
			return fmt.Errorf("%w (user %s was added without a key: cairn admin key create %s)", err, name, name)
		}
		if !asJSON {
			fmt.Fprintf(stdout, "user %s added, with a key:\n", name)
		}
		return printKey(stdout, k, secret, asJSON)
	case "info":
		u, err := c.user(name)
		if err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, u)
		}
		state := "enabled"
		if u.Disabled {
			state = "disabled (its keys are refused)"
		}
		fmt.Fprintf(stdout, "user %s: %s%s, created %s\n", u.Name, state, map[bool]string{true: ", root (every bucket)"}[u.Root], created(u.Created))
		fmt.Fprintf(stdout, "keys (%d):\n", len(u.Keys))
		for _, k := range u.Keys {
			fmt.Fprintf(stdout, "  %s  created %s%s\n", k.AccessKey, created(k.Created), map[bool]string{true: " (in the clear until every node is upgraded)"}[k.Legacy])
		}
		fmt.Fprintf(stdout, "buckets (%d): %s\n", len(u.Buckets), strings.Join(u.Buckets, " "))
		if len(u.Grants) > 0 {
			fmt.Fprintf(stdout, "grants (%d):\n", len(u.Grants))
			for _, g := range u.Grants {
				fmt.Fprintf(stdout, "  %s/%s  %s\n", g.Bucket, g.Prefix, grantWords(g))
			}
		}
		return nil
	case "disable", "enable":
		ep, err := c.apply(clustermap.Command{Op: clustermap.OpSetAccount, Account: &clustermap.Account{Name: name, Disabled: args[0] == "disable"}})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "user %s %sd (map epoch %d): every node applies it as the map reaches it, within seconds\n", name, args[0], ep)
		return nil
	case "remove":
		ep, err := c.apply(clustermap.Command{Op: clustermap.OpRemoveAccount, Name: name})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "user %s removed with its keys (map epoch %d)\n", name, ep)
		return nil
	}
	return fmt.Errorf("%s", userUsage)
}

const keyUsage = "admin: usage: cairn admin key create USER | list [USER] | revoke [USER] ACCESS_KEY"

func (c *adminClient) keyCmd(stdout io.Writer, box *secrets.Box, args []string, asJSON bool) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", keyUsage)
	}
	switch {
	case args[0] == "create" && len(args) == 2:
		u, err := c.user(args[1])
		if err != nil {
			return err
		}
		k, secret := newKey(box, u.Name)
		if _, err := c.apply(clustermap.Command{Op: clustermap.OpPutKey, Keys: []clustermap.Key{k}}); err != nil {
			return err
		}
		return printKey(stdout, k, secret, asJSON)
	case args[0] == "list" && len(args) <= 2:
		us, err := c.users()
		if err != nil {
			return err
		}
		type row struct {
			User string `json:"user"`
			server.KeyInfo
		}
		rows := []row{}
		found := len(args) == 1
		for _, u := range us {
			if len(args) == 2 && u.Name != args[1] {
				continue
			}
			found = true
			for _, k := range u.Keys {
				rows = append(rows, row{u.Name, k})
			}
		}
		if !found {
			return fmt.Errorf("admin: no user %q (cairn admin user list)", args[1])
		}
		if asJSON {
			return printJSON(stdout, rows)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ACCESS KEY\tUSER\tCREATED")
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", r.AccessKey, r.User, created(r.Created))
		}
		return tw.Flush()
	case args[0] == "revoke" && (len(args) == 2 || len(args) == 3):
		id := args[len(args)-1]
		if len(args) == 3 {
			u, err := c.user(args[1])
			if err != nil {
				return err
			}
			mine := false
			for _, k := range u.Keys {
				mine = mine || k.AccessKey == id
			}
			if !mine {
				return fmt.Errorf("admin: key revoke: %s is not a key of user %s", id, u.Name)
			}
		}
		ep, err := c.apply(clustermap.Command{Op: clustermap.OpRevokeKey, Name: id})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "key %s revoked (map epoch %d): refused by every node as the map reaches it, within seconds, presigned URLs made with it too\n", id, ep)
		return nil
	}
	return fmt.Errorf("%s", keyUsage)
}

func created(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339)
}

// grantWords is a grant as cairn admin user grant takes it.
func grantWords(g clustermap.Grant) string {
	switch {
	case g.Owner:
		return "owner"
	case g.Read && g.Write:
		return "readwrite"
	case g.Read:
		return "read"
	case g.Write:
		return "write"
	}
	return "none"
}

// grantCmd sets a user's grant on a bucket or a prefix of it.
func (c *adminClient) grantCmd(stdout io.Writer, args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("%s", userUsage)
	}
	bucket, prefix, _ := strings.Cut(args[1], "/")
	g := clustermap.Grant{Bucket: bucket, Prefix: prefix}
	switch args[2] {
	case "read":
		g.Read = true
	case "write":
		g.Write = true
	case "readwrite":
		g.Read, g.Write = true, true
	case "owner":
		g.Owner = true
	case "none":
	default:
		return fmt.Errorf("admin: user grant: %q: want read, write, readwrite, owner or none", args[2])
	}
	ep, err := c.apply(clustermap.Command{Op: clustermap.OpSetGrant, Name: args[0], Grant: &g})
	if err != nil {
		return err
	}
	where := bucket
	if prefix != "" {
		where += "/" + prefix + "* (keys starting " + strconv.Quote(prefix) + ")"
	}
	fmt.Fprintf(stdout, "user %s: %s on %s (map epoch %d)\n", args[0], args[2], where, ep)
	return nil
}
