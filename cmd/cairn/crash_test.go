package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// keyState is what a key may hold: exactly one value once verified; while an operation was
// in flight at the moment of a crash, either the old or the attempted value.
type keyState struct {
	possible [][32]byte // sha256 of acceptable contents; absent == zero hash with absentOK
	absentOK bool
	certain  bool
}

func content(key string, version int) []byte {
	seed := sha256.Sum256([]byte(fmt.Sprint(key, "/", version)))
	cc := rand.NewChaCha8(seed)
	r := rand.New(cc)
	// Sizes: inline (< 128 KiB), one chunk, several chunks.
	var n int
	switch version % 4 {
	case 0:
		n = int(r.Uint32() % 2048)
	case 1:
		n = 4096 + int(r.Uint32()%60000)
	case 2:
		n = 200<<10 + int(r.Uint32()%(300<<10))
	default:
		n = 4<<20 + int(r.Uint32()%(3<<20))
	}
	b := make([]byte, n)
	cc.Read(b)
	return b
}

// TestCrashSafety runs concurrent PUTs, overwrites and DELETEs against a server process,
// SIGKILLs it at random moments, restarts it, and checks that every acknowledged write is
// readable with its last acknowledged content, nothing is torn, and deletes stay deleted.
func TestCrashSafety(t *testing.T) {
	skipShort(t)
	t.Parallel() // one of the longest: see heavyParallel
	const (
		rounds  = 22
		workers = 8
		keysPer = 12
	)
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 42))
	state := map[string]*keyState{}
	version := map[string]int{}
	var keys []string
	for w := 0; w < workers; w++ {
		for i := 0; i < keysPer; i++ {
			k := fmt.Sprintf("w%d/key-%02d", w, i)
			keys = append(keys, k)
			state[k] = &keyState{absentOK: true, certain: true}
		}
	}
	ctx := context.Background()
	acked, compactions := 0, 0
	for round := 0; round < rounds; round++ {
		// Small segments compacted often, so that kills also land in the middle of compactions.
		p := startProc(t, dir, "--segment-size", "8MiB", "--compact-interval", "100ms")
		c := p.client()
		if round == 0 {
			if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("crash")}); err != nil {
				t.Fatal(err)
			}
		}
		verify(t, c, round, keys, state)

		// Load, then a SIGKILL at a random moment.
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					k := fmt.Sprintf("w%d/key-%02d", w, r.IntN(keysPer))
					mu.Lock()
					st := state[k]
					version[k]++
					v := version[k]
					mu.Unlock()
					del := r.IntN(5) == 0
					var want [32]byte
					var body []byte
					if !del {
						body = content(k, v)
						want = sha256.Sum256(body)
					}
					// In flight: old or new.
					mu.Lock()
					old := st.possible
					oldAbsent := st.absentOK
					if del {
						st.absentOK = true
					} else {
						st.possible = append(append([][32]byte{}, old...), want)
					}
					st.certain = false
					mu.Unlock()
					var err error
					if del {
						_, err = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("crash"), Key: aws.String(k)})
					} else {
						_, err = c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("crash"), Key: aws.String(k), Body: bytes.NewReader(body)})
					}
					mu.Lock()
					if err == nil {
						// Acknowledged: exactly this state from now on.
						if del {
							st.possible, st.absentOK = nil, true
						} else {
							st.possible, st.absentOK = [][32]byte{want}, false
						}
						st.certain = true
						acked++
					} else {
						_ = oldAbsent
						mu.Unlock()
						return // the server is gone; the state stays uncertain
					}
					mu.Unlock()
				}
			}(w)
		}
		// Deliberate: the kill lands at a random moment of the load (and of compactions).
		time.Sleep(time.Duration(150+rng.IntN(900)) * time.Millisecond)
		p.Kill()
		close(stop)
		wg.Wait()
		compactions += strings.Count(p.Output(), "compacted segment")
	}
	p := startProc(t, dir)
	verify(t, p.client(), rounds, keys, state)
	t.Logf("%d rounds, %d acknowledged writes and deletes, %d compactions finished between kills, all verified", rounds, acked, compactions)
	if compactions == 0 {
		t.Fatal("no compaction ran: the crash test does not cover compaction")
	}
	if acked < rounds*5 {
		t.Fatalf("only %d operations acknowledged: the load did not run", acked)
	}
}

// verify reads every key and checks it against its possible states; afterwards each key's
// state is certain again (what was read).
func verify(t *testing.T, c *s3.Client, round int, keys []string, state map[string]*keyState) {
	t.Helper()
	ctx := context.Background()
	for _, k := range keys {
		st := state[k]
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("crash"), Key: aws.String(k)})
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) {
			if !st.absentOK {
				t.Fatalf("round %d: acknowledged object %s lost", round, k)
			}
			st.possible, st.absentOK, st.certain = nil, true, true
			continue
		}
		if err != nil {
			t.Fatalf("round %d: get %s: %v", round, k, err)
		}
		body, err := io.ReadAll(out.Body)
		out.Body.Close()
		if err != nil {
			t.Fatalf("round %d: read %s: %v (torn or corrupt record served?)", round, k, err)
		}
		if int64(len(body)) != *out.ContentLength {
			t.Fatalf("round %d: %s: %d bytes, Content-Length %d", round, k, len(body), *out.ContentLength)
		}
		got := sha256.Sum256(body)
		ok := false
		for _, p := range st.possible {
			if p == got {
				ok = true
			}
		}
		if !ok {
			if len(st.possible) == 0 {
				t.Fatalf("round %d: %s was deleted (acknowledged) but is readable again", round, k)
			}
			t.Fatalf("round %d: %s holds content that was never acknowledged or attempted last (%d bytes)", round, k, len(body))
		}
		st.possible, st.absentOK, st.certain = [][32]byte{got}, false, true
	}
}
