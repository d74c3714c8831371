package mysqlrow

import (
	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// TextRows splits the rows of a text-protocol result into their values
// (nil: NULL).
func TextRows(r *mysql.Result) ([][][]byte, error) {
	if r == nil || r.Resultset == nil {
		return nil, nil
	}
	out := make([][][]byte, len(r.RowDatas))
	for i, row := range r.RowDatas {
		vals := make([][]byte, 0, len(r.Fields))
		for pos := 0; pos < len(row); {
			if row[pos] == 0xfb {
				vals = append(vals, nil)
				pos++
				continue
			}
			l, isNull, k := mysql.LengthEncodedInt(row[pos:])
			if isNull || k == 0 || uint64(len(row)-pos-k) < l {
				return nil, sqlerr.Errorf(sqlerr.Internal, "malformed row from the server")
			}
			vals = append(vals, row[pos+k:pos+k+int(l)])
			pos += k + int(l)
		}
		if len(vals) != len(r.Fields) {
			return nil, sqlerr.Errorf(sqlerr.Internal, "malformed row from the server: %d values for %d columns", len(vals), len(r.Fields))
		}
		out[i] = vals
	}
	return out, nil
}

// TextRow encodes values (nil: NULL) as a text-protocol row.
func TextRow(vals [][]byte) mysql.RowData {
	var b []byte
	for _, v := range vals {
		if v == nil {
			b = append(b, 0xfb)
			continue
		}
		b = mysql.AppendLengthEncodedInteger(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}
