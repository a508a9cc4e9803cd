package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/clustermap"
	"github.com/cairnfs/cairn/internal/secrets"
	"github.com/cairnfs/cairn/internal/server"
)

const tierUsage = `admin: usage:
  cairn admin tier add NAME --endpoint URL --bucket B --access-key AK [--region R] [--recall transparent|restore]
        (the secret key from $CAIRN_TIER_SECRET_KEY or --secret-key-file F)
  cairn admin tier add NAME --class CLASS [--recall transparent|restore]
  cairn admin tier list
  cairn admin tier remove NAME [--force]
  cairn admin tier marks DEVICE-CLASS --high H --low L --tier NAME [--pause]
  cairn admin tier marks DEVICE-CLASS --clear
  cairn admin tier status`

// tierCmd runs `cairn admin tier ...`. The secret key of an external tier is read from the
// environment or a file (never from the command line, which other users can see), sealed
// here with the cluster secret's box, and sent sealed.
func (c *adminClient) tierCmd(stdout io.Writer, box *secrets.Box, args []string, asJSON bool) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", tierUsage)
	}
	switch {
	case args[0] == "list" && len(args) == 1:
		var ts []server.TierInfo
		if err := c.do(http.MethodGet, "tiers", &ts); err != nil {
			return err
		}
		return printTiers(stdout, ts, asJSON)
	case args[0] == "status" && len(args) == 1:
		var ts []server.TierStatus
		if err := c.do(http.MethodGet, "tier/status", &ts); err != nil {
			return err
		}
		return printTierStatus(stdout, ts, asJSON)
	case args[0] == "remove" && (len(args) == 2 || len(args) == 3 && args[2] == "--force"):
		q := "tier/remove?name=" + urlQuery(args[1])
		if len(args) == 3 {
			q += "&force=true"
		}
		var ts []server.TierInfo
		if err := c.do(http.MethodPost, q, &ts); err != nil {
			return err
		}
		if !asJSON {
			fmt.Fprintf(stdout, "tier %s removed\n", args[1])
		}
		return printTiers(stdout, ts, asJSON)
	case args[0] == "add" && len(args) >= 2:
		fs := flag.NewFlagSet("cairn admin tier add", flag.ContinueOnError)
		endpoint := fs.String("endpoint", "", "http:// or https:// URL of the S3 endpoint (no path)")
		bucket := fs.String("bucket", "", "the endpoint's bucket that holds the tier's objects")
		region := fs.String("region", "", "signing region (default us-east-1)")
		ak := fs.String("access-key", "", "access key id")
		skFile := fs.String("secret-key-file", "", "file holding the secret key, - for standard input (default: $CAIRN_TIER_SECRET_KEY)")
		class := fs.String("class", "", "a storage class of this cluster restricted to a device class: a device-class tier")
		recall := fs.String("recall", "", "transparent (a GET streams the object back) or restore (InvalidObjectState until RestoreObject); default: transparent for a class, restore for an endpoint")
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		t := clustermap.Tier{Name: args[1], Recall: *recall}
		switch {
		case *class != "" && *endpoint != "":
			return fmt.Errorf("admin: tier add: give --class or --endpoint, not both")
		case *class != "":
			t.Kind, t.Class = clustermap.TierClass, *class
		case *endpoint != "":
			sk := os.Getenv("CAIRN_TIER_SECRET_KEY")
			if *skFile != "" {
				var err error
				if sk, err = readSecretFile(*skFile); err != nil {
					return fmt.Errorf("admin: tier add: --secret-key-file: %w", err)
				}
			}
			if sk == "" || *ak == "" {
				return fmt.Errorf("admin: tier add: an external tier needs --access-key and a secret key ($CAIRN_TIER_SECRET_KEY or --secret-key-file)")
			}
			t.Kind, t.Endpoint, t.Bucket, t.Region, t.AccessKey = clustermap.TierS3, *endpoint, *bucket, *region, *ak
			t.Secret = box.Seal(secrets.TierKey, t.Name, []byte(sk))
		default:
			return fmt.Errorf("admin: tier add: give --endpoint (an external S3 tier) or --class (a device-class tier)")
		}
		body, _ := json.Marshal(t)
		var ts []server.TierInfo
		if err := c.doBody(http.MethodPost, "tier/add", body, &ts); err != nil {
			return err
		}
		if !asJSON {
			fmt.Fprintf(stdout, "tier %s added\n", t.Name)
		}
		return printTiers(stdout, ts, asJSON)
	case args[0] == "marks" && len(args) >= 2:
		fs := flag.NewFlagSet("cairn admin tier marks", flag.ContinueOnError)
		high := fs.Int("high", 0, "high water mark, percent of the device class's capacity")
		low := fs.Int("low", 0, "low water mark, percent (below high)")
		tierName := fs.String("tier", "", "the tier the device class's objects move to")
		pause := fs.Bool("pause", false, "keep the marks but move nothing")
		clear := fs.Bool("clear", false, "remove the device class's water marks")
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		q := "tier/marks?device_class=" + urlQuery(args[1])
		if *clear {
			q += "&high=0"
		} else {
			if *high == 0 || *tierName == "" {
				return fmt.Errorf("admin: tier marks: give --high, --low and --tier (or --clear)")
			}
			q += "&high=" + strconv.Itoa(*high) + "&low=" + strconv.Itoa(*low) + "&tier=" + urlQuery(*tierName) + "&paused=" + strconv.FormatBool(*pause)
		}
		var ts []server.TierStatus
		if err := c.do(http.MethodPost, q, &ts); err != nil {
			return err
		}
		return printTierStatus(stdout, ts, asJSON)
	}
	return fmt.Errorf("%s", tierUsage)
}

func printTiers(w io.Writer, ts []server.TierInfo, asJSON bool) error {
	if asJSON {
		return printJSON(w, ts)
	}
	if len(ts) == 0 {
		fmt.Fprintln(w, "no tiers")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tKIND\tWHERE\tRECALL\tCREATED")
	for _, t := range ts {
		where := t.Class
		if t.Kind == clustermap.TierS3 {
			where = strings.TrimSuffix(t.Endpoint, "/") + "/" + t.Bucket
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Kind, where, t.RecallMode, when(time.Unix(0, t.Created)))
	}
	return tw.Flush()
}

func printTierStatus(w io.Writer, ts []server.TierStatus, asJSON bool) error {
	if asJSON {
		return printJSON(w, ts)
	}
	if len(ts) == 0 {
		fmt.Fprintln(w, "no device class has water marks")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE CLASS\tTIER\tHIGH\tLOW\tNODES\tCAPACITY\tUSED\tUSE\tTO MOVE\tDONE\tRATE\tETA\tSTATE")
	for _, s := range ts {
		state := "under the high mark"
		switch {
		case s.Paused:
			state = "paused"
		case s.Migrating:
			state = "migrating"
		case s.OverHigh:
			state = "over the high mark"
		}
		if s.Errors > 0 {
			state += fmt.Sprintf(" (%d errors)", s.Errors)
		}
		nodes := strconv.Itoa(s.Nodes)
		if s.Answered != s.Nodes {
			nodes = fmt.Sprintf("%d (%d answered)", s.Nodes, s.Answered)
		}
		eta := "-"
		if s.ETASeconds >= 0 {
			eta = fmt.Sprintf("%.0fs", s.ETASeconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d%%\t%d%%\t%s\t%s\t%s\t%.1f%%\t%s\t%s\t%s/s\t%s\t%s\n", s.DeviceClass, s.Tier, s.High, s.Low, nodes, human(s.Capacity), human(s.UsedBytes), s.Percent,
			human(s.BytesToMove), human(s.BytesDone), human(int64(s.RateBytes)), eta, state)
	}
	return tw.Flush()
}
