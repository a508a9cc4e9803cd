package sse

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestSealCustomer(t *testing.T) {
	ck, dk := NewDataKey(), NewDataKey()
	sealed, err := SealCustomer(ck, "b", "k", dk)
	if err != nil || len(sealed) != SealedSize {
		t.Fatalf("SealCustomer = %d bytes, %v", len(sealed), err)
	}
	got, err := OpenCustomer(ck, "b", "k", sealed)
	if err != nil || !bytes.Equal(got, dk) {
		t.Fatalf("OpenCustomer = %v", err)
	}
	for _, tc := range []struct {
		name, bucket, key string
		ck                []byte
	}{
		{"other key", "b", "k", NewDataKey()},
		{"other object", "b", "k2", ck},
		{"other bucket", "b2", "k", ck},
	} {
		if _, err := OpenCustomer(tc.ck, tc.bucket, tc.key, sealed); !errors.Is(errors.Permission, err) {
			t.Errorf("%s: %v, want Permission", tc.name, err)
		}
	}
	if _, err := OpenCustomer(ck[:16], "b", "k", sealed); err == nil {
		t.Error("a 16-byte key was accepted")
	}
	if e1, e2 := CustomerETag(dk, []byte("sum")), CustomerETag(NewDataKey(), []byte("sum")); e1 == e2 || len(e1) != 32 {
		t.Errorf("CustomerETag = %q, %q", e1, e2)
	}
}

// TestKeyringRotation: after a new key is added as the newest, it seals, and what the
// old one sealed still opens; a keyring without the old key says so (NotExist).
func TestKeyringRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "master.keys")
	k1, k2 := NewDataKey(), NewDataKey()
	if err := os.WriteFile(path, []byte("# test\nk1 "+b64(k1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kr, err := LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	dk := NewDataKey()
	id, sealed, err := kr.Seal("b", "k", dk)
	if err != nil || id != "k1" {
		t.Fatalf("Seal = %q, %v", id, err)
	}
	if err := os.WriteFile(path, []byte("k1 "+b64(k1)+"\n\nk2 "+b64(k2)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kr.Reload(); err != nil {
		t.Fatal(err)
	}
	if kr.Newest() != "k2" || kr.Len() != 2 {
		t.Fatalf("after rotation: newest %q, %d keys", kr.Newest(), kr.Len())
	}
	if got, err := kr.Open("k1", "b", "k", sealed); err != nil || !bytes.Equal(got, dk) {
		t.Fatalf("old object after rotation: %v", err)
	}
	if id, _, _ := kr.Seal("b", "k", dk); id != "k2" {
		t.Fatalf("new objects sealed with %q", id)
	}
	if _, err := kr.Open("k1", "b", "other", sealed); !errors.Is(errors.Permission, err) {
		t.Fatalf("open for another key: %v", err)
	}
	// A bad file keeps the keys in use.
	os.WriteFile(path, []byte("garbage"), 0o600)
	if err := kr.Reload(); err == nil || kr.Newest() != "k2" {
		t.Fatalf("Reload of a bad file: %v, newest %q", err, kr.Newest())
	}
	only2, _ := NewKeyring(MasterKey{"k2", k2})
	if _, err := only2.Open("k1", "b", "k", sealed); !errors.Is(errors.NotExist, err) {
		t.Fatalf("a keyring without the key: %v, want NotExist", err)
	}
}

var keyFileCases = []struct {
	name, data string
	ok         bool
}{
	{"one", "a " + b64(make([]byte, 32)), true},
	{"comments", "# c\n\n  a " + b64(make([]byte, 32)) + "  \n#x\nb.2:x-y_z " + b64(bytes.Repeat([]byte{1}, 32)) + "\n", true},
	{"empty", "# nothing\n", false},
	{"short key", "a " + b64(make([]byte, 16)), false},
	{"not base64", "a !!!", false},
	{"three fields", "a b c", false},
	{"bad name", "a/b " + b64(make([]byte, 32)), false},
	{"twice", "a " + b64(make([]byte, 32)) + "\na " + b64(make([]byte, 32)), false},
}

func TestParseKeyFile(t *testing.T) {
	for _, tc := range keyFileCases {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := ParseKeyFile([]byte(tc.data))
			if (err == nil) != tc.ok {
				t.Fatalf("ParseKeyFile = %v, %v; ok want %v", keys, err, tc.ok)
			}
			if err != nil && strings.Contains(err.Error(), b64(make([]byte, 32))) {
				t.Fatal("an error message shows a key")
			}
		})
	}
}

func FuzzParseKeyFile(f *testing.F) {
	for _, tc := range keyFileCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseKeyFile(data)
		if err != nil {
			return
		}
		kr, err := NewKeyring(keys...)
		if err != nil {
			t.Fatalf("parsed keys do not make a keyring: %v", err)
		}
		if kr.Newest() != keys[len(keys)-1].Name {
			t.Fatal("the newest key is not the last")
		}
	})
}
