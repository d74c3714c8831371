package merge

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// cell is one column of one row as it sits in the packet: null, or the value
// payload without its length prefix. In the text protocol that is the
// column's text; in the binary protocol the fixed-width little-endian bytes
// of numbers, the string of lenenc types, or the packed date/time bytes.
// raw aliases the row packet (or a computed buffer); it is never modified.
type cell struct {
	null bool
	raw  []byte
}

// binWidth is the fixed payload width of a binary-protocol column type, 0
// for types carried as a length-prefixed payload, -1 for MYSQL_TYPE_NULL
// (never carries bytes) and -2 for types go-mysql's client cannot parse
// either.
func binWidth(t byte) int {
	switch t {
	case mysql.MYSQL_TYPE_TINY:
		return 1
	case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
		return 2
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_FLOAT:
		return 4
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE:
		return 8
	case mysql.MYSQL_TYPE_NULL:
		return -1
	case mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BIT,
		mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET, mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB,
		mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING,
		mysql.MYSQL_TYPE_VECTOR, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_JSON,
		mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE, mysql.MYSQL_TYPE_TIMESTAMP,
		mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIME:
		return 0
	}
	return -2
}

// readLenEnc reads a length-encoded integer with bounds checks (go-mysql's
// LengthEncodedInt indexes past short input).
func readLenEnc(b []byte) (n uint64, null bool, size int, ok bool) {
	if len(b) == 0 {
		return 0, false, 0, false
	}
	switch b[0] {
	case 0xfb:
		return 0, true, 1, true
	case 0xfc:
		if len(b) < 3 {
			return 0, false, 0, false
		}
		return uint64(b[1]) | uint64(b[2])<<8, false, 3, true
	case 0xfd:
		if len(b) < 4 {
			return 0, false, 0, false
		}
		return uint64(b[1]) | uint64(b[2])<<8 | uint64(b[3])<<16, false, 4, true
	case 0xfe:
		if len(b) < 9 {
			return 0, false, 0, false
		}
		return binary.LittleEndian.Uint64(b[1:9]), false, 9, true
	case 0xff:
		return 0, false, 0, false
	}
	return uint64(b[0]), false, 1, true
}

// readLenEncString reads a length-prefixed payload.
func readLenEncString(b []byte) (s []byte, null bool, size int, ok bool) {
	n, null, size, ok := readLenEnc(b)
	if !ok || null {
		return nil, null, size, ok
	}
	if n > uint64(len(b)-size) {
		return nil, false, 0, false
	}
	end := size + int(n)
	return b[size:end:end], false, end, true
}

func nullBitmapLen(ncol int) int { return (ncol + 7 + 2) >> 3 }

// decodeRow splits one row packet into cells. It validates every length
// and requires the packet to be consumed exactly, so malformed input is an
// error, never a panic.
func decodeRow(row []byte, fields []*mysql.Field, bin bool, dst []cell) error {
	if bin {
		return decodeBinary(row, fields, dst)
	}
	pos := 0
	for i := range fields {
		s, null, n, ok := readLenEncString(row[pos:])
		if !ok {
			return fmt.Errorf("%w: text row: column %d truncated", ErrMalformed, i)
		}
		dst[i] = cell{null: null, raw: s}
		pos += n
	}
	if pos != len(row) {
		return fmt.Errorf("%w: text row has %d trailing bytes", ErrMalformed, len(row)-pos)
	}
	return nil
}

func decodeBinary(row []byte, fields []*mysql.Field, dst []cell) error {
	bm := nullBitmapLen(len(fields))
	if len(row) < 1+bm || row[0] != 0 {
		return fmt.Errorf("%w: binary row header", ErrMalformed)
	}
	bitmap := row[1 : 1+bm]
	pos := 1 + bm
	for i, f := range fields {
		if bitmap[(i+2)>>3]&(1<<((i+2)&7)) != 0 {
			dst[i] = cell{null: true}
			continue
		}
		switch w := binWidth(f.Type); {
		case w > 0:
			if len(row)-pos < w {
				return fmt.Errorf("%w: binary row: column %d truncated", ErrMalformed, i)
			}
			dst[i] = cell{raw: row[pos : pos+w : pos+w]}
			pos += w
		case w == 0:
			s, null, n, ok := readLenEncString(row[pos:])
			if !ok || null {
				return fmt.Errorf("%w: binary row: column %d truncated", ErrMalformed, i)
			}
			dst[i] = cell{raw: s}
			pos += n
		case w == -1:
			dst[i] = cell{null: true}
		default:
			return fmt.Errorf("%w: binary row: column %d has unknown type %d", ErrMalformed, i, f.Type)
		}
	}
	if pos != len(row) {
		return fmt.Errorf("%w: binary row has %d trailing bytes", ErrMalformed, len(row)-pos)
	}
	return nil
}

// appendRow encodes cells as one row packet in the given protocol. Cells
// must be valid for their field types (they come from decodeRow or from
// the encoders below).
func appendRow(dst []byte, fields []*mysql.Field, cells []cell, bin bool) []byte {
	if !bin {
		for _, c := range cells {
			if c.null {
				dst = append(dst, 0xfb)
				continue
			}
			dst = mysql.AppendLengthEncodedInteger(dst, uint64(len(c.raw)))
			dst = append(dst, c.raw...)
		}
		return dst
	}
	dst = append(dst, 0)
	bmAt := len(dst)
	for range nullBitmapLen(len(cells)) {
		dst = append(dst, 0)
	}
	for i, c := range cells {
		if c.null || fields[i].Type == mysql.MYSQL_TYPE_NULL {
			dst[bmAt+(i+2)>>3] |= 1 << ((i + 2) & 7)
			continue
		}
		if binWidth(fields[i].Type) == 0 {
			dst = mysql.AppendLengthEncodedInteger(dst, uint64(len(c.raw)))
		}
		dst = append(dst, c.raw...)
	}
	return dst
}

// fieldValue converts a cell the way go-mysql's RowData.Parse does, so the
// merged Result's Values look like the ones the client produced.
func fieldValue(f *mysql.Field, bin bool, c cell) (mysql.FieldValue, error) {
	if c.null {
		return mysql.NewFieldValue(mysql.FieldValueTypeNull, 0, nil), nil
	}
	unsigned := f.Flag&mysql.UNSIGNED_FLAG != 0
	if !bin {
		switch f.Type {
		case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24,
			mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_YEAR:
			if unsigned {
				u, err := strconv.ParseUint(string(c.raw), 10, 64)
				if err != nil {
					return mysql.FieldValue{}, fmt.Errorf("%w: %v", ErrMalformed, err)
				}
				return mysql.NewFieldValue(mysql.FieldValueTypeUnsigned, u, nil), nil
			}
			v, err := strconv.ParseInt(string(c.raw), 10, 64)
			if err != nil {
				return mysql.FieldValue{}, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
			return mysql.NewFieldValue(mysql.FieldValueTypeSigned, uint64(v), nil), nil
		case mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
			v, err := strconv.ParseFloat(string(c.raw), 64)
			if err != nil {
				return mysql.FieldValue{}, fmt.Errorf("%w: %v", ErrMalformed, err)
			}
			return mysql.NewFieldValue(mysql.FieldValueTypeFloat, math.Float64bits(v), nil), nil
		}
		return mysql.NewFieldValue(mysql.FieldValueTypeString, 0, c.raw), nil
	}
	switch f.Type {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR, mysql.MYSQL_TYPE_INT24,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG:
		if unsigned {
			return mysql.NewFieldValue(mysql.FieldValueTypeUnsigned, binUint(c.raw), nil), nil
		}
		return mysql.NewFieldValue(mysql.FieldValueTypeSigned, uint64(binInt(c.raw)), nil), nil
	case mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
		return mysql.NewFieldValue(mysql.FieldValueTypeFloat, math.Float64bits(binFloat(c.raw)), nil), nil
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_DATETIME:
		t, err := binTemporal(c.raw)
		if err != nil {
			return mysql.FieldValue{}, err
		}
		return mysql.NewFieldValue(mysql.FieldValueTypeString, 0, t.format(f.Type, len(c.raw))), nil
	case mysql.MYSQL_TYPE_TIME:
		us, err := binTime(c.raw)
		if err != nil {
			return mysql.FieldValue{}, err
		}
		return mysql.NewFieldValue(mysql.FieldValueTypeString, 0, formatTime(us, len(c.raw) == 12)), nil
	}
	return mysql.NewFieldValue(mysql.FieldValueTypeString, 0, c.raw), nil
}

// binUint / binInt / binFloat read fixed-width little-endian payloads of
// width 1, 2, 4 or 8 (guaranteed by decodeBinary).
func binUint(b []byte) uint64 {
	var u uint64
	for i := len(b) - 1; i >= 0; i-- {
		u = u<<8 | uint64(b[i])
	}
	return u
}

func binInt(b []byte) int64 {
	u := binUint(b)
	shift := 64 - 8*uint(len(b))
	return int64(u<<shift) >> shift
}

func binFloat(b []byte) float64 {
	if len(b) == 4 {
		return float64(math.Float32frombits(uint32(binUint(b))))
	}
	return math.Float64frombits(binUint(b))
}

// temporal is a DATE / DATETIME / TIMESTAMP value; packed() orders like
// the value.
type temporal struct {
	year, month, day, hour, min, sec, micro uint64
}

func (t temporal) packed() uint64 {
	return ((((((t.year*13+t.month)*32+t.day)*24+t.hour)*60+t.min)*60+t.sec)*1000000 + t.micro)
}

// format renders the value like go-mysql's FormatBinaryDate/DateTime.
func (t temporal) format(typ byte, n int) []byte {
	if typ == mysql.MYSQL_TYPE_DATE || typ == mysql.MYSQL_TYPE_NEWDATE {
		return fmt.Appendf(nil, "%04d-%02d-%02d", t.year, t.month, t.day)
	}
	if n == 11 {
		return fmt.Appendf(nil, "%04d-%02d-%02d %02d:%02d:%02d.%06d", t.year, t.month, t.day, t.hour, t.min, t.sec, t.micro)
	}
	return fmt.Appendf(nil, "%04d-%02d-%02d %02d:%02d:%02d", t.year, t.month, t.day, t.hour, t.min, t.sec)
}

func binTemporal(b []byte) (temporal, error) {
	var t temporal
	switch len(b) {
	case 0:
		return t, nil
	case 4, 7, 11:
	default:
		return t, fmt.Errorf("%w: binary date/time of %d bytes", ErrMalformed, len(b))
	}
	t.year, t.month, t.day = uint64(binary.LittleEndian.Uint16(b)), uint64(b[2]), uint64(b[3])
	if len(b) >= 7 {
		t.hour, t.min, t.sec = uint64(b[4]), uint64(b[5]), uint64(b[6])
	}
	if len(b) == 11 {
		t.micro = uint64(binary.LittleEndian.Uint32(b[7:]))
	}
	if t.month > 12 || t.day > 31 || t.hour > 23 || t.min > 59 || t.sec > 59 || t.micro > 999999 {
		return t, fmt.Errorf("%w: binary date/time out of range", ErrMalformed)
	}
	return t, nil
}

// textTemporal parses 'YYYY-MM-DD[ hh:mm:ss[.f...]]'.
func textTemporal(b []byte) (temporal, error) {
	var t temporal
	bad := fmt.Errorf("%w: date/time %q", ErrMalformed, b)
	num := func(s []byte) (uint64, bool) {
		var v uint64
		if len(s) == 0 {
			return 0, false
		}
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + uint64(c-'0')
		}
		return v, true
	}
	if len(b) < 10 || b[4] != '-' || b[7] != '-' {
		return t, bad
	}
	var ok [3]bool
	t.year, ok[0] = num(b[0:4])
	t.month, ok[1] = num(b[5:7])
	t.day, ok[2] = num(b[8:10])
	if !ok[0] || !ok[1] || !ok[2] {
		return t, bad
	}
	if len(b) == 10 {
		return t, nil
	}
	if len(b) < 19 || b[10] != ' ' || b[13] != ':' || b[16] != ':' {
		return t, bad
	}
	t.hour, ok[0] = num(b[11:13])
	t.min, ok[1] = num(b[14:16])
	t.sec, ok[2] = num(b[17:19])
	if !ok[0] || !ok[1] || !ok[2] {
		return t, bad
	}
	if len(b) > 19 {
		frac := b[20:]
		if b[19] != '.' || len(frac) == 0 || len(frac) > 6 {
			return t, bad
		}
		f, okf := num(frac)
		if !okf {
			return t, bad
		}
		for i := len(frac); i < 6; i++ {
			f *= 10
		}
		t.micro = f
	}
	if t.month > 12 || t.day > 31 || t.hour > 23 || t.min > 59 || t.sec > 59 {
		return t, bad
	}
	return t, nil
}

// binTime decodes a binary TIME into signed microseconds.
func binTime(b []byte) (int64, error) {
	switch len(b) {
	case 0:
		return 0, nil
	case 8, 12:
	default:
		return 0, fmt.Errorf("%w: binary TIME of %d bytes", ErrMalformed, len(b))
	}
	days := int64(binary.LittleEndian.Uint32(b[1:5]))
	h, m, s := int64(b[5]), int64(b[6]), int64(b[7])
	var us int64
	if len(b) == 12 {
		us = int64(binary.LittleEndian.Uint32(b[8:12]))
	}
	if b[0] > 1 || days > 34 || h > 23 || m > 59 || s > 59 || us > 999999 {
		return 0, fmt.Errorf("%w: binary TIME out of range", ErrMalformed)
	}
	v := (((days*24+h)*60+m)*60+s)*1000000 + us
	if b[0] == 1 {
		v = -v
	}
	return v, nil
}

// textTime parses '[-]h...h:mm:ss[.f...]' into signed microseconds.
func textTime(b []byte) (int64, error) {
	bad := fmt.Errorf("%w: TIME %q", ErrMalformed, b)
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	var parts [4]int64
	idx, digits, fracDigits := 0, 0, 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			if digits >= 9 {
				return 0, bad
			}
			parts[idx] = parts[idx]*10 + int64(c-'0')
			digits++
			if idx == 3 {
				fracDigits++
			}
		case c == ':' && idx < 2 && digits > 0:
			idx, digits = idx+1, 0
		case c == '.' && idx == 2 && digits > 0:
			idx, digits = 3, 0
		default:
			return 0, bad
		}
	}
	if idx < 2 || digits == 0 || fracDigits > 6 || parts[1] > 59 || parts[2] > 59 {
		return 0, bad
	}
	for i := fracDigits; i < 6; i++ {
		parts[3] *= 10
	}
	v := ((parts[0]*60+parts[1])*60+parts[2])*1000000 + parts[3]
	if neg {
		v = -v
	}
	return v, nil
}

// formatTime renders microseconds like go-mysql's FormatBinaryTime.
func formatTime(us int64, frac bool) []byte {
	var out []byte
	if us < 0 {
		out = append(out, '-')
		us = -us
	}
	s := us / 1000000
	out = fmt.Appendf(out, "%02d:%02d:%02d", s/3600, s/60%60, s%60)
	if frac {
		out = fmt.Appendf(out, ".%06d", us%1000000)
	}
	return out
}
