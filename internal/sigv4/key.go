package sigv4

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"strings"
	"sync"
)

// smallMsg is the longest message hmacSHA256 handles without allocating.
const smallMsg = 512

// hmacSHA256 returns HMAC-SHA256(key, msg). It does not allocate for keys and
// messages of up to smallMsg bytes, the common case for signing keys and
// strings to sign.
func hmacSHA256(key, msg []byte) [32]byte {
	if len(key) > smallMsg || len(msg) > smallMsg {
		return hmacLarge(bytes.Clone(key), bytes.Clone(msg))
	}
	const block = sha256.BlockSize
	var k [block]byte
	if len(key) > block {
		s := sha256.Sum256(key)
		copy(k[:], s[:])
	} else {
		copy(k[:], key)
	}
	var in [block + smallMsg]byte
	for i, c := range k {
		in[i] = c ^ 0x36
	}
	n := copy(in[block:], msg)
	inner := sha256.Sum256(in[:block+n])
	var out [block + sha256.Size]byte
	for i, c := range k {
		out[i] = c ^ 0x5c
	}
	copy(out[block:], inner[:])
	return sha256.Sum256(out[:])
}

// hmacLarge is hmacSHA256 for large inputs. Its arguments escape, which is
// why hmacSHA256 passes copies: its own stay on the caller's stack.
func hmacLarge(key, msg []byte) [32]byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	var out [32]byte
	m.Sum(out[:0])
	return out
}

// deriveKey computes the SigV4 signing key for secret, date (YYYYMMDD) and
// region, for the service s3.
func deriveKey(secret, date, region string) [32]byte {
	var kb [4 + 128]byte
	k := append(append(kb[:0], "AWS4"...), secret...)
	kDate := hmacSHA256(k, []byte(date))
	kRegion := hmacSHA256(kDate[:], []byte(region))
	kService := hmacSHA256(kRegion[:], []byte(service))
	return hmacSHA256(kService[:], []byte(terminator))
}

// maxCachedKeys bounds the signing-key cache; it is emptied when full. Keys
// change daily, so this only needs to hold a day's worth of access keys and
// regions.
const maxCachedKeys = 4096

// keyCache caches derived signing keys per access key, date and region,
// saving the four HMACs of a derivation on each request. The zero value is
// ready for use.
type keyCache struct {
	mu sync.RWMutex
	m  map[cacheKey]cachedKey
}

type cacheKey struct {
	accessKey, date, region string
}

type cachedKey struct {
	secret string // the secret the key was derived from, to notice rotations
	key    [32]byte
}

// get returns the signing key, from the cache if it holds one for the same
// secret, else freshly derived; cached says which.
func (c *keyCache) get(accessKey, secret, date, region string) (key [32]byte, cached bool) {
	c.mu.RLock()
	e, ok := c.m[cacheKey{accessKey, date, region}]
	c.mu.RUnlock()
	if ok && e.secret == secret {
		return e.key, true
	}
	return deriveKey(secret, date, region), false
}

// put caches a signing key. Verify calls it only once a signature made with the
// key has verified, so that forged requests cannot churn the cache.
func (c *keyCache) put(accessKey, secret, date, region string, key [32]byte) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxCachedKeys {
		c.m = make(map[cacheKey]cachedKey)
	}
	// Clone the strings: they may point into a large request header.
	ck := cacheKey{strings.Clone(accessKey), strings.Clone(date), strings.Clone(region)}
	c.m[ck] = cachedKey{secret, key}
	c.mu.Unlock()
}
