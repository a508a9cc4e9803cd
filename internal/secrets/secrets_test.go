package secrets

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/internal/errors"
)

func TestSealOpen(t *testing.T) {
	b, err := New("0123456789abcdef-cluster")
	if err != nil {
		t.Fatal(err)
	}
	s := b.Seal(S3Key, "AKIDEXAMPLE", []byte("wJalrXUtnFEMI/K7MDENG"))
	if !IsSealed(s) || strings.Contains(s, "wJalr") {
		t.Fatalf("sealed form %q", s)
	}
	if s2 := b.Seal(S3Key, "AKIDEXAMPLE", []byte("wJalrXUtnFEMI/K7MDENG")); s2 == s {
		t.Fatal("two seals of one secret are equal: the nonce is not random")
	}
	pt, err := b.Open(S3Key, "AKIDEXAMPLE", s)
	if err != nil || string(pt) != "wJalrXUtnFEMI/K7MDENG" {
		t.Fatalf("Open = %q, %v", pt, err)
	}
	other, _ := New("another-cluster-secret")
	// Flip a bit of the sealed bytes, not of their base64 text: a flipped
	// character can leave the alphabet ('-' becomes ',') and would test the
	// decoder instead of the authentication (this failed CI once).
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, "v1."))
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-3] ^= 1
	flip := "v1." + base64.RawURLEncoding.EncodeToString(raw)
	for _, tc := range []struct {
		name, purpose, key, sealed string
		box                        *Box
		kind                       errors.Kind
	}{
		{"other name", S3Key, "AKIDOTHER", s, b, errors.Permission},
		{"other purpose", "console", "AKIDEXAMPLE", s, b, errors.Permission},
		{"other cluster secret", S3Key, "AKIDEXAMPLE", s, other, errors.Permission},
		{"changed byte", S3Key, "AKIDEXAMPLE", flip, b, errors.Permission},
		{"plaintext", S3Key, "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", b, errors.Invalid},
		{"bad base64", S3Key, "AKIDEXAMPLE", "v1.***", b, errors.Invalid},
		{"too short", S3Key, "AKIDEXAMPLE", "v1.AAAA", b, errors.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt, err := tc.box.Open(tc.purpose, tc.key, tc.sealed)
			if err == nil || !errors.Is(tc.kind, err) {
				t.Fatalf("Open = %q, %v; want a %v error", pt, err, tc.kind)
			}
		})
	}
	if _, err := New("short"); err == nil {
		t.Fatal("a short cluster secret was accepted")
	}
}

func FuzzOpen(f *testing.F) {
	b, _ := New("0123456789abcdef-cluster")
	f.Add(b.Seal(S3Key, "AK", []byte("secret")))
	f.Add("v1.")
	f.Add("v2.AAAA")
	f.Fuzz(func(t *testing.T, s string) {
		if pt, err := b.Open(S3Key, "AK", s); err == nil && string(pt) != "secret" {
			t.Fatalf("a forged sealed secret opened: %q", pt)
		}
	})
}
