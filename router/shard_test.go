package router

import (
	"errors"
	"math"
	"testing"
)

// The vectors were computed with MariaDB's CRC32(key) % 1024 (ENVIRONMENT.md);
// the integration suite re-checks a sample against the live server.
func TestShardOfVectors(t *testing.T) {
	cases := []struct {
		key  uint64
		want Shard
	}{
		{0, 801}, {1, 951}, {2, 525}, {42, 136}, {1<<63 + 5, 902}, {math.MaxUint64, 282},
	}
	for _, c := range cases {
		if got := ShardOf(c.key); got != c.want {
			t.Errorf("ShardOf(%d) = %d, want %d", c.key, got, c.want)
		}
	}
}

func TestKeyFromValue(t *testing.T) {
	ok := []struct {
		in   any
		want uint64
	}{
		{int64(42), 42}, {uint64(math.MaxUint64), math.MaxUint64}, {"123", 123}, {" +0123 ", 123},
		{[]byte("18446744073709551615"), math.MaxUint64}, {float64(1000), 1000}, {Decimal("42.000"), 42},
		{Decimal("-0.0"), 0}, {int8(7), 7}, {uint16(9), 9}, {"123.000", 123}, {[]byte(" 42.0"), 42},
	}
	for _, c := range ok {
		got, err := KeyFromValue(c.in)
		if err != nil || got != c.want {
			t.Errorf("KeyFromValue(%#v) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	bad := []any{nil, int64(-1), "-1", "18446744073709551616", "12abc", "1e3", "", " ", 1.5, math.NaN(),
		float64(1 << 60), Decimal("1.5"), Decimal("-3"), Decimal("."), struct{}{}, int32(-5), "1.5", "-2.0", "."}
	for _, v := range bad {
		_, err := KeyFromValue(v)
		var ke *KeyError
		if !errors.As(err, &ke) {
			t.Errorf("KeyFromValue(%#v) error = %v, want *KeyError", v, err)
		}
	}
}

func FuzzShardOf(f *testing.F) {
	for _, k := range []uint64{0, 1, 42, math.MaxUint64} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k uint64) {
		s := ShardOf(k)
		if s >= NumShards || s != ShardOf(k) {
			t.Fatalf("ShardOf(%d) = %d: out of range or unstable", k, s)
		}
		// The text form of the key must route identically (MySQL compares
		// '123' with a BIGINT column as 123).
		if got, err := KeyFromValue([]byte(uintText(k))); err != nil || got != k {
			t.Fatalf("text round trip of %d: %d, %v", k, got, err)
		}
	})
}

func uintText(k uint64) string {
	if k == 0 {
		return "0"
	}
	var b []byte
	for ; k > 0; k /= 10 {
		b = append([]byte{byte('0' + k%10)}, b...)
	}
	return string(b)
}

func TestPhysicalTableName(t *testing.T) {
	for _, c := range []struct {
		logical string
		index   int
		want    string
	}{{"conv_msg", 0, "conv_msg_0000"}, {"conv_msg", 441, "conv_msg_0441"}, {"im_inbox", 1023, "im_inbox_1023"}, {"x", 9999, "x_9999"}, {"x", 12345, "x_12345"}} {
		if got := PhysicalTableName(c.logical, c.index); got != c.want {
			t.Errorf("PhysicalTableName(%q, %d) = %q, want %q", c.logical, c.index, got, c.want)
		}
	}
}
