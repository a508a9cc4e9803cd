package checksum

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/http"
	"strings"
	"testing"
)

// crc64NVMERef is a bit-at-a-time CRC-64/NVME (reflected polynomial
// 0x9a6c9329ac4bc9b5, initial value and final XOR all ones), independent of the
// table-driven implementation under test.
func crc64NVMERef(p []byte) uint64 {
	crc := ^uint64(0)
	for _, b := range p {
		crc ^= uint64(b)
		for range 8 {
			if crc&1 != 0 {
				crc = crc>>1 ^ 0x9a6c9329ac4bc9b5
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func TestVectors(t *testing.T) {
	hello := []byte("hello world")
	sha1Sum := sha1.Sum(hello)
	sha256Sum := sha256.Sum256(hello)
	tests := []struct {
		algo  Algorithm
		input string
		want  string // base64, from published values / Python's zlib and hashlib
		cross []byte // the same digest computed with the standard library or a reference
	}{
		{CRC32, "hello world", "DUoRhQ==", be32(crc32.ChecksumIEEE(hello))},
		{CRC32C, "hello world", "yZRlqg==", be32(crc32.Checksum(hello, crc32.MakeTable(crc32.Castagnoli)))},
		{CRC32C, "123456789", Encode(be32(0xe3069283)), be32(0xe3069283)},
		{CRC64NVME, "hello world", "jSnVw/bqjr4=", be64(crc64NVMERef(hello))},
		{CRC64NVME, "123456789", Encode(be64(0xae8b14860a799888)), be64(crc64NVMERef([]byte("123456789")))},
		{CRC64NVME, "", "AAAAAAAAAAA=", be64(crc64NVMERef(nil))},
		{SHA1, "hello world", "Kq5sNclPz7QV2+lfQIuc6R7oRu0=", sha1Sum[:]},
		{SHA256, "hello world", "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=", sha256Sum[:]},
	}
	for _, tt := range tests {
		t.Run(string(tt.algo)+"/"+tt.input, func(t *testing.T) {
			h := tt.algo.New()
			// Write in two pieces to exercise incremental hashing.
			h.Write([]byte(tt.input[:len(tt.input)/2]))
			h.Write([]byte(tt.input[len(tt.input)/2:]))
			sum := h.Sum(nil)
			if len(sum) != tt.algo.Size() {
				t.Fatalf("digest length %d, want %d", len(sum), tt.algo.Size())
			}
			if got := Encode(sum); got != tt.want {
				t.Errorf("Encode = %q, want %q", got, tt.want)
			}
			if !bytes.Equal(sum, tt.cross) {
				t.Errorf("sum %x, cross-check %x", sum, tt.cross)
			}
			if !tt.algo.ValidValue(tt.want) {
				t.Errorf("ValidValue(%q) = false", tt.want)
			}
			if !Matches(tt.want, sum) {
				t.Errorf("Matches(%q) = false", tt.want)
			}
			h.Reset()
			if Matches(tt.want, h.Sum(nil)) && tt.input != "" {
				t.Errorf("Matches after Reset = true")
			}
		})
	}
}

func TestCRC64NVMECheckValue(t *testing.T) {
	if got := crc64NVMERef([]byte("123456789")); got != 0xae8b14860a799888 {
		t.Fatalf("reference CRC-64/NVME check value %#x", got)
	}
	// Longer inputs exercise the vectorised paths of the implementation.
	data := make([]byte, 1<<16+7)
	for i := range data {
		data[i] = byte(i*7 + i>>8)
	}
	for _, n := range []int{0, 1, 15, 16, 63, 64, 255, 256, 4096, len(data)} {
		h := CRC64NVME.New()
		h.Write(data[:n])
		if got, want := h.Sum(nil), be64(crc64NVMERef(data[:n])); !bytes.Equal(got, want) {
			t.Errorf("n=%d: %x, want %x", n, got, want)
		}
	}
}

func TestParseAlgorithm(t *testing.T) {
	tests := []struct {
		in   string
		want Algorithm
		ok   bool
	}{
		{"CRC32", CRC32, true},
		{"crc32", CRC32, true},
		{"Crc32C", CRC32C, true},
		{"crc64nvme", CRC64NVME, true},
		{"sha1", SHA1, true},
		{"SHA256", SHA256, true},
		{"", "", false},
		{"MD5", "", false},
		{"crc", "", false},
		{"sha256 ", "", false},
		{"SHA-256", "", false},
	}
	for _, tt := range tests {
		got, ok := ParseAlgorithm(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseAlgorithm(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestHeaderNames(t *testing.T) {
	want := map[Algorithm]string{
		CRC32:     "x-amz-checksum-crc32",
		CRC32C:    "x-amz-checksum-crc32c",
		CRC64NVME: "x-amz-checksum-crc64nvme",
		SHA1:      "x-amz-checksum-sha1",
		SHA256:    "x-amz-checksum-sha256",
	}
	for _, a := range Algorithms() {
		if !a.Valid() {
			t.Errorf("%s not valid", a)
		}
		if got := a.HeaderName(); got != want[a] {
			t.Errorf("%s.HeaderName() = %q, want %q", a, got, want[a])
		}
		for _, name := range []string{want[a], strings.ToUpper(want[a]), http.CanonicalHeaderKey(want[a])} {
			if got, ok := AlgorithmFromHeaderName(name); !ok || got != a {
				t.Errorf("AlgorithmFromHeaderName(%q) = %q, %v", name, got, ok)
			}
		}
	}
	for _, name := range []string{"", "x-amz-checksum-", "x-amz-checksum-type", "x-amz-checksum-mode",
		"x-amz-checksum-algorithm", "x-amz-checksum-md5", "content-md5", "x-amz-checksumcrc32"} {
		if got, ok := AlgorithmFromHeaderName(name); ok {
			t.Errorf("AlgorithmFromHeaderName(%q) = %q, true", name, got)
		}
	}
	var bad Algorithm = "MD5"
	if bad.Valid() || bad.HeaderName() != "" || bad.New() != nil || bad.Size() != 0 || bad.ValidValue("AAAAAA==") {
		t.Errorf("invalid algorithm treated as valid")
	}
}

func TestValidValue(t *testing.T) {
	tests := []struct {
		algo Algorithm
		in   string
		want bool
	}{
		{CRC32, "DUoRhQ==", true},
		{CRC32, "DUoRhQ=", false},
		{CRC32, "DUoRhQ", false},
		{CRC32, "DUoRhR==", false}, // non-zero padding bits
		{CRC32, "DUoR hQ=", false},
		{CRC32, "jSnVw/bqjr4=", false}, // right base64, wrong length
		{CRC32C, "yZRlqg==", true},
		{CRC64NVME, "jSnVw/bqjr4=", true},
		{CRC64NVME, "jSnVw_bqjr4=", false}, // URL alphabet
		{SHA1, "Kq5sNclPz7QV2+lfQIuc6R7oRu0=", true},
		{SHA256, "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=", true},
		{SHA256, "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek", false},
		{SHA256, "", false},
	}
	for _, tt := range tests {
		if got := tt.algo.ValidValue(tt.in); got != tt.want {
			t.Errorf("%s.ValidValue(%q) = %v, want %v", tt.algo, tt.in, got, tt.want)
		}
	}
}

func TestFromHeaders(t *testing.T) {
	tests := []struct {
		name    string
		headers map[string][]string
		want    Expect
		errCode string
	}{
		{name: "none", headers: map[string][]string{"Content-Type": {"text/plain"}}},
		{
			name:    "value header",
			headers: map[string][]string{"X-Amz-Checksum-Crc32": {"DUoRhQ=="}},
			want:    Expect{Algo: CRC32, Value: "DUoRhQ=="},
		},
		{
			name:    "value header not canonical",
			headers: map[string][]string{"x-amz-checksum-sha256": {" uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek= "}},
			want:    Expect{Algo: SHA256, Value: "uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek="},
		},
		{
			name: "value with sdk algorithm",
			headers: map[string][]string{
				"X-Amz-Checksum-Crc32c":        {"yZRlqg=="},
				"X-Amz-Sdk-Checksum-Algorithm": {"crc32c"},
			},
			want: Expect{Algo: CRC32C, Value: "yZRlqg=="},
		},
		{
			name: "ignored checksum headers",
			headers: map[string][]string{
				"X-Amz-Checksum-Type":      {"FULL_OBJECT"},
				"X-Amz-Checksum-Mode":      {"ENABLED"},
				"X-Amz-Checksum-Algorithm": {"CRC32"},
			},
		},
		{
			name:    "trailer",
			headers: map[string][]string{"X-Amz-Trailer": {"x-amz-checksum-crc64nvme"}},
			want:    Expect{Algo: CRC64NVME, Trailer: true},
		},
		{
			name: "trailer with sdk algorithm",
			headers: map[string][]string{
				"X-Amz-Trailer":                {" X-Amz-Checksum-Sha1 "},
				"X-Amz-Sdk-Checksum-Algorithm": {"SHA1"},
			},
			want: Expect{Algo: SHA1, Trailer: true},
		},
		{
			name:    "sdk algorithm only",
			headers: map[string][]string{"X-Amz-Sdk-Checksum-Algorithm": {"CRC32"}},
			want:    Expect{Algo: CRC32},
		},
		{
			name: "two value headers",
			headers: map[string][]string{
				"X-Amz-Checksum-Crc32":  {"DUoRhQ=="},
				"X-Amz-Checksum-Crc32c": {"yZRlqg=="},
			},
			errCode: CodeInvalidRequest,
		},
		{
			name: "two empty value headers",
			headers: map[string][]string{
				"X-Amz-Checksum-Sha1":  {""},
				"X-Amz-Checksum-Crc32": {""},
			},
			errCode: CodeInvalidRequest,
		},
		{
			name:    "repeated value header",
			headers: map[string][]string{"X-Amz-Checksum-Crc32": {"DUoRhQ==", "DUoRhQ=="}},
			errCode: CodeInvalidRequest,
		},
		{
			name:    "bad value",
			headers: map[string][]string{"X-Amz-Checksum-Crc32": {"yZRlqg"}},
			errCode: CodeInvalidRequest,
		},
		{
			name:    "value of the wrong length",
			headers: map[string][]string{"X-Amz-Checksum-Sha256": {"DUoRhQ=="}},
			errCode: CodeInvalidRequest,
		},
		{
			name: "value header and trailer",
			headers: map[string][]string{
				"X-Amz-Checksum-Crc32": {"DUoRhQ=="},
				"X-Amz-Trailer":        {"x-amz-checksum-crc32"},
			},
			errCode: CodeInvalidRequest,
		},
		{
			name:    "two trailers",
			headers: map[string][]string{"X-Amz-Trailer": {"x-amz-checksum-crc32,x-amz-checksum-sha1"}},
			errCode: CodeInvalidRequest,
		},
		{
			name:    "unsupported trailer",
			headers: map[string][]string{"X-Amz-Trailer": {"x-amz-checksum-md5"}},
			errCode: CodeInvalidArgument,
		},
		{
			name: "sdk algorithm disagrees",
			headers: map[string][]string{
				"X-Amz-Checksum-Crc32c":        {"yZRlqg=="},
				"X-Amz-Sdk-Checksum-Algorithm": {"CRC32"},
			},
			errCode: CodeInvalidRequest,
		},
		{
			name:    "sdk algorithm unknown",
			headers: map[string][]string{"X-Amz-Sdk-Checksum-Algorithm": {"MD5"}},
			errCode: CodeInvalidRequest,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromHeaders(http.Header(tt.headers))
			if tt.errCode != "" {
				var e *Error
				if !errors.As(err, &e) || e.Code != tt.errCode {
					t.Fatalf("err = %v, want code %s", err, tt.errCode)
				}
				if e.Message == "" || !strings.Contains(e.Error(), e.Code) {
					t.Errorf("poor error %q", e.Error())
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestMatchesAllocs(t *testing.T) {
	sum := sha256.Sum256([]byte("hello world"))
	v := Encode(sum[:])
	if n := testing.AllocsPerRun(100, func() {
		if !Matches(v, sum[:]) || !SHA256.ValidValue(v) {
			t.Fatal("no match")
		}
	}); n != 0 {
		t.Errorf("Matches allocates %v times", n)
	}
}

func BenchmarkAlgorithms(b *testing.B) {
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i)
	}
	for _, a := range Algorithms() {
		b.Run(string(a), func(b *testing.B) {
			h := a.New()
			sum := make([]byte, 0, a.Size())
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				h.Reset()
				h.Write(data)
				sum = h.Sum(sum[:0])
			}
		})
	}
}
