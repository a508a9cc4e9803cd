package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/internal/proc"
)

// The alert rules and the Grafana dashboard in deploy/ are checked as Prometheus would:
// `promtool check rules` on the rules, and on every dashboard query turned into a
// recording rule (so each parses as PromQL); and every cairn metric they name is one a
// live node exports after some traffic.
func TestMonitoringConfig(t *testing.T) {
	skipShort(t)
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is missing: install Debian's prometheus package (make deps-apt does)")
	}
	rules := filepath.Join("..", "..", "deploy", "prometheus", "cairn-alerts.yml")
	if out, err := exec.Command(promtool, "check", "rules", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rules, err, out)
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "cairn-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	var exprs []string
	var rec strings.Builder
	rec.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			q, _ := json.Marshal(tg.Expr) // a JSON string is a YAML string
			fmt.Fprintf(&rec, "      - record: dashboard:panel_%d\n        expr: %s\n", len(exprs), q)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("only %d queries in the dashboard", len(exprs))
	}
	recFile := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(recFile, []byte(rec.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", recFile).CombinedOutput(); err != nil {
		t.Fatalf("a dashboard query does not parse: %v\n%s", err, out)
	}
	ruleText, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}

	// The metrics of a live node after some traffic (request counters appear with their
	// first request).
	p := startTestProc(t, proc.Config{Name: "mon"})
	ctx := context.Background()
	c := p.client()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("mon")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("mon"), Key: aws.String("k"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := getBody(ctx, c, "mon", "k"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + p.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if name, _, _ := strings.Cut(strings.TrimPrefix(line, "# TYPE "), " "); strings.HasPrefix(line, "# TYPE ") {
			exported[name] = true
		} else if f := strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' }); len(f) > 0 && !strings.HasPrefix(line, "#") {
			exported[f[0]] = true
		}
	}
	metric := regexp.MustCompile(`\bcairn_[a-z0-9_]+`)
	var missing []string
	for _, text := range append(exprs, string(ruleText)) {
		for _, name := range metric.FindAllString(text, -1) {
			if !exported[name] {
				missing = append(missing, name)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("the rules or the dashboard name metrics a node does not export: %q", missing)
	}
}
