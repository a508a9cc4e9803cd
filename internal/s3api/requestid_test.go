package s3api

import (
	"fmt"
	"testing"
)

// TestRequestID checks that requestID spells what fmt.Sprintf("%s%012X") spells, below and
// past twelve hex digits.
func TestRequestID(t *testing.T) {
	for _, n := range []uint64{0, 1, 9, 10, 0xabcdef, 0xffffffffffff, 0x1000000000000, 1<<64 - 2} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			h := &Handler{reqBase: "0A1B2C3D"}
			h.reqSeq.Store(n)
			want := fmt.Sprintf("%s%012X", h.reqBase, n+1)
			if got := h.requestID(); got != want {
				t.Errorf("requestID() = %q, want %q", got, want)
			}
		})
	}
}

// TestValidBucketNameAddress checks that names made of digits and dots are refused
// exactly when they are an IPv4 address.
func TestValidBucketNameAddress(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"192.168.5.4", false}, {"10.0.0.1", false}, {"123", true}, {"1.2.3", true},
		{"1.2.3.4.5", true}, {"256.1.1.1", true}, {"a1.2.3.4", true}, {"bench", true},
	} {
		if got := validBucketName(tt.name); got != tt.ok {
			t.Errorf("validBucketName(%q) = %v, want %v", tt.name, got, tt.ok)
		}
	}
}
