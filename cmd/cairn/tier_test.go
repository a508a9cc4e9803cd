package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/server"
	"github.com/cairnfs/cairn/internal/testutil/proctest"
)

// tierAdmin runs `cairn admin` against node i with the tier secret key in the environment.
func (tc *testCluster) tierAdmin(i int, secretKey string, args ...string) (string, error) {
	cmd := exec.Command(proctest.Bin(tc.t), append([]string{"admin", "--admin", tc.procs[i].AdminAddr()}, args...)...)
	cmd.Env = []string{"CAIRN_CLUSTER_SECRET=" + testClusterSecret, "CAIRN_TIER_SECRET_KEY=" + secretKey}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestTierAdmin: archive tiers and water marks through cairn admin, against a second
// cairn as the external tier: bad input (an endpoint that does not answer, a bucket it
// lacks, a wrong key, low > high, an unknown tier or device class, removing a tier in use)
// is refused with a clear error and changes nothing; the secret key is never printed; the
// tier status reports a device class past its high mark from the nodes' --capacity and
// their stores' accounting.
func TestTierAdmin(t *testing.T) {
	tc := startCluster(t, 1, "--device-class", "ssd", "--capacity", "1MiB")
	remote := startProc(t, t.TempDir())
	ctx := context.Background()
	if _, err := remote.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("archive")}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()

	unchanged := func(what string, epoch uint64) {
		t.Helper()
		if st := tc.status(0); st.Epoch != epoch {
			t.Fatalf("%s: the map changed (epoch %d, was %d)", what, st.Epoch, epoch)
		}
	}
	refused := func(what, want string, secret string, args ...string) {
		t.Helper()
		epoch := tc.status(0).Epoch
		out, err := tc.tierAdmin(0, secret, args...)
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("%s: %v\n%s\nwant an error with %q", what, err, out, want)
		}
		if strings.Contains(out, testSecret) {
			t.Fatalf("%s: the secret key is printed:\n%s", what, out)
		}
		t.Logf("%s: %s", what, strings.TrimSpace(out))
		unchanged(what, epoch)
	}
	add := []string{"tier", "add", "remote", "--endpoint", remote.URL(), "--bucket", "archive", "--access-key", testAccess}
	refused("unreachable endpoint", "does not answer", testSecret, "tier", "add", "remote", "--endpoint", dead, "--bucket", "archive", "--access-key", testAccess)
	refused("missing bucket", "no such bucket", testSecret, "tier", "add", "remote", "--endpoint", remote.URL(), "--bucket", "nosuch", "--access-key", testAccess)
	refused("wrong secret", "key is refused", "wrong-secret-key-0123456789abcdefghijkl", add...)
	refused("endpoint with a path", "without path", testSecret, "tier", "add", "remote", "--endpoint", remote.URL()+"/archive", "--bucket", "archive", "--access-key", testAccess)
	refused("class tier of STANDARD", "not restricted to a device class", "", "tier", "add", "cold", "--class", "STANDARD")
	if out, err := tc.tierAdmin(0, "", "tier", "list"); err != nil || !strings.Contains(out, "no tiers") {
		t.Fatalf("tier list after the refusals: %v\n%s", err, out)
	}

	if out, err := tc.tierAdmin(0, testSecret, add...); err != nil {
		t.Fatalf("tier add: %v\n%s", err, out)
	}
	refused("same name", "exists", testSecret, add...)
	out, err := tc.tierAdmin(0, "", "--json", "tier", "list")
	if err != nil {
		t.Fatalf("tier list: %v\n%s", err, out)
	}
	var tiers []server.TierInfo
	if err := json.Unmarshal([]byte(out), &tiers); err != nil {
		t.Fatalf("tier list --json: %v\n%s", err, out)
	}
	if len(tiers) != 1 || tiers[0].Name != "remote" || tiers[0].Kind != "s3" || tiers[0].RecallMode != "restore" || !tiers[0].Credentials || tiers[0].Secret != "" || tiers[0].AccessKey != "" {
		t.Fatalf("tier list: %+v", tiers)
	}
	if strings.Contains(out, testSecret) {
		t.Fatalf("tier list prints the secret key:\n%s", out)
	}

	refused("low > high", "0 < low < high <= 100", "", "tier", "marks", "ssd", "--high", "70", "--low", "85", "--tier", "remote")
	refused("unknown tier", `no tier "tape"`, "", "tier", "marks", "ssd", "--high", "85", "--low", "70", "--tier", "tape")
	refused("unknown device class", `device class "nvme"`, "", "tier", "marks", "nvme", "--high", "85", "--low", "70", "--tier", "remote")
	refused("remove unknown tier", `no tier "tape"`, "", "tier", "remove", "tape")
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--high", "85", "--low", "70", "--tier", "remote"); err != nil {
		t.Fatalf("tier marks: %v\n%s", err, out)
	}
	refused("remove the tier in use", "water marks", "", "tier", "remove", "remote")

	// Fill the 1 MiB node past 85 %.
	tc.createBucket(0, "bkt")
	c := tc.procs[0].client()
	for i := range 4 {
		body := bytes.Repeat([]byte{byte(i)}, 256<<10)
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String(fmt.Sprintf("k%d", i)), Body: bytes.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	proctest.WaitFor(t, 20*time.Second, func() error {
		out, err := tc.tierAdmin(0, "", "--json", "tier", "status")
		if err != nil {
			return fmt.Errorf("tier status: %v\n%s", err, out)
		}
		var sts []server.TierStatus
		if err := json.Unmarshal([]byte(out), &sts); err != nil {
			return fmt.Errorf("tier status --json: %v\n%s", err, out)
		}
		if len(sts) != 1 || sts[0].DeviceClass != "ssd" || sts[0].Capacity != 1<<20 || sts[0].Nodes != 1 || sts[0].Answered != 1 {
			return fmt.Errorf("tier status: %+v", sts)
		}
		s := sts[0]
		if !s.OverHigh || s.BytesToMove != s.UsedBytes-(1<<20)*70/100 {
			return fmt.Errorf("tier status: %+v, want over the high mark with used - 70 %% to move", s)
		}
		return nil
	})
	if out, err := tc.tierAdmin(0, "", "tier", "status"); err != nil || !strings.Contains(out, "over the high mark") {
		t.Fatalf("tier status: %v\n%s", err, out)
	}
	if out, err := tc.tierAdmin(0, "", "tier", "marks", "ssd", "--clear"); err != nil {
		t.Fatalf("tier marks --clear: %v\n%s", err, out)
	}
	if out, err := tc.tierAdmin(0, "", "tier", "remove", "remote"); err != nil || !strings.Contains(out, "no tiers") {
		t.Fatalf("tier remove: %v\n%s", err, out)
	}
}
