package merge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// kind is how values of one result column compare.
type kind uint8

const (
	kSigned    kind = iota // integer types, signed
	kUnsigned              // integer types with UNSIGNED_FLAG, YEAR
	kFloat                 // FLOAT, DOUBLE
	kDecimal               // DECIMAL, NEWDECIMAL: exact, on the decimal text
	kTemporal              // DATE, DATETIME, TIMESTAMP
	kTime                  // TIME (signed, hours beyond 24)
	kBytes                 // binary strings (collation 63), BIT: bytewise, no padding
	kBinPad                // *_bin collations: bytewise, PAD SPACE
	kCI                    // every other collation: general_ci approximation, PAD SPACE
	kUnordered             // ENUM, SET, JSON, GEOMETRY, VECTOR: no ordering or grouping here
	kNull                  // MYSQL_TYPE_NULL: always NULL
)

// kindOf classifies a column from its metadata. Field.Charset holds the
// column's collation id.
func kindOf(f *mysql.Field) kind {
	switch f.Type {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG:
		if f.Flag&mysql.UNSIGNED_FLAG != 0 {
			return kUnsigned
		}
		return kSigned
	case mysql.MYSQL_TYPE_YEAR:
		return kUnsigned
	case mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
		return kFloat
	case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL:
		return kDecimal
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP:
		return kTemporal
	case mysql.MYSQL_TYPE_TIME:
		return kTime
	case mysql.MYSQL_TYPE_BIT:
		return kBytes
	case mysql.MYSQL_TYPE_NULL:
		return kNull
	case mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET, mysql.MYSQL_TYPE_JSON,
		mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_VECTOR:
		return kUnordered
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING,
		mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_BLOB:
		// ENUM and SET columns arrive as STRING with a flag; MySQL orders
		// them by their index in the definition, which the result does not
		// carry.
		if f.Flag&(mysql.ENUM_FLAG|mysql.SET_FLAG) != 0 {
			return kUnordered
		}
		return collationKind(f.Charset)
	}
	return kUnordered
}

// collationKind maps a collation id to a comparison. The ids are those of
// MySQL and MariaDB: binary (63), MariaDB's *_nopad_bin (1070, 1071, 1089,
// 1107) and MySQL's utf8mb4_0900_bin (309) compare bytes without padding;
// utf8mb4_bin (46), latin1_bin (47), ascii_bin (65), utf8mb3_bin (83) and
// big5_bin (84) compare bytes with PAD SPACE.
func collationKind(id uint16) kind {
	switch id {
	case 63, 1070, 1071, 1089, 1107, 309:
		return kBytes
	case 46, 47, 65, 83, 84:
		return kBinPad
	}
	return kCI
}

// key is one decoded comparison value. For numeric and temporal kinds n
// holds the value (int64 bits, uint64, float64 bits, packed date, signed
// microseconds); decimal and string kinds compare b, the payload.
type key struct {
	null bool
	n    uint64
	b    []byte
}

// makeKey decodes a cell for comparison, validating its text or binary
// form. Columns that cannot be ordered here (ENUM, JSON, ...) still get a
// bytewise key when only equality is needed (GROUP BY, DISTINCT).
func makeKey(k kind, f *mysql.Field, bin, order bool, c cell) (key, error) {
	if c.null || k == kNull {
		return key{null: true}, nil
	}
	if k == kUnordered && !order {
		return key{b: c.raw}, nil
	}
	switch k {
	case kSigned, kUnsigned:
		if bin {
			if k == kSigned {
				return key{n: uint64(binInt(c.raw))}, nil
			}
			return key{n: binUint(c.raw)}, nil
		}
		if k == kSigned {
			v, err := strconv.ParseInt(string(c.raw), 10, 64)
			if err != nil {
				return key{}, fmt.Errorf("%w: integer %q", ErrMalformed, c.raw)
			}
			return key{n: uint64(v)}, nil
		}
		v, err := strconv.ParseUint(string(c.raw), 10, 64)
		if err != nil {
			return key{}, fmt.Errorf("%w: unsigned integer %q", ErrMalformed, c.raw)
		}
		return key{n: v}, nil
	case kFloat:
		var v float64
		if bin {
			v = binFloat(c.raw)
		} else {
			var err error
			if v, err = strconv.ParseFloat(string(c.raw), 64); err != nil {
				return key{}, fmt.Errorf("%w: float %q", ErrMalformed, c.raw)
			}
		}
		if math.IsNaN(v) {
			return key{}, fmt.Errorf("%w: NaN", ErrMalformed)
		}
		if v == 0 {
			v = 0 // -0 groups with 0
		}
		return key{n: math.Float64bits(v)}, nil
	case kDecimal:
		if !validDecimal(c.raw) {
			return key{}, fmt.Errorf("%w: decimal %q", ErrMalformed, c.raw)
		}
		return key{b: c.raw}, nil
	case kTemporal:
		var t temporal
		var err error
		if bin {
			t, err = binTemporal(c.raw)
		} else {
			t, err = textTemporal(c.raw)
		}
		if err != nil {
			return key{}, err
		}
		return key{n: t.packed()}, nil
	case kTime:
		var us int64
		var err error
		if bin {
			us, err = binTime(c.raw)
		} else {
			us, err = textTime(c.raw)
		}
		if err != nil {
			return key{}, err
		}
		return key{n: uint64(us)}, nil
	case kBytes, kBinPad, kCI:
		return key{b: c.raw}, nil
	}
	return key{}, fmt.Errorf("%w: column %q of type %d cannot be ordered, grouped or compared across shards", ErrUnsupported, f.Name, f.Type)
}

// compareKeys orders two keys of one column; NULL sorts first (MySQL's
// rule for ASC; DESC reverses it, putting NULL last).
func compareKeys(k kind, a, b *key) int {
	switch {
	case a.null && b.null:
		return 0
	case a.null:
		return -1
	case b.null:
		return 1
	}
	switch k {
	case kSigned, kTime:
		return cmpOrdered(int64(a.n), int64(b.n))
	case kUnsigned, kTemporal:
		return cmpOrdered(a.n, b.n)
	case kFloat:
		return cmpOrdered(math.Float64frombits(a.n), math.Float64frombits(b.n))
	case kDecimal:
		return compareDecimal(a.b, b.b)
	case kBytes:
		return bytes.Compare(a.b, b.b)
	case kBinPad:
		return bytes.Compare(bytes.TrimRight(a.b, " "), bytes.TrimRight(b.b, " "))
	case kCI:
		return compareCI(a.b, b.b)
	}
	return 0
}

func cmpOrdered[T int64 | uint64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// appendNorm appends a canonical form of k: two keys of one column compare
// equal exactly when their canonical forms are equal. Used as a hash key
// for GROUP BY and DISTINCT.
func appendNorm(dst []byte, kd kind, k *key) []byte {
	if k.null {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	switch kd {
	case kDecimal:
		neg, ip, fp := splitDecimal(k.b)
		if len(ip) == 0 && len(fp) == 0 {
			neg = false
		}
		if neg {
			dst = append(dst, '-')
		}
		dst = binary.AppendUvarint(dst, uint64(len(ip)))
		dst = append(dst, ip...)
		dst = append(dst, '.')
		dst = binary.AppendUvarint(dst, uint64(len(fp)))
		return append(dst, fp...)
	case kBytes, kUnordered:
		dst = binary.AppendUvarint(dst, uint64(len(k.b)))
		return append(dst, k.b...)
	case kBinPad:
		b := bytes.TrimRight(k.b, " ")
		dst = binary.AppendUvarint(dst, uint64(len(b)))
		return append(dst, b...)
	case kCI:
		// Weights as runes, trailing spaces removed (PAD SPACE).
		at := len(dst)
		dst = append(dst, 0, 0, 0, 0)
		lastNonSpace := len(dst)
		for s := k.b; len(s) > 0; {
			r, size := utf8.DecodeRune(s)
			s = s[size:]
			w := ciWeight(r, size)
			dst = utf8.AppendRune(dst, w)
			if w != ' ' {
				lastNonSpace = len(dst)
			}
		}
		dst = dst[:lastNonSpace]
		binary.BigEndian.PutUint32(dst[at:], uint32(lastNonSpace-at-4))
		return dst
	}
	return binary.BigEndian.AppendUint64(dst, k.n)
}

// ciWeight is the utf8mb4_general_ci weight of a character: for the BMP
// its simple uppercase mapping except for the generated exceptions
// (accented letters weigh as their base letter: 'ä' = 'a', 'ß' = 's');
// every character outside the BMP weighs U+FFFD, as in MySQL. Invalid
// UTF-8 bytes weigh as U+FFFD too.
func ciWeight(r rune, _ int) rune {
	if r > 0xFFFF {
		return 0xFFFD
	}
	x := uint32(r) << 16
	i := sort.Search(len(generalCIExceptions), func(i int) bool { return generalCIExceptions[i] >= x })
	if i < len(generalCIExceptions) && generalCIExceptions[i]>>16 == uint32(r) {
		return rune(generalCIExceptions[i] & 0xFFFF)
	}
	return unicode.ToUpper(r)
}

// compareCI compares two strings character by character by ciWeight,
// padding the shorter one with spaces.
func compareCI(a, b []byte) int {
	for len(a) > 0 || len(b) > 0 {
		ra, rb := rune(' '), rune(' ')
		if len(a) > 0 {
			r, n := utf8.DecodeRune(a)
			ra, a = ciWeight(r, n), a[n:]
		}
		if len(b) > 0 {
			r, n := utf8.DecodeRune(b)
			rb, b = ciWeight(r, n), b[n:]
		}
		if ra != rb {
			if ra < rb {
				return -1
			}
			return 1
		}
	}
	return 0
}

// validDecimal accepts MySQL's decimal text: [-]digits[.digits].
func validDecimal(b []byte) bool {
	if len(b) > 0 && b[0] == '-' {
		b = b[1:]
	}
	digits, dot := 0, false
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot && digits > 0:
			dot, digits = true, 0
		default:
			return false
		}
	}
	return digits > 0
}

// splitDecimal returns the sign, the integer digits without leading zeros
// and the fraction digits without trailing zeros of a valid decimal.
func splitDecimal(b []byte) (neg bool, ip, fp []byte) {
	if b[0] == '-' {
		neg, b = true, b[1:]
	}
	ip = b
	if i := bytes.IndexByte(b, '.'); i >= 0 {
		ip, fp = b[:i], b[i+1:]
	}
	ip = bytes.TrimLeft(ip, "0")
	fp = bytes.TrimRight(fp, "0")
	return neg, ip, fp
}

// compareDecimal compares two valid decimal strings exactly.
func compareDecimal(a, b []byte) int {
	na, ia, fa := splitDecimal(a)
	nb, ib, fb := splitDecimal(b)
	za := len(ia) == 0 && len(fa) == 0
	zb := len(ib) == 0 && len(fb) == 0
	if za {
		na = false
	}
	if zb {
		nb = false
	}
	if na != nb {
		if na {
			return -1
		}
		return 1
	}
	c := 0
	switch {
	case len(ia) != len(ib):
		c = cmpOrdered(int64(len(ia)), int64(len(ib)))
	default:
		if c = bytes.Compare(ia, ib); c == 0 {
			c = bytes.Compare(fa, fb) // trailing zeros trimmed: lexical is numeric
		}
	}
	if na {
		return -c
	}
	return c
}
