// Package secrets is cairn's one secret store: it seals the secrets the cluster map has
// to hold in a form that can be opened again (an S3 secret key must be known in the clear
// to verify a SigV4 signature, so it cannot be hashed) under a key derived from the
// cluster secret. The map, the Raft log and the snapshots hold only sealed secrets; any
// node, and any `cairn admin` that has the cluster secret, can open them.
//
// A sealed secret is "v1." followed by the unpadded base64url of a 12-byte random nonce
// and the AES-256-GCM ciphertext with its tag. The key is HKDF-SHA256 of the cluster
// secret with the info "cairn/secret-store/v1". The additional data binds the ciphertext
// to its purpose and name (an S3 key's purpose is "s3-key", its name the access key), so a
// sealed secret copied to another entry of the map does not open there.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/cairnfs/cairn/internal/errors"
)

// Purposes name what a sealed secret is for; they are part of its additional data.
const (
	// S3Key is an S3 secret access key, named by its access key id.
	S3Key = "s3-key"
	// NotifyTarget is a bucket-notification target's password or signing key, named by
	// the target.
	NotifyTarget = "notify-target"
	// TierKey is the secret access key of an external archive tier, named by the tier's
	// name.
	TierKey = "tier-key"
	// MDCLink is the secret of a multi-data-center replication link, named by the link.
	MDCLink = "mdc-link"
)

const (
	prefix   = "v1."
	info     = "cairn/secret-store/v1"
	nonceLen = 12
)

// Box seals and opens secrets with the key derived from one cluster secret. It is safe
// for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// New derives the store's key from the cluster secret (at least 16 characters, as the
// cluster requires).
func New(clusterSecret string) (*Box, error) {
	if len(clusterSecret) < 16 {
		return nil, errors.E(errors.Invalid, "the cluster secret must be at least 16 characters")
	}
	key, err := hkdf.Key(sha256.New, []byte(clusterSecret), nil, info, 32)
	if err != nil {
		return nil, errors.E(errors.Other, err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, errors.E(errors.Other, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, errors.E(errors.Other, err)
	}
	return &Box{aead: aead}, nil
}

func additional(purpose, name string) []byte {
	return []byte(purpose + "\x00" + name)
}

// Seal returns plaintext sealed for purpose and name.
func (b *Box) Seal(purpose, name string, plaintext []byte) string {
	buf := make([]byte, nonceLen, nonceLen+len(plaintext)+b.aead.Overhead())
	rand.Read(buf)
	buf = b.aead.Seal(buf, buf[:nonceLen], plaintext, additional(purpose, name))
	return prefix + base64.RawURLEncoding.EncodeToString(buf)
}

// Open returns the plaintext of a secret sealed for purpose and name. It fails with
// Invalid if sealed is malformed, and with Permission if it was sealed under another
// cluster secret, for another purpose or name, or was changed.
func (b *Box) Open(purpose, name, sealed string) ([]byte, error) {
	const op errors.Op = "secrets.Open"
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return nil, errors.E(op, errors.Invalid, "not a sealed secret (want the v1. form)")
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(raw) < nonceLen+b.aead.Overhead() {
		return nil, errors.E(op, errors.Invalid, "malformed sealed secret")
	}
	pt, err := b.aead.Open(nil, raw[:nonceLen], raw[nonceLen:], additional(purpose, name))
	if err != nil {
		return nil, errors.Errorf(op, errors.Permission, "the %s secret of %q does not open with this cluster secret (sealed under another one, or changed)", purpose, name)
	}
	return pt, nil
}

// IsSealed reports whether s has the form of a sealed secret (it may still fail to open).
func IsSealed(s string) bool { return strings.HasPrefix(s, prefix) }
