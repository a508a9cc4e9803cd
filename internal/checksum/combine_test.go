package checksum

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 300000)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, a := range []Algorithm{CRC32, CRC32C, CRC64NVME} {
		for _, split := range []int{0, 1, 7, 4096, 150001, len(data) - 1, len(data)} {
			t.Run(fmt.Sprint(a, split), func(t *testing.T) {
				sum := func(b []byte) []byte { h := a.New(); h.Write(b); return h.Sum(nil) }
				got, ok := a.Combine(sum(data[:split]), sum(data[split:]), int64(len(data)-split))
				if !ok {
					t.Fatal("not combinable")
				}
				if want := sum(data); !bytes.Equal(got, want) {
					t.Fatalf("combine %x, want %x", got, want)
				}
			})
		}
	}
	if _, ok := SHA256.Combine(nil, nil, 1); ok {
		t.Fatal("SHA256 combined")
	}
}
