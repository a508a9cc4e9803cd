package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// soak is one run: the cluster, the history, the faults and the checks.
type soak struct {
	cfg    *config
	log    *logger
	cl     *cluster
	h      *history
	faults *faults
}

// run starts the cluster, runs clients and faults for cfg.duration, heals, waits for
// convergence and checks; it returns the exit code. The caller shuts the cluster down.
func (s *soak) run(ctx context.Context) int {
	cfg := s.cfg
	var err error
	if s.cl, err = newCluster(cfg, s.log); err != nil {
		s.log.printf("%v", err)
		return 2
	}
	if s.cl.tmpfs {
		s.log.printf("each node's data is on its own %s tmpfs", cfg.tmpfsSize)
	}
	t0 := time.Now()
	if err := s.cl.start(ctx); err != nil {
		s.log.printf("starting the cluster: %v", err)
		return 2
	}
	if err := s.setup(ctx); err != nil {
		s.log.printf("setting up: %v", err)
		return 2
	}
	s.log.printf("cluster of %d nodes serving after %.1fs; faults: %s", cfg.nodes, time.Since(t0).Seconds(), strings.Join(cfg.faults, ", "))

	s.h = newHistory()
	s.faults = newFaults(cfg, s.cl, s.log)
	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); newWorkload(cfg, s.cl, s.h, s.faults).run(runCtx) }()
	go func() { defer wg.Done(); s.faults.run(runCtx) }()
	go s.progress(runCtx)
	go s.watchSpace(runCtx)
	wg.Wait()
	if ctx.Err() != nil {
		s.log.printf("interrupted")
		return 2
	}
	s.log.printf("load and faults stopped; healing: resume paused nodes, remove fillers, restart stopped nodes")
	s.faults.heal()

	var violations []string
	deadline := time.Now().Add(cfg.healTimeout)
	if err := s.converge(ctx, deadline); err != nil {
		violations = append(violations, "cluster did not heal: "+err.Error())
		// What the clients can see is still checked: reads through every gateway (not the
		// replicas, which cannot converge while a node is unhealthy).
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		bad, _ := s.checkKeys(cctx, false)
		cancel()
		violations = append(violations, bad...)
	} else {
		if cfg.sabotage {
			s.sabotage(ctx)
		}
		violations = append(violations, s.finalCheck(ctx, deadline)...)
	}
	if ctx.Err() != nil {
		s.log.printf("interrupted")
		return 2
	}
	violations = append(checkReads(cfg, s.h), violations...)
	s.h.mu.Lock()
	violations = append(append([]string(nil), s.h.bad...), violations...)
	s.h.mu.Unlock()
	s.faults.mu.Lock()
	violations = append(violations, s.faults.noStart...)
	exits := append([]string(nil), s.faults.exits...)
	s.faults.mu.Unlock()
	for _, e := range exits {
		violations = append(violations, "unexpected exit: "+e)
	}
	s.summary(violations)
	if len(violations) > 0 {
		s.writeHistory()
		return 1
	}
	return 0
}

// setup creates the bucket, sets the read quorum if asked, and waits until every gateway
// serves the bucket.
func (s *soak) setup(ctx context.Context) error {
	c := s.cl.nodes[0].client
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("create bucket: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	for s.cfg.versioned {
		_, err := c.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String(bucket),
			VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}})
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("enable versioning: %v", err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if s.cfg.class != "" {
		out, err := s.cl.adminRaw(ctx, s.cl.nodes[0], s.cfg.classArgs()...)
		if err != nil {
			return err
		}
		s.log.printf("%s", strings.TrimSpace(string(out)))
	}
	if s.cfg.readQuorum > 0 {
		out, err := s.cl.adminRaw(ctx, s.cl.nodes[0], "class", "set", "STANDARD", "--replicas", fmt.Sprint(s.cfg.replicas),
			"--w", fmt.Sprint(s.cfg.w()), "--r", fmt.Sprint(s.cfg.readQuorum), "--d", fmt.Sprint(s.cfg.w()))
		if err != nil {
			return err
		}
		s.log.printf("%s", strings.TrimSpace(string(out)))
	}
	for _, n := range s.cl.nodes {
		for {
			_, err := n.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)})
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("bucket not served by %s: %v", n.id, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// Every gateway must know the class before the clients write into it.
	for _, n := range s.cl.nodes {
		for s.cfg.class != "" {
			var st statusJSON
			err := s.cl.admin(ctx, n, &st, "status")
			known := false
			for _, c := range st.Classes {
				known = known || c.Name == soakClass
			}
			if err == nil && known {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("class %s not known to %s: %v", soakClass, n.id, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if s.cfg.readQuorum > 0 {
		for {
			var st statusJSON
			err := s.cl.admin(ctx, s.cl.nodes[0], &st, "status")
			if err == nil && st.Effective.R == s.cfg.readQuorum {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("read quorum %d not in force: %v %+v", s.cfg.readQuorum, err, st.Effective)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// progress logs the counters every 10 seconds while the load runs.
func (s *soak) progress(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.h.mu.Lock()
		st := fmt.Sprintf("put %d, delete %d, get %d; write errors %d", s.h.stats["put acked"]+s.h.stats["put failed"]+s.h.stats["put unknown"]+s.h.stats["put not sent"],
			s.h.stats["delete"], s.h.stats["get"], s.h.stats["put failed"]+s.h.stats["put unknown"]+s.h.stats["put not sent"]+s.h.stats["del failed"]+s.h.stats["del unknown"]+s.h.stats["del not sent"])
		s.h.mu.Unlock()
		s.faults.mu.Lock()
		f := strings.Join(sortedCounts(s.faults.counts), ", ")
		s.faults.mu.Unlock()
		if f == "" {
			f = "none yet"
		}
		s.log.printf("progress: %s; faults: %s", st, f)
	}
}

// watchSpace samples each node's tmpfs use every second, except while the node is under
// a disk-full fault (its filler's blocks are not all counted while they are allocated),
// and keeps the peak, so a run can tell a fault from a mount that is too small.
func (s *soak) watchSpace(ctx context.Context) {
	for {
		for _, n := range s.cl.nodes {
			s.faults.mu.Lock()
			full := s.faults.active[n.idx] == "diskfull"
			s.faults.mu.Unlock()
			if full {
				continue
			}
			if used, total, ok := n.space(); ok {
				s.cl.mu.Lock()
				s.cl.peak[n.idx] = max(s.cl.peak[n.idx], used)
				s.cl.total = total
				s.cl.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// sabotage (--sabotage, a self-test of the checker) changes three keys behind the
// history's back after healing: it deletes one that is present, writes a value never
// recorded to another, and writes a corrupt body under a recorded value id to a third.
// The final check must report all three.
func (s *soak) sabotage(ctx context.Context) {
	_, present := s.checkKeys(ctx, true)
	var keys []string
	for k := range present {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) < 3 {
		s.log.printf("sabotage: only %d keys present; nothing done", len(keys))
		return
	}
	c := s.cl.nodes[0].client
	_, err1 := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(keys[0])})
	v := &value{key: keys[1], id: "sabotage-1", size: 100}
	_, err2 := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(keys[1]), Body: bytes.NewReader(v.bytes()),
		Metadata: map[string]string{metaKey: v.id}})
	s.h.mu.Lock()
	good := s.h.values[present[keys[2]]]
	s.h.mu.Unlock()
	body := good.bytes()
	if len(body) == 0 {
		body = []byte("x")
	} else {
		body[len(body)/2] ^= 0x20
	}
	_, err3 := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(keys[2]), Body: bytes.NewReader(body),
		Metadata: map[string]string{metaKey: good.id}})
	s.log.printf("sabotage: deleted %s (%v), wrote an unrecorded value to %s (%v), a corrupt copy of %s to %s (%v); the check must report all three",
		keys[0], err1, keys[1], err2, good.id, keys[2], err3)
}

// converge waits until every node is up and answering with no queued hints, then until
// every node has finished an anti-entropy round that started after that (with no errors)
// and no recovery is running.
func (s *soak) converge(ctx context.Context, deadline time.Time) error {
	t0 := time.Now()
	var why string
	lastLog := time.Now()
	wait := func(what string) error {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s after %s: %s", what, s.cfg.healTimeout, why)
		}
		if time.Since(lastLog) > 10*time.Second {
			s.log.printf("healing: waiting: %s", why)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		return nil
	}
	var allUp time.Time
	for {
		var st statusJSON
		err := s.cl.adminAny(ctx, &st, "status")
		why = s.notHealthy(&st, err)
		if why == "" {
			allUp = time.Now()
			break
		}
		if err := wait("nodes not all up"); err != nil {
			return err
		}
	}
	s.log.printf("healing: all %d nodes up with no queued hints after %.1fs; waiting for a sync round on every node", s.cfg.nodes, time.Since(t0).Seconds())
	since := allUp.Add(time.Second) // every node's map says all are up by then
	for {
		var st statusJSON
		err := s.cl.adminAny(ctx, &st, "status")
		why = s.notHealthy(&st, err)
		if why == "" {
			for _, n := range st.Nodes {
				ls := n.Stats.LastSync
				switch {
				case ls == nil || !ls.Start.After(since):
					why = fmt.Sprintf("%s has not run a sync round since all nodes were up", n.ID)
				case ls.Errors > 0 || ls.Err != "":
					why = fmt.Sprintf("%s's last sync round had %d errors %s", n.ID, ls.Errors, ls.Err)
				}
				if why != "" {
					break
				}
			}
		}
		if why == "" {
			var rec recoveryJSON
			if err := s.cl.adminAny(ctx, &rec, "recovery"); err != nil {
				why = err.Error()
			}
			for _, n := range rec.Nodes {
				if n.Running || n.Error != "" {
					why = fmt.Sprintf("recovery on %s: running %v %s", n.Node, n.Running, n.Error)
					break
				}
			}
		}
		if why == "" {
			s.log.printf("healing: converged %.1fs after the faults stopped", time.Since(t0).Seconds())
			return nil
		}
		if err := wait("replicas not converged"); err != nil {
			return err
		}
	}
}

// notHealthy says why the cluster is not healthy yet ("" when it is).
func (s *soak) notHealthy(st *statusJSON, err error) string {
	if err != nil {
		return err.Error()
	}
	if len(st.Nodes) != s.cfg.nodes {
		return fmt.Sprintf("%d nodes in the map, want %d", len(st.Nodes), s.cfg.nodes)
	}
	for _, n := range st.Nodes {
		switch {
		case n.State != "up":
			return fmt.Sprintf("%s is %s", n.ID, n.State)
		case n.Error != "" || n.Stats == nil:
			return fmt.Sprintf("%s is not answering: %s", n.ID, n.Error)
		case n.Stats.HintsPending > 0:
			return fmt.Sprintf("%s has %d queued hints", n.ID, n.Stats.HintsPending)
		}
	}
	return ""
}

// finalCheck reads every key through every gateway and every replica directly, and lists
// every gateway's listing; it re-checks for up to 30 s (but not past deadline plus 30 s)
// while anything is wrong, in case replicas were still converging, and returns what is
// still wrong at the end.
func (s *soak) finalCheck(ctx context.Context, deadline time.Time) []string {
	end := time.Now().Add(30 * time.Second)
	if d := deadline.Add(30 * time.Second); d.Before(end) {
		end = d
	}
	for attempt := 1; ; attempt++ {
		bad, present := s.checkKeys(ctx, true)
		if len(bad) == 0 {
			bad = s.checkListings(ctx, present)
		}
		if len(bad) == 0 {
			bad = s.checkUploads(ctx)
		}
		if len(bad) == 0 && s.cfg.versioned {
			bad = s.checkVersions(ctx)
		}
		bad = append(bad, s.probeGateways(ctx)...)
		if len(bad) == 0 {
			bad = s.probeHints(ctx)
		}
		if len(bad) == 0 {
			s.log.printf("final check: %d keys through %d gateways and their %d replicas each: all consistent with the history (%d present, %d absent); every gateway serves writes",
				s.cfg.keys, s.cfg.nodes, s.cfg.replicas, len(present), s.cfg.keys-len(present))
			return nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			s.log.printf("final check: attempt %d found %d violations; giving up", attempt, len(bad))
			return bad
		}
		s.log.printf("final check: attempt %d found %d violations (first: %s); re-checking in 5s", attempt, len(bad), firstLine(bad[0]))
		time.Sleep(5 * time.Second)
	}
}

// checkVersions reads every acknowledged version by its version id, each through another
// gateway in turn: none may be lost or changed (--versioned; deletes only add markers).
func (s *soak) checkVersions(ctx context.Context) []string {
	w := newWorkload(s.cfg, s.cl, s.h, s.faults)
	s.h.mu.Lock()
	vs := append([]written(nil), s.h.versions...)
	s.h.mu.Unlock()
	var bad []string
	for i, v := range vs {
		if ctx.Err() != nil {
			return append(bad, fmt.Sprintf("the check of the versions cut short: %v", ctx.Err()))
		}
		n := s.cl.nodes[i%len(s.cl.nodes)]
		id, found, err := w.readVersion(ctx, n, v.key, v.vid)
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("version %s of %s (value %s) through %s: %v", v.vid, v.key, v.id, n.id, err))
		case !found || id != v.id:
			bad = append(bad, fmt.Sprintf("version %s of %s through %s reads as %q (found %v), want value %s", v.vid, v.key, n.id, id, found, v.id))
		}
	}
	if len(bad) == 0 {
		s.log.printf("final check: %d acknowledged versions read back by their version ids", len(vs))
	}
	return bad
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// checkKeys checks every key (and its replicas if replicas); it returns the violations
// and the keys present (id by key).
func (s *soak) checkKeys(ctx context.Context, replicas bool) ([]string, map[string]string) {
	w := newWorkload(s.cfg, s.cl, s.h, s.faults)
	var mu sync.Mutex
	var bad []string
	present := map[string]string{}
	work := make(chan string)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range work {
				if ctx.Err() != nil {
					continue
				}
				v, id, ok := s.checkKey(ctx, w, k, replicas)
				mu.Lock()
				bad = append(bad, v...)
				if ok && id != "" {
					present[k] = id
				}
				mu.Unlock()
			}
		}()
	}
	for _, k := range w.keys {
		work <- k
	}
	close(work)
	wg.Wait()
	if ctx.Err() != nil {
		bad = append(bad, fmt.Sprintf("final check of the keys cut short: %v", ctx.Err()))
	}
	sort.Strings(bad)
	return bad, present
}

// checkKey reads key through every gateway and checks its replicas. It returns the
// violations (one, naming every problem, with the key's history), the state read, and
// whether the gateways agreed on it.
func (s *soak) checkKey(ctx context.Context, w *workload, key string, replicas bool) (bad []string, id string, agreed bool) {
	writes := s.h.writes(key)
	now := time.Now()
	allowed := allowedStates(writes, now, now)
	var problems []string
	defer func() {
		if len(problems) > 0 {
			bad = []string{fmt.Sprintf("key %s: %s\n    history:\n%s", key, strings.Join(problems, "; "), keyHistory(s.h, key, 30))}
		}
	}()
	seen := map[string][]string{}
	failures := map[string][]string{} // what went wrong -> through which gateways
	var failed []string
	for _, n := range s.cl.nodes {
		got, _, err := w.read(ctx, n, key)
		switch {
		case errors.Is(err, errCorrupt):
			msg := "corrupt final read: " + strings.TrimPrefix(err.Error(), "corrupt: ")
			if failures[msg] == nil {
				failed = append(failed, msg)
			}
			failures[msg] = append(failures[msg], n.id)
			continue
		case err != nil:
			msg := "final read failed: " + err.Error()
			if failures[msg] == nil {
				failed = append(failed, msg)
			}
			failures[msg] = append(failures[msg], n.id)
			continue
		}
		seen[got] = append(seen[got], n.id)
	}
	for _, msg := range failed {
		problems = append(problems, fmt.Sprintf("via %s: %s", strings.Join(failures[msg], ","), msg))
	}
	var states []string
	for st := range seen {
		states = append(states, st)
	}
	sort.Strings(states)
	for _, got := range states {
		if allowed[got] {
			continue
		}
		var what string
		switch {
		case got == "":
			what = "is not found: an acknowledged write is lost"
		case len(allowed) == 1 && allowed[""]:
			what = "returns " + got + ": a deleted object came back"
		default:
			what = "returns " + got + ", which a later acknowledged write replaced"
		}
		problems = append(problems, fmt.Sprintf("after healing, a read via %s %s; the history allows only: %s", strings.Join(seen[got], ","), what, statesList(allowed)))
	}
	if len(seen) > 1 {
		var parts []string
		for _, st := range states {
			parts = append(parts, fmt.Sprintf("%s via %s", stateName(st), strings.Join(seen[st], ",")))
		}
		problems = append(problems, "gateways disagree after healing: "+strings.Join(parts, "; "))
	}
	if len(seen) != 1 || len(problems) > 0 {
		return nil, "", false
	}
	id = states[0]
	if !replicas {
		return nil, id, true
	}
	var p placementJSON
	if err := s.cl.adminAny(ctx, &p, "placement", bucket, key); err != nil {
		problems = append(problems, fmt.Sprintf("placement: %v", err))
		return nil, id, true
	}
	var want *value
	if id != "" {
		s.h.mu.Lock()
		want = s.h.values[id]
		s.h.mu.Unlock()
	}
	if msg := checkPlacement(&p, s.cfg.replicas, want, s.cfg.classLayout()); msg != "" {
		problems = append(problems, fmt.Sprintf("reads as %s, but the replicas do not all hold it: %s", stateName(id), msg))
	}
	return nil, id, true
}

// probeGateways writes, reads and deletes a key of its own (under probe/, outside the
// key space) through every gateway: after healing every node must serve writes again.
func (s *soak) probeGateways(ctx context.Context) []string {
	var bad []string
	for _, n := range s.cl.nodes {
		key := "probe/" + n.id
		body := []byte("probe through " + n.id)
		_, err := n.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)})
		if err == nil {
			var out *s3.GetObjectOutput
			if out, err = n.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err == nil {
				var got []byte
				got, err = io.ReadAll(out.Body)
				out.Body.Close()
				if err == nil && !bytes.Equal(got, body) {
					err = fmt.Errorf("read back %q", got)
				}
			}
		}
		if err == nil {
			_, err = n.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("gateway %s does not serve a write after healing (PUT, GET, DELETE of %s): %v", n.id, key, err))
		}
	}
	return bad
}

// probeHints checks that every gateway can still queue and deliver a replica write for a
// node that does not answer (hinted retry; a gateway whose queue broke under a fault must
// not stay broken): for each gateway it finds a probe key with a replica on another node,
// pauses that node, writes the key through the gateway, resumes the node and waits for
// the queued writes to be delivered and the replicas to agree.
func (s *soak) probeHints(ctx context.Context) []string {
	if len(s.cl.nodes) < 2 || s.cfg.replicas-s.cfg.w() < 1 {
		return nil // no write succeeds with a replica paused
	}
	var bad []string
	byVictim := map[*node][]*node{}
	for _, g := range s.cl.nodes {
		v := s.cl.nodes[0]
		if g == v {
			v = s.cl.nodes[1]
		}
		byVictim[v] = append(byVictim[v], g)
	}
	// waitUp waits until every node is up in the map, answering, with no queued hints.
	waitUp := func(when string) bool {
		why := ""
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			var st statusJSON
			err := s.cl.adminAny(ctx, &st, "status")
			if why = s.notHealthy(&st, err); why == "" {
				return true
			}
		}
		bad = append(bad, fmt.Sprintf("hint probe: %s, the cluster is not healthy within 30s: %s", when, why))
		return false
	}
	for _, v := range []*node{s.cl.nodes[0], s.cl.nodes[1]} {
		if !waitUp("before pausing " + v.id) {
			return bad
		}
		keys := map[*node]string{}
		for _, g := range byVictim[v] {
			for i := 0; i < 100 && keys[g] == ""; i++ {
				k := fmt.Sprintf("probe/%s/%d", g.id, i)
				var p placementJSON
				if err := s.cl.adminAny(ctx, &p, "placement", bucket, k); err != nil {
					return append(bad, fmt.Sprintf("hint probe: placement of %s: %v", k, err))
				}
				for _, id := range p.Nodes {
					if id == v.id {
						keys[g] = k
					}
				}
			}
		}
		v.pause()
		// Once v is marked down, gateways queue its writes at once, without trying it.
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
			var st statusJSON
			err := s.cl.admin(ctx, byVictim[v][0], &st, "status")
			down := false
			for _, n := range st.Nodes {
				down = down || (err == nil && n.ID == v.id && n.State == "down")
			}
			if down {
				break
			}
			if time.Now().After(deadline) {
				bad = append(bad, fmt.Sprintf("hint probe: %s paused for 15s is not marked down (--down-after %s)", v.id, s.cfg.downAfter))
				break
			}
		}
		for _, g := range byVictim[v] {
			body := []byte("hint probe through " + g.id + " while " + v.id + " is paused")
			_, err := g.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(keys[g]), Body: bytes.NewReader(body)})
			if err != nil {
				bad = append(bad, fmt.Sprintf("gateway %s cannot write %s while %s (a replica) is paused, after healing: %v", g.id, keys[g], v.id, err))
			}
		}
		v.resume()
		if !waitUp("after resuming " + v.id) {
			return bad
		}
		// The queued writes must have reached v: every replica of each probe key agrees.
		deadline := time.Now().Add(30 * time.Second)
		for _, g := range byVictim[v] {
			for {
				var p placementJSON
				err := s.cl.adminAny(ctx, &p, "placement", bucket, keys[g])
				msg := ""
				if err != nil {
					msg = err.Error()
				} else {
					for _, r := range p.Replicas {
						if r.Error != "" || r.Missing || r.Deleted || r.HLC != p.Replicas[0].HLC {
							msg = fmt.Sprintf("%s: %+v", r.Node, r)
						}
					}
				}
				if msg == "" {
					break
				}
				if time.Now().After(deadline) {
					bad = append(bad, fmt.Sprintf("the write of %s through %s while %s was paused did not reach every replica within 30s: %s", keys[g], g.id, v.id, msg))
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
		}
	}
	return bad
}

// checkListings lists the bucket through every gateway: each must list exactly the keys
// present, with their values' ETags.
func (s *soak) checkListings(ctx context.Context, present map[string]string) []string {
	var bad []string
	for _, n := range s.cl.nodes {
		listed := map[string]string{}
		var token *string
		for {
			out, err := n.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), ContinuationToken: token, MaxKeys: aws.Int32(100)})
			if err != nil {
				bad = append(bad, fmt.Sprintf("listing via %s: %v", n.id, err))
				break
			}
			for _, o := range out.Contents {
				listed[aws.ToString(o.Key)] = strings.Trim(aws.ToString(o.ETag), `"`)
			}
			if !aws.ToBool(out.IsTruncated) {
				break
			}
			token = out.NextContinuationToken
		}
		for k, id := range present {
			s.h.mu.Lock()
			v := s.h.values[id]
			s.h.mu.Unlock()
			etag, ok := listed[k]
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("listing via %s lacks %s, which reads as %s", n.id, k, id))
			case etag != v.etag():
				bad = append(bad, fmt.Sprintf("listing via %s shows %s with etag %s, but it reads as %s (etag %s)", n.id, k, etag, id, v.etag()))
			}
		}
		for k := range listed {
			if _, ok := present[k]; !ok && !strings.HasPrefix(k, "probe/") {
				bad = append(bad, fmt.Sprintf("listing via %s shows %s, which reads as not found", n.id, k))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// checkUploads lists the bucket's multipart uploads through every gateway: none of the
// uploads whose Complete was acknowledged may be listed (a replica that was away when
// it completed must have learned of it by hint or anti-entropy and dropped its parts).
func (s *soak) checkUploads(ctx context.Context) []string {
	s.h.mu.Lock()
	done := map[string]string{}
	for _, u := range s.h.completed {
		done[u.id] = u.key
	}
	s.h.mu.Unlock()
	var bad []string
	for _, n := range s.cl.nodes {
		var km, um *string
		for {
			out, err := n.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket), KeyMarker: km, UploadIdMarker: um})
			if err != nil {
				bad = append(bad, fmt.Sprintf("listing uploads via %s: %v", n.id, err))
				break
			}
			for _, u := range out.Uploads {
				if key, ok := done[aws.ToString(u.UploadId)]; ok {
					bad = append(bad, fmt.Sprintf("listing uploads via %s shows %s (%s), whose Complete was acknowledged", n.id, aws.ToString(u.UploadId), key))
				}
			}
			if !aws.ToBool(out.IsTruncated) {
				break
			}
			km, um = out.NextKeyMarker, out.NextUploadIdMarker
		}
	}
	sort.Strings(bad)
	return bad
}

// summary prints what ran and what was found.
func (s *soak) summary(violations []string) {
	cfg := s.cfg
	p := func(format string, args ...any) { fmt.Fprintf(s.log.w, "  "+format+"\n", args...) }
	fmt.Fprintf(s.log.w, "soak summary (seed %d): %d nodes, N=%d W=%d R=%d, %s of load and faults\n", cfg.seed, cfg.nodes, cfg.replicas, cfg.w(), cfg.r(), cfg.duration)
	p("classes:    %s; objects up to %d KiB", cfg.describeClass(), cfg.maxSize>>10)
	s.h.mu.Lock()
	total := 0
	for _, ops := range s.h.ops {
		total += len(ops)
	}
	p("operations: %s", strings.Join(sortedCounts(s.h.stats), ", "))
	if len(s.h.errs) > 0 {
		p("errors:     %s", strings.Join(sortedCounts(s.h.errs), ", "))
		var kinds []string
		for k := range s.h.sample {
			kinds = append(kinds, k)
		}
		sort.Strings(kinds)
		for _, k := range kinds {
			p("  first %s: %s", k, s.h.sample[k])
		}
	} else {
		p("errors:     none")
	}
	s.h.mu.Unlock()
	if cfg.fresh() {
		p("reads:      checked for integrity and freshness (W+R > N)")
	} else {
		p("reads:      checked for integrity only (W+R <= N: a read may be stale)")
	}
	s.faults.mu.Lock()
	if len(s.faults.counts) > 0 {
		p("faults:     %s", strings.Join(sortedCounts(s.faults.counts), ", "))
	} else {
		p("faults:     none")
	}
	s.faults.mu.Unlock()
	p("final:      %d keys read through %d gateways, replicas and listings checked", cfg.keys, cfg.nodes)
	if cfg.class != "" {
		p("            (the records' class and layout too: %s objects as %q...)", soakClass, cfg.classLayout())
	}
	s.cl.mu.Lock()
	if s.cl.total > 0 {
		var peaks []string
		short := false
		for i, n := range s.cl.nodes {
			peaks = append(peaks, fmt.Sprintf("%s %d MiB", n.id, s.cl.peak[i]>>20))
			short = short || s.cl.total-s.cl.peak[i] < spaceReserve
		}
		p("space:      peak use of the %d MiB tmpfs without fillers: %s", s.cl.total>>20, strings.Join(peaks, ", "))
		if short {
			p("WARNING:    a node came within the %d MiB free-space reserve without a disk-full fault: its writes were refused; use a larger --tmpfs-size", spaceReserve>>20)
		}
	}
	s.cl.mu.Unlock()
	if len(violations) == 0 {
		p("result:     no violations")
		return
	}
	p("result:     %d VIOLATIONS", len(violations))
	for i, v := range violations {
		if i == 30 {
			p("... %d more in %s", len(violations)-30, filepath.Join(cfg.dir, "violations.txt"))
			break
		}
		p("- %s", v)
	}
	os.WriteFile(filepath.Join(cfg.dir, "violations.txt"), []byte(strings.Join(violations, "\n")+"\n"), 0o644)
}

// writeHistory writes every operation, by key, to DIR/history.txt.
func (s *soak) writeHistory() {
	s.h.mu.Lock()
	keys := make([]string, 0, len(s.h.ops))
	for k := range s.h.ops {
		keys = append(keys, k)
	}
	s.h.mu.Unlock()
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s\n%s", k, keyHistory(s.h, k, 1<<30))
	}
	os.WriteFile(filepath.Join(s.cfg.dir, "history.txt"), []byte(b.String()), 0o644)
}
