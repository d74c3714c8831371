package merge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// exact is a decimal number: v / 10^scale.
type exact struct {
	v     big.Int
	scale int
}

var bigTen = big.NewInt(10)

func pow10(n int) *big.Int {
	return new(big.Int).Exp(bigTen, big.NewInt(int64(n)), nil)
}

// parseExact reads an integer or decimal text.
func parseExact(b []byte, into *exact) error {
	if !validDecimal(b) {
		return fmt.Errorf("%w: number %q", ErrMalformed, b)
	}
	into.scale = 0
	digits := b
	if i := bytes.IndexByte(b, '.'); i >= 0 {
		into.scale = len(b) - i - 1
		digits = append(append(make([]byte, 0, len(b)-1), b[:i]...), b[i+1:]...)
	}
	if _, ok := into.v.SetString(string(digits), 10); !ok {
		return fmt.Errorf("%w: number %q", ErrMalformed, b)
	}
	return nil
}

// add adds o into e, keeping the larger scale.
func (e *exact) add(o *exact) {
	switch {
	case o.scale > e.scale:
		e.v.Mul(&e.v, pow10(o.scale-e.scale))
		e.scale = o.scale
		e.v.Add(&e.v, &o.v)
	case o.scale < e.scale:
		e.v.Add(&e.v, new(big.Int).Mul(&o.v, pow10(e.scale-o.scale)))
	default:
		e.v.Add(&e.v, &o.v)
	}
}

// div returns e / n rounded half away from zero to scale digits, as
// MySQL's decimal division does.
func (e *exact) div(n int64, scale int) *exact {
	num := new(big.Int).Mul(&e.v, pow10(scale))
	den := new(big.Int).Mul(big.NewInt(n), pow10(e.scale))
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	r.Abs(r).Lsh(r, 1)
	if r.Cmp(new(big.Int).Abs(den)) >= 0 {
		if num.Sign()*den.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	out := &exact{scale: scale}
	out.v.Set(q)
	return out
}

// rescale rounds (half away from zero) or pads e to scale digits.
func (e *exact) rescale(scale int) *exact {
	if scale >= e.scale {
		out := &exact{scale: scale}
		out.v.Mul(&e.v, pow10(scale-e.scale))
		return out
	}
	return e.div(1, scale)
}

func (e *exact) float() float64 {
	f, _ := strconv.ParseFloat(string(e.text()), 64)
	return f
}

// text formats e with exactly e.scale fraction digits.
func (e *exact) text() []byte {
	neg := e.v.Sign() < 0
	digits := new(big.Int).Abs(&e.v).String()
	for len(digits) <= e.scale {
		digits = "0" + digits
	}
	var out []byte
	if neg {
		out = append(out, '-')
	}
	out = append(out, digits[:len(digits)-e.scale]...)
	if e.scale > 0 {
		out = append(out, '.')
		out = append(out, digits[len(digits)-e.scale:]...)
	}
	return out
}

// maxFixedDecimals is the largest Field.Decimal that means "this many
// fraction digits" for FLOAT/DOUBLE; larger values (MySQL 31, MariaDB 39)
// mean "not fixed".
const maxFixedDecimals = 30

// encodeExact encodes an exact number for a column of field f.
func encodeExact(f *mysql.Field, bin bool, e *exact) (cell, error) {
	switch f.Type {
	case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL:
		return cell{raw: e.text()}, nil
	case mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
		return encodeFloat(f, bin, e.float()), nil
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG,
		mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_YEAR:
		v := e.rescale(0)
		unsigned := f.Flag&mysql.UNSIGNED_FLAG != 0
		width := binWidth(f.Type)
		bits := 8 * width
		if f.Type == mysql.MYSQL_TYPE_INT24 {
			bits = 24
		}
		var lo, hi big.Int
		if unsigned {
			hi.Lsh(big.NewInt(1), uint(bits)).Sub(&hi, big.NewInt(1))
		} else {
			hi.Lsh(big.NewInt(1), uint(bits-1)).Sub(&hi, big.NewInt(1))
			lo.Lsh(big.NewInt(1), uint(bits-1)).Neg(&lo)
		}
		if v.v.Cmp(&lo) < 0 || v.v.Cmp(&hi) > 0 {
			return cell{}, fmt.Errorf("%w: merged value %s is out of range for column %q", ErrUnsupported, v.v.String(), f.Name)
		}
		if !bin {
			return cell{raw: []byte(v.v.String())}, nil
		}
		var u uint64
		if unsigned {
			u = v.v.Uint64()
		} else {
			u = uint64(v.v.Int64())
		}
		b := binary.LittleEndian.AppendUint64(nil, u)
		return cell{raw: b[:width]}, nil
	}
	return cell{}, fmt.Errorf("%w: cannot store a merged number in column %q of type %d", ErrUnsupported, f.Name, f.Type)
}

// encodeFloat encodes a FLOAT/DOUBLE value for a column of field f.
func encodeFloat(f *mysql.Field, bin bool, v float64) cell {
	if bin {
		if f.Type == mysql.MYSQL_TYPE_FLOAT {
			return cell{raw: binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(v)))}
		}
		return cell{raw: binary.LittleEndian.AppendUint64(nil, math.Float64bits(v))}
	}
	if f.Decimal <= maxFixedDecimals {
		return cell{raw: strconv.AppendFloat(nil, v, 'f', int(f.Decimal), 64)}
	}
	bits := 64
	if f.Type == mysql.MYSQL_TYPE_FLOAT {
		bits = 32
	}
	return cell{raw: formatDouble(v, bits)}
}

// formatDouble approximates MySQL/MariaDB's text form of a DOUBLE without
// fixed decimals: the shortest digits that round-trip, positional notation
// for decimal exponents in [-15, 15), otherwise 1.5e20 / 1.5e-20 (no '+').
func formatDouble(v float64, bits int) []byte {
	if v == 0 {
		return []byte("0")
	}
	sci := strconv.FormatFloat(v, 'e', -1, bits)
	i := bytes.IndexByte([]byte(sci), 'e')
	exp, _ := strconv.Atoi(sci[i+1:])
	if exp >= -15 && exp < 15 {
		return strconv.AppendFloat(nil, v, 'f', -1, bits)
	}
	out := []byte(sci[:i+1])
	return strconv.AppendInt(out, int64(exp), 10)
}
