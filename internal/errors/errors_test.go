package errors

import (
	"fmt"
	"io"
	"testing"
)

func TestKinds(t *testing.T) {
	base := E(Op("store.Get"), NotExist, "no such key")
	wrapped := E(Op("s3api.GetObject"), base)
	fmtWrapped := fmt.Errorf("context: %w", wrapped)
	for _, tc := range []struct {
		err  error
		kind Kind
		msg  string
	}{
		{base, NotExist, "store.Get: no such key"},
		{wrapped, NotExist, "s3api.GetObject: store.Get: no such key"},
		{fmtWrapped, NotExist, "context: s3api.GetObject: store.Get: no such key"},
		{E(Op("x"), Corrupt, wrapped), Corrupt, "x: s3api.GetObject: store.Get: no such key"},
		{E(io.EOF), Other, "EOF"},
		{io.EOF, Other, "EOF"},
		{Errorf("op", NoSpace, "%d left", 3), NoSpace, "op: 3 left"},
	} {
		if got := KindOf(tc.err); got != tc.kind {
			t.Errorf("%v: kind %v, want %v", tc.err, got, tc.kind)
		}
		if tc.err.Error() != tc.msg {
			t.Errorf("message %q, want %q", tc.err.Error(), tc.msg)
		}
	}
	sentinel := New("sentinel")
	if !IsErr(E(Op("a"), Invalid, fmt.Errorf("x: %w", sentinel)), sentinel) {
		t.Error("sentinel lost through E")
	}
	if !Is(Invalid, E(Op("a"), Invalid, sentinel)) {
		t.Error("Is(kind)")
	}
}
