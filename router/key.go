package router

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// KeyError explains why a value cannot be used as a shard key. Keys are
// BIGINT UNSIGNED; anything MySQL would not compare equal to exactly one
// such integer is refused rather than routed by a guess.
type KeyError struct {
	Value  string // rendering of the offending value, truncated
	Reason string
}

func (e *KeyError) Error() string {
	if e.Value == "" {
		return "shard key " + e.Reason
	}
	return fmt.Sprintf("shard key %s %s", e.Value, e.Reason)
}

// Decimal is the exact text of a DECIMAL literal or parameter (e.g. "42.000").
// It is a distinct type so an exact decimal is never rounded through float64.
type Decimal string

func keyErr(v any, reason string) error {
	s := fmt.Sprint(v)
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return &KeyError{Value: s, Reason: reason}
}

// maxExactFloat is 2^53: above it a float64 no longer names one integer.
const maxExactFloat = 1 << 53

// KeyFromValue converts a literal or bound parameter to a shard key.
// Accepted: integers >= 0 of any Go integer type, integral floats below 2^53,
// decimals with an all-zero fraction, and strings / bytes that are a decimal
// integer (optional surrounding spaces, optional '+', leading zeros), which is
// how MySQL compares a string with a BIGINT column. Everything else (NULL,
// negatives, overflow, fractions, '12abc', '1e3') is a *KeyError.
func KeyFromValue(v any) (uint64, error) {
	switch x := v.(type) {
	case nil:
		return 0, &KeyError{Reason: "is NULL"}
	case uint64:
		return x, nil
	case uint32:
		return uint64(x), nil
	case uint16:
		return uint64(x), nil
	case uint8:
		return uint64(x), nil
	case uint:
		return uint64(x), nil
	case int64:
		return fromSigned(x)
	case int32:
		return fromSigned(int64(x))
	case int16:
		return fromSigned(int64(x))
	case int8:
		return fromSigned(int64(x))
	case int:
		return fromSigned(int64(x))
	case float32:
		return fromFloat(float64(x))
	case float64:
		return fromFloat(x)
	case Decimal:
		return fromDecimalText(string(x))
	case string:
		return fromText(x)
	case []byte:
		return fromText(string(x))
	default:
		return 0, keyErr(v, fmt.Sprintf("has unsupported type %T", v))
	}
}

func fromSigned(x int64) (uint64, error) {
	if x < 0 {
		return 0, keyErr(x, "is negative; keys are BIGINT UNSIGNED")
	}
	return uint64(x), nil
}

func fromFloat(f float64) (uint64, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return 0, keyErr(f, "is not a number")
	case f < 0:
		return 0, keyErr(f, "is negative; keys are BIGINT UNSIGNED")
	case f != math.Trunc(f):
		return 0, keyErr(f, "is not an integer")
	case f >= maxExactFloat:
		return 0, keyErr(f, "is a float too large to name one integer; send it as an integer")
	}
	return uint64(f), nil
}

// fromText reads a string the way MySQL compares it with a BIGINT column:
// '123', ' 0123', '123.000' all mean 123.
func fromText(s string) (uint64, error) {
	if strings.Contains(s, ".") {
		return fromDecimalText(s)
	}
	return fromIntegerText(s)
}

func fromIntegerText(s string) (uint64, error) {
	t := strings.Trim(s, " ")
	t = strings.TrimPrefix(t, "+")
	if t == "" {
		return 0, keyErr(strconv.Quote(s), "is not an integer")
	}
	if t[0] == '-' {
		return 0, keyErr(strconv.Quote(s), "is negative; keys are BIGINT UNSIGNED")
	}
	for i := 0; i < len(t); i++ {
		if t[i] < '0' || t[i] > '9' {
			return 0, keyErr(strconv.Quote(s), "is not an integer")
		}
	}
	u, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, keyErr(strconv.Quote(s), "overflows BIGINT UNSIGNED")
	}
	return u, nil
}

func fromDecimalText(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	if i := strings.IndexByte(t, '.'); i >= 0 {
		if strings.Trim(t[i+1:], "0") != "" {
			return 0, keyErr(s, "is not an integer")
		}
		t = t[:i]
	}
	if t == "" || t == "-" || t == "+" {
		return 0, keyErr(s, "is not an integer")
	}
	if strings.HasPrefix(t, "-") {
		if strings.Trim(t[1:], "0") == "" {
			return 0, nil // -0.0 is zero
		}
		return 0, keyErr(s, "is negative; keys are BIGINT UNSIGNED")
	}
	u, err := fromIntegerText(t)
	if err != nil {
		return 0, keyErr(s, err.(*KeyError).Reason)
	}
	return u, nil
}
