package sse

import (
	"bufio"
	"bytes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"os"
	"strings"
	"sync/atomic"

	"github.com/cairnfs/cairn/internal/errors"
)

// Algorithms as records store them (object.Encryption.Algorithm).
const (
	// S3 is SSE-S3: the data key is sealed by a master key.
	S3 = "AES256"
	// Customer is SSE-C: the data key is sealed by the key the client sends.
	Customer = "SSE-C"
)

const (
	masterInfo   = "cairn/sse/v1/master"
	customerInfo = "cairn/sse/v1/customer"
	etagInfo     = "cairn/sse/v1/etag"
	nonceLen     = 12
	// SealedSize is the size of a sealed data key.
	SealedSize = nonceLen + KeySize + TagSize
)

// Binding is what a sealed data key is bound to (its additional data): it opens only
// for the same algorithm, master key name, bucket and key.
type Binding struct {
	Algorithm, KeyID, Bucket, Key string
}

func (b Binding) additional() []byte {
	return []byte("cairn/sse/v1\x00" + b.Algorithm + "\x00" + b.KeyID + "\x00" + b.Bucket + "\x00" + b.Key)
}

// kekAEAD is the AEAD of the key-encryption key derived from secret with info.
func kekAEAD(secret []byte, info string) (cipher.AEAD, error) {
	kek, err := hkdf.Key(sha256.New, secret, nil, info, KeySize)
	if err != nil {
		return nil, errors.E(errors.Other, err)
	}
	return newGCM(kek)
}

// seal seals dataKey under the key derived from secret with info.
func seal(secret []byte, info string, b Binding, dataKey []byte) ([]byte, error) {
	aead, err := kekAEAD(secret, info)
	if err != nil {
		return nil, err
	}
	out := make([]byte, nonceLen, SealedSize)
	rand.Read(out)
	return aead.Seal(out, out[:nonceLen], dataKey, b.additional()), nil
}

// open opens a data key sealed by seal; Permission if it does not open.
func open(secret []byte, info string, b Binding, sealed []byte) ([]byte, error) {
	aead, err := kekAEAD(secret, info)
	if err != nil {
		return nil, err
	}
	if len(sealed) != SealedSize {
		return nil, errors.Errorf("sse.open", errors.Corrupt, "a sealed data key of %d bytes", len(sealed))
	}
	k, err := aead.Open(nil, sealed[:nonceLen], sealed[nonceLen:], b.additional())
	if err != nil {
		return nil, errors.E(errors.Op("sse.open"), errors.Permission, "the data key does not open with this key for this object")
	}
	return k, nil
}

// SealCustomer seals dataKey with a client's SSE-C key for bucket/key.
func SealCustomer(clientKey []byte, bucket, key string, dataKey []byte) ([]byte, error) {
	if len(clientKey) != KeySize {
		return nil, errors.E(errors.Invalid, "an SSE-C key is 32 bytes")
	}
	return seal(clientKey, customerInfo, Binding{Algorithm: Customer, Bucket: bucket, Key: key}, dataKey)
}

// OpenCustomer opens a data key sealed by SealCustomer: Permission with another key.
func OpenCustomer(clientKey []byte, bucket, key string, sealed []byte) ([]byte, error) {
	if len(clientKey) != KeySize {
		return nil, errors.E(errors.Invalid, "an SSE-C key is 32 bytes")
	}
	return open(clientKey, customerInfo, Binding{Algorithm: Customer, Bucket: bucket, Key: key}, sealed)
}

// CustomerETag is the ETag of an SSE-C body (or part) whose plaintext MD5 is sum: not
// the MD5 itself, which would let anyone confirm a guess of the content, but a keyed
// digest of it under the object's data key, in the form of an MD5 (32 hex digits).
func CustomerETag(dataKey, sum []byte) string {
	k, _ := hkdf.Key(sha256.New, dataKey, nil, etagInfo, KeySize)
	m := hmac.New(sha256.New, k)
	m.Write(sum)
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// MasterKey is one named master key.
type MasterKey struct {
	Name string
	Key  []byte
}

// keyset is one version of a keyring's keys.
type keyset struct {
	byName map[string][]byte
	newest string
}

// Keyring holds the master keys of --master-key-file: the newest (last) seals, every one
// opens. It is safe for concurrent use; Reload replaces the keys atomically.
type Keyring struct {
	path string
	keys atomic.Pointer[keyset]
}

// NewKeyring returns a keyring of keys (the last is the newest), not backed by a file.
func NewKeyring(keys ...MasterKey) (*Keyring, error) {
	ks, err := makeKeyset(keys)
	if err != nil {
		return nil, err
	}
	k := &Keyring{}
	k.keys.Store(ks)
	return k, nil
}

// LoadKeyring reads a master key file (ParseKeyFile).
func LoadKeyring(path string) (*Keyring, error) {
	k := &Keyring{path: path}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Reload reads the keyring's file again. On an error the keys in use stay.
func (k *Keyring) Reload() error {
	const op errors.Op = "sse.Reload"
	if k.path == "" {
		return nil
	}
	data, err := os.ReadFile(k.path)
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	keys, err := ParseKeyFile(data)
	if err != nil {
		return errors.E(op, err)
	}
	ks, err := makeKeyset(keys)
	if err != nil {
		return errors.E(op, err)
	}
	k.keys.Store(ks)
	return nil
}

func makeKeyset(keys []MasterKey) (*keyset, error) {
	if len(keys) == 0 {
		return nil, errors.E(errors.Invalid, "no master key")
	}
	ks := &keyset{byName: map[string][]byte{}}
	for _, m := range keys {
		if !validName(m.Name) {
			return nil, errors.Errorf("sse", errors.Invalid, "bad master key name %q (1-64 of A-Z a-z 0-9 . _ : -)", m.Name)
		}
		if len(m.Key) != KeySize {
			return nil, errors.Errorf("sse", errors.Invalid, "master key %q is %d bytes, want %d", m.Name, len(m.Key), KeySize)
		}
		if ks.byName[m.Name] != nil {
			return nil, errors.Errorf("sse", errors.Invalid, "master key %q is listed twice", m.Name)
		}
		ks.byName[m.Name] = m.Key
		ks.newest = m.Name
	}
	return ks, nil
}

// Newest returns the name of the key that seals new data keys.
func (k *Keyring) Newest() string { return k.keys.Load().newest }

// Len returns the number of keys.
func (k *Keyring) Len() int { return len(k.keys.Load().byName) }

// Seal seals dataKey for bucket/key with the newest master key and returns the key's name.
func (k *Keyring) Seal(bucket, key string, dataKey []byte) (keyID string, sealed []byte, err error) {
	ks := k.keys.Load()
	sealed, err = seal(ks.byName[ks.newest], masterInfo, Binding{Algorithm: S3, KeyID: ks.newest, Bucket: bucket, Key: key}, dataKey)
	return ks.newest, sealed, err
}

// Open opens a data key sealed by Seal with master key keyID: NotExist if the keyring
// does not have that key, Permission if it does not open.
func (k *Keyring) Open(keyID, bucket, key string, sealed []byte) ([]byte, error) {
	mk := k.keys.Load().byName[keyID]
	if mk == nil {
		return nil, errors.Errorf("sse.Open", errors.NotExist, "master key %q is not in the master key file", keyID)
	}
	return open(mk, masterInfo, Binding{Algorithm: S3, KeyID: keyID, Bucket: bucket, Key: key}, sealed)
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// ParseKeyFile parses a master key file: one key per line, "NAME KEY" with KEY the
// standard base64 of 32 bytes (openssl rand -base64 32); blank lines and lines starting
// with '#' are ignored. The last key is the newest. Names are unique.
func ParseKeyFile(data []byte) ([]MasterKey, error) {
	var keys []MasterKey
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1024), 64<<10)
	line := 0
	seen := map[string]bool{}
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		f := strings.Fields(s)
		if len(f) != 2 {
			return nil, errors.Errorf("sse.ParseKeyFile", errors.Invalid, "line %d: want NAME KEY (the key in base64)", line)
		}
		if !validName(f[0]) {
			return nil, errors.Errorf("sse.ParseKeyFile", errors.Invalid, "line %d: bad key name (1-64 of A-Z a-z 0-9 . _ : -)", line)
		}
		if seen[f[0]] {
			return nil, errors.Errorf("sse.ParseKeyFile", errors.Invalid, "line %d: key %q is listed twice", line, f[0])
		}
		seen[f[0]] = true
		k, err := base64.StdEncoding.DecodeString(f[1])
		if err != nil || len(k) != KeySize {
			return nil, errors.Errorf("sse.ParseKeyFile", errors.Invalid, "line %d: key %q is not the base64 of 32 bytes", line, f[0])
		}
		keys = append(keys, MasterKey{Name: f[0], Key: k})
	}
	if err := sc.Err(); err != nil {
		return nil, errors.E(errors.Op("sse.ParseKeyFile"), errors.Invalid, err)
	}
	if len(keys) == 0 {
		return nil, errors.E(errors.Op("sse.ParseKeyFile"), errors.Invalid, "no key in the master key file")
	}
	return keys, nil
}
