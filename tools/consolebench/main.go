// Command consolebench measures what the web console and `cairn admin status` cost on a
// running cluster: the latency of the console's data endpoint (/console/api/data, after a
// login with the cluster secret), of the signed admin status request the CLI sends
// (/admin/v1/status), and of a whole `cairn admin status --json` process. Requests are sent
// one after the other; it prints p50, p90 and max of each, and checks that the console and
// the admin API report the same bucket figures. It changes nothing in the cluster.
//
//	CAIRN_CLUSTER_SECRET=... go run ./tools/consolebench --admin 127.0.0.1:19001 --cairn bin/cairn
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/cairnfs/cairn/internal/rpc"
	"github.com/cairnfs/cairn/internal/server"
)

func main() {
	admin := flag.String("admin", "127.0.0.1:19001", "admin address of a node (plain HTTP)")
	n := flag.Int("n", 200, "requests per endpoint")
	procs := flag.Int("procs", 20, "runs of `cairn admin status --json`")
	bin := flag.String("cairn", "bin/cairn", "the cairn binary, for the CLI runs")
	flag.Parse()
	secretS := os.Getenv("CAIRN_CLUSTER_SECRET")
	if secretS == "" {
		fail(fmt.Errorf("set CAIRN_CLUSTER_SECRET"))
	}
	secret, err := rpc.NewSecret(secretS)
	if err != nil {
		fail(err)
	}
	base := "http://" + *admin

	// The signed admin status, as `cairn admin status` sends it.
	var st server.Status
	adminLat := measure(*n, func() error {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/admin/v1/status", nil)
		secret.Sign(req, "cairn-admin", 0, time.Now())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if err := secret.VerifyResponse(resp, req.Header.Get(rpc.HdrNonce)); err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("admin status: %s", resp.Status)
		}
		st = server.Status{}
		return json.NewDecoder(resp.Body).Decode(&st)
	})

	// The console's data endpoint, logged in.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.PostForm(base+"/console/api/login", url.Values{"password": {secretS}})
	if err != nil {
		fail(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		fail(fmt.Errorf("console login: %s", resp.Status))
	}
	var data struct{ Status server.Status }
	var bytesPerAnswer int
	consoleLat := measure(*n, func() error {
		resp, err := hc.Get(base + "/console/api/data")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("console data: %s", resp.Status)
		}
		b, err := io.ReadAll(resp.Body)
		bytesPerAnswer = len(b)
		if err != nil {
			return err
		}
		data.Status = server.Status{}
		return json.Unmarshal(b, &data)
	})

	cliLat := measure(*procs, func() error {
		cmd := exec.Command(*bin, "admin", "--admin", *admin, "status", "--json")
		cmd.Stdout = io.Discard
		return cmd.Run()
	})

	fmt.Printf("cluster: %d nodes, %d buckets, map epoch %d\n", len(st.Nodes), len(st.BucketUsage), st.Epoch)
	for _, b := range st.BucketUsage {
		fmt.Printf("  bucket %s: %d objects, %d bytes\n", b.Name, b.Objects, b.Bytes)
	}
	fmt.Printf("%-34s %6s %9s %9s %9s\n", "", "n", "p50", "p90", "max")
	for _, r := range []struct {
		name string
		lat  []time.Duration
	}{{"GET /console/api/data", consoleLat}, {"GET /admin/v1/status (signed)", adminLat}, {"cairn admin status --json (process)", cliLat}} {
		fmt.Printf("%-34s %6d %9s %9s %9s\n", r.name, len(r.lat), pct(r.lat, 50), pct(r.lat, 90), pct(r.lat, 100))
	}
	fmt.Printf("console answer: %d bytes of JSON\n", bytesPerAnswer)
	// The last answers of each, a few seconds apart: the same figures unless writes ran
	// meanwhile.
	if !slices.Equal(data.Status.BucketUsage, st.BucketUsage) {
		fmt.Printf("the console and the admin status differ (were writes running?): %+v vs %+v\n", data.Status.BucketUsage, st.BucketUsage)
		os.Exit(1)
	}
	fmt.Println("the console and the admin status report the same buckets' figures")
}

// measure runs f n times, one after the other, and returns the latencies.
func measure(n int, f func() error) []time.Duration {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := f(); err != nil {
			fail(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

func pct(d []time.Duration, p int) string {
	s := slices.Clone(d)
	slices.Sort(s)
	i := min(len(s)-1, len(s)*p/100)
	return s[i].Round(10 * time.Microsecond).String()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "consolebench:", err)
	os.Exit(1)
}
