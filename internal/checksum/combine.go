package checksum

import "encoding/binary"

// Combine returns the checksum of the concatenation A||B from the checksums of A and B and
// the length of B, for the CRC algorithms (ok=false for SHA1 and SHA256, which cannot be
// combined). Sums are digests as the hashes return them (big endian). It lets a multipart
// upload get a FULL_OBJECT CRC without reading the object again.
func (a Algorithm) Combine(sumA, sumB []byte, lenB int64) ([]byte, bool) {
	var poly uint64
	var width int
	switch a {
	case CRC32:
		poly, width = 0xEDB88320, 32
	case CRC32C:
		poly, width = 0x82F63B78, 32
	case CRC64NVME:
		poly, width = 0x9A6C9329AC4BC9B5, 64
	default:
		return nil, false
	}
	if len(sumA) != width/8 || len(sumB) != width/8 {
		return nil, false
	}
	var crcA, crcB uint64
	if width == 32 {
		crcA, crcB = uint64(binary.BigEndian.Uint32(sumA)), uint64(binary.BigEndian.Uint32(sumB))
	} else {
		crcA, crcB = binary.BigEndian.Uint64(sumA), binary.BigEndian.Uint64(sumB)
	}
	c := combineCRC(crcA, crcB, lenB, poly, width)
	out := make([]byte, width/8)
	if width == 32 {
		binary.BigEndian.PutUint32(out, uint32(c))
	} else {
		binary.BigEndian.PutUint64(out, c)
	}
	return out, true
}

// combineCRC combines two reflected CRCs whose initial value and final xor are all ones (CRC-32,
// CRC-32C, CRC-64/NVME): it applies to crc1 the linear operator "append len2 zero bytes",
// built by repeated squaring of the one-zero-bit operator over GF(2), and adds crc2. The
// all-ones pre- and post-conditioning cancel out.
func combineCRC(crc1, crc2 uint64, len2 int64, poly uint64, width int) uint64 {
	if len2 <= 0 {
		return crc1
	}
	even := make([]uint64, width) // operator for an even power of two zero bits
	odd := make([]uint64, width)  // operator for an odd power of two zero bits
	odd[0] = poly                 // one zero bit
	for n, row := 1, uint64(1); n < width; n, row = n+1, row<<1 {
		odd[n] = row
	}
	gf2Square(even, odd) // two zero bits
	gf2Square(odd, even) // four zero bits
	for {
		gf2Square(even, odd) // first pass: one zero byte
		if len2&1 != 0 {
			crc1 = gf2Times(even, crc1)
		}
		if len2 >>= 1; len2 == 0 {
			break
		}
		gf2Square(odd, even)
		if len2&1 != 0 {
			crc1 = gf2Times(odd, crc1)
		}
		if len2 >>= 1; len2 == 0 {
			break
		}
	}
	return crc1 ^ crc2
}

func gf2Times(mat []uint64, vec uint64) uint64 {
	var sum uint64
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat []uint64) {
	for n := range mat {
		square[n] = gf2Times(mat, mat[n])
	}
}
