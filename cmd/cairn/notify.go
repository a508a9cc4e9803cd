package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/server"
)

const notifyUsage = `admin: usage:
  cairn admin notify target add NAME --webhook URL [--secret-file F]
  cairn admin notify target add NAME --redis HOST:PORT (--list KEY | --pubsub CHANNEL | both) [--secret-file F]
  cairn admin notify target list
  cairn admin notify target remove NAME
  cairn admin notify status
--secret-file (a file, or - for standard input) holds a Redis password or a webhook's
signing key (X-Cairn-Signature: sha256=HMAC of the body); it is sealed with the cluster
secret before it leaves this command and is never printed. --pubsub is best effort: Redis
keeps nothing for a subscriber that is away; --list is acknowledged and durable.`

// readSecretFile reads a secret from the file at path, or from standard input for "-"
// (never from the command line, where other users of the machine see it), without its
// trailing line end. An empty secret is an error.
func readSecretFile(path string) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", err
	}
	sec := strings.TrimRight(string(b), "\r\n")
	if sec == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return sec, nil
}

// notifyCmd is cairn admin notify: the operator's notification targets, and the status
// of every node's outbox.
func (c *adminClient) notifyCmd(stdout io.Writer, box *secrets.Box, args []string, asJSON bool) error {
	if len(args) == 1 && args[0] == "status" {
		var v server.NotifyView
		if err := c.do(http.MethodGet, "notify", &v); err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, &v)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tPENDING\tOLDEST\tDELIVERED\tDROPPED\tRETRIES\tDEAD LETTERS\tFAILING")
		for _, n := range v.Nodes {
			if n.Error != "" {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\tunreachable: %s\n", n.Node, n.Error)
				continue
			}
			var failing []string
			for t, e := range n.LastErrors {
				failing = append(failing, t+": "+e)
			}
			sort.Strings(failing)
			fmt.Fprintf(tw, "%s\t%d\t%.1fs\t%d\t%d\t%d\t%d\t%s\n", n.Node, n.Pending, n.OldestAge, n.Delivered, n.Dropped, n.Retries, n.Dead, or(strings.Join(failing, "; "), "-"))
		}
		return tw.Flush()
	}
	if len(args) < 2 || args[0] != "target" {
		return fmt.Errorf("%s", notifyUsage)
	}
	switch args[1] {
	case "list":
		var v server.NotifyView
		if err := c.do(http.MethodGet, "notify", &v); err != nil {
			return err
		}
		if asJSON {
			return printJSON(stdout, v.Targets)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TARGET\tKIND\tDESTINATION\tSECRET\tQUEUE ARN\tTOPIC ARN")
		for _, t := range v.Targets {
			dest := t.Webhook
			if t.Kind == "redis" {
				var parts []string
				if t.List != "" {
					parts = append(parts, "list "+t.List)
				}
				if t.Channel != "" {
					parts = append(parts, "pubsub "+t.Channel+" (best effort)")
				}
				dest = t.Redis + " " + strings.Join(parts, ", ")
			}
			secret := "-"
			if t.HasSecret {
				secret = "sealed"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Kind, dest, secret, t.QueueARN, t.TopicARN)
		}
		return tw.Flush()
	case "remove":
		if len(args) != 3 {
			return fmt.Errorf("%s", notifyUsage)
		}
		return c.applyNotify(stdout, clustermap.Command{Op: clustermap.OpRemoveNotifyTarget, Name: args[2]}, "removed target "+args[2], asJSON)
	case "add":
		if len(args) < 3 || strings.HasPrefix(args[2], "-") {
			return fmt.Errorf("%s", notifyUsage)
		}
		name := args[2]
		fs := flag.NewFlagSet("cairn admin notify target add", flag.ContinueOnError)
		webhook := fs.String("webhook", "", "URL events are POSTed to (http or https)")
		rd := fs.String("redis", "", "HOST:PORT of a Redis server")
		list := fs.String("list", "", "Redis list events are pushed to (RPUSH: acknowledged)")
		channel := fs.String("pubsub", "", "Redis channel events are published to (PUBLISH: best effort)")
		secretFile := fs.String("secret-file", "", "file holding the Redis password or the webhook signing key (- for standard input)")
		if err := fs.Parse(args[3:]); err != nil {
			return err
		}
		if fs.NArg() != 0 {
			return fmt.Errorf("%s", notifyUsage)
		}
		t := clustermap.NotifyTarget{Name: name, Webhook: *webhook, Redis: *rd, List: *list, Channel: *channel}
		if *secretFile != "" {
			sec, err := readSecretFile(*secretFile)
			if err != nil {
				return fmt.Errorf("admin: notify target %s: --secret-file: %w", name, err)
			}
			t.Secret = box.Seal(secrets.NotifyTarget, name, []byte(sec))
		}
		return c.applyNotify(stdout, clustermap.Command{Op: clustermap.OpPutNotifyTarget, Target: &t}, "target "+name+": configurations name it "+
			"arn:cairn:sqs:::"+name+" (QueueConfiguration) or arn:cairn:sns:::"+name+" (TopicConfiguration)", asJSON)
	}
	return fmt.Errorf("%s", notifyUsage)
}

func (c *adminClient) applyNotify(stdout io.Writer, cmd clustermap.Command, done string, asJSON bool) error {
	body, _ := json.Marshal(cmd)
	var ans struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := c.doBody(http.MethodPost, "apply", body, &ans); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, &ans)
	}
	fmt.Fprintf(stdout, "%s (map epoch %d)\n", done, ans.Epoch)
	return nil
}
