package mysqlrow

import (
	"encoding/binary"
	"strconv"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TextToBinary rewrites the rows of a text-protocol result set as
// binary-protocol rows (what a COM_STMT_EXECUTE client reads), byte for byte
// what MariaDB would have sent for the same values. It reports false, and
// leaves rs alone, when a column has no exact conversion: FLOAT and DOUBLE
// (the text form is rounded) and types it does not know.
func TextToBinary(rs *mysql.Resultset) bool {
	for _, f := range rs.Fields {
		if !Convertible(f.Type) {
			return false
		}
	}
	n := len(rs.Fields)
	nullBytes := (n + 7 + 2) / 8
	out := make([]mysql.RowData, len(rs.RowDatas))
	for r, row := range rs.RowDatas {
		b := make([]byte, 1+nullBytes, 1+nullBytes+len(row)+4*n)
		pos := 0
		for i, f := range rs.Fields {
			if pos >= len(row) {
				return false
			}
			if row[pos] == 0xfb { // NULL
				b[1+(i+2)/8] |= 1 << ((i + 2) % 8)
				pos++
				continue
			}
			l, isNull, k := mysql.LengthEncodedInt(row[pos:])
			if isNull || k == 0 || uint64(len(row)-pos-k) < l {
				return false
			}
			v := row[pos+k : pos+k+int(l)]
			var ok bool
			if b, ok = AppendBinary(b, f, v); !ok {
				return false
			}
			pos += k + int(l)
		}
		out[r] = b
	}
	rs.RowDatas = out
	rs.Values = nil // text-decoded values no longer match the rows
	return true
}

// Convertible reports a column type whose text values have an exact
// binary form (not FLOAT / DOUBLE, whose text is rounded).
func Convertible(tp byte) bool {
	switch tp {
	case mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE:
		return false
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR, mysql.MYSQL_TYPE_INT24,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_NULL,
		mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIME,
		mysql.MYSQL_TYPE_DECIMAL, mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BIT,
		mysql.MYSQL_TYPE_ENUM, mysql.MYSQL_TYPE_SET, mysql.MYSQL_TYPE_TINY_BLOB, mysql.MYSQL_TYPE_MEDIUM_BLOB,
		mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING,
		mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_JSON:
		return true
	}
	return false
}

// AppendBinary appends one non-NULL value v (text form) of field f.
func AppendBinary(b []byte, f *mysql.Field, v []byte) ([]byte, bool) {
	unsigned := f.Flag&mysql.UNSIGNED_FLAG != 0
	switch f.Type {
	case mysql.MYSQL_TYPE_TINY:
		return appendInt(b, v, unsigned, 1)
	case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
		return appendInt(b, v, unsigned, 2)
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG:
		return appendInt(b, v, unsigned, 4)
	case mysql.MYSQL_TYPE_LONGLONG:
		return appendInt(b, v, unsigned, 8)
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP:
		return appendDatetimeText(b, v)
	case mysql.MYSQL_TYPE_TIME:
		return appendTime(b, v)
	case mysql.MYSQL_TYPE_NULL:
		return b, false // a NULL-typed column holds only NULLs
	}
	b = mysql.AppendLengthEncodedInteger(b, uint64(len(v)))
	return append(b, v...), true
}

func appendInt(b, v []byte, unsigned bool, size int) ([]byte, bool) {
	var u uint64
	if unsigned {
		x, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return b, false
		}
		u = x
	} else {
		x, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return b, false
		}
		u = uint64(x)
	}
	for i := range size {
		b = append(b, byte(u>>(8*i)))
	}
	return b, true
}

// digits parses v[from:from+n] as a decimal number.
func digits(v []byte, from, n int) (int, bool) {
	if from+n > len(v) {
		return 0, false
	}
	x := 0
	for _, c := range v[from : from+n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		x = x*10 + int(c-'0')
	}
	return x, true
}

// fraction parses an optional ".ddd" at v[at:] as microseconds.
func fraction(v []byte, at int) (int, bool) {
	if at == len(v) {
		return 0, true
	}
	if v[at] != '.' || len(v)-at-1 > 6 || len(v)-at-1 == 0 {
		return 0, false
	}
	us, ok := digits(v, at+1, len(v)-at-1)
	for range 6 - (len(v) - at - 1) {
		us *= 10
	}
	return us, ok
}

// appendDatetimeText converts "YYYY-MM-DD[ HH:MM:SS[.ffffff]]".
func appendDatetimeText(b, v []byte) ([]byte, bool) {
	y, ok1 := digits(v, 0, 4)
	mo, ok2 := digits(v, 5, 2)
	d, ok3 := digits(v, 8, 2)
	if !ok1 || !ok2 || !ok3 || v[4] != '-' || v[7] != '-' {
		return b, false
	}
	var h, mi, s, us int
	if len(v) > 10 {
		var ok4, ok5, ok6, ok7 bool
		h, ok4 = digits(v, 11, 2)
		mi, ok5 = digits(v, 14, 2)
		s, ok6 = digits(v, 17, 2)
		us, ok7 = fraction(v, 19)
		if !ok4 || !ok5 || !ok6 || !ok7 || v[10] != ' ' || v[13] != ':' || v[16] != ':' {
			return b, false
		}
	}
	return AppendBinaryDatetime(b, y, mo, d, h, mi, s, us), true
}

// AppendBinaryDatetime encodes a DATE / DATETIME / TIMESTAMP as short as its
// value allows, as MariaDB's Protocol_binary::store does: 11 bytes with
// microseconds, 7 with a time of day, 4 for a date at midnight, 0 for the
// zero date.
func AppendBinaryDatetime(b []byte, y, mo, d, h, mi, s, us int) []byte {
	var l byte
	switch {
	case us != 0:
		l = 11
	case h != 0 || mi != 0 || s != 0:
		l = 7
	case y != 0 || mo != 0 || d != 0:
		l = 4
	}
	b = append(b, l)
	if l >= 4 {
		b = binary.LittleEndian.AppendUint16(b, uint16(y))
		b = append(b, byte(mo), byte(d))
	}
	if l >= 7 {
		b = append(b, byte(h), byte(mi), byte(s))
	}
	if l == 11 {
		b = binary.LittleEndian.AppendUint32(b, uint32(us))
	}
	return b
}

// appendTime: "[-]H+:MM:SS[.ffffff]" -> length 0, 8 or 12.
func appendTime(b, v []byte) ([]byte, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	colon := 0
	for colon < len(v) && v[colon] != ':' {
		colon++
	}
	hours, ok1 := digits(v, 0, colon)
	mi, ok2 := digits(v, colon+1, 2)
	s, ok3 := digits(v, colon+4, 2)
	if colon == 0 || !ok1 || !ok2 || !ok3 || v[colon+3] != ':' {
		return b, false
	}
	us, ok := fraction(v, colon+6)
	if !ok {
		return b, false
	}
	days, h := hours/24, hours%24
	var l byte
	switch {
	case us != 0:
		l = 12
	case days != 0 || h != 0 || mi != 0 || s != 0:
		l = 8
	}
	b = append(b, l)
	if l >= 8 {
		sign := byte(0)
		if neg {
			sign = 1
		}
		b = append(b, sign)
		b = binary.LittleEndian.AppendUint32(b, uint32(days))
		b = append(b, byte(h), byte(mi), byte(s))
	}
	if l == 12 {
		b = binary.LittleEndian.AppendUint32(b, uint32(us))
	}
	return b, true
}
