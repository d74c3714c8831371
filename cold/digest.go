package cold

import (
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Digest summarises a set of rows independently of their order, the way
// migrate's segment checksum does (COUNT, SUM(CRC32), BIT_XOR of 64 bits of
// MD5): CRC32 alone lets one changed row in 2^32 through and a sum can be
// balanced by a second change; the XOR of a second hash makes either
// vanishingly unlikely. The per-row input is an unambiguous encoding of
// every value (rowBytes), so NULL, ” and a missing body all differ.
type Digest struct {
	Rows   int64
	CRCSum uint64
	XOR64  uint64
}

// Add folds one row in.
func (d *Digest) Add(r Row) {
	b := rowBytes(r)
	d.Rows++
	d.CRCSum += uint64(crc32.ChecksumIEEE(b))
	m := md5.Sum(b)
	d.XOR64 ^= binary.BigEndian.Uint64(m[:8])
}

func (d Digest) String() string {
	return fmt.Sprintf("rows=%d crc32sum=%d xor64=%016x", d.Rows, d.CRCSum, d.XOR64)
}

// rowBytes encodes a row: per value a 4-byte length (0xFFFFFFFF for NULL)
// then the bytes; the two tables are separated by a byte saying whether a
// body row exists.
func rowBytes(r Row) []byte {
	var b []byte
	put := func(v []byte) {
		if v == nil {
			b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
			return
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	for _, v := range r.Msg {
		put(v)
	}
	if r.Content == nil {
		return append(b, 0)
	}
	b = append(b, 1)
	for _, v := range r.Content {
		put(v)
	}
	return b
}
