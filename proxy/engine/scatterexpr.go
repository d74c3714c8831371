package engine

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/pingcap/tidb/pkg/parser/charset"

	"github.com/convoy-im/convoy/internal/sqlq"
	"github.com/convoy-im/convoy/proxy/merge"
	"github.com/convoy-im/convoy/proxy/mysqlrow"
	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// Expressions over aggregates across shards (MAX(seq) - MIN(seq),
// SUM(x) / COUNT(*), COUNT(*) > 0; rewrite.ScatterExpr): the shards
// return the operands, the merge combines them as any aggregate, and a
// server of the default datasource evaluates each expression over the
// merged operands, typed as the shards returned them (CAST), so the value
// and the column's type are what MariaDB gives for the whole table.

// evalOverAggregates is the merge's EvalFunc for exprs: one SELECT over
// a derived table with a row per merged row, on the session's connection
// to the default datasource (its variables apply: div_precision_increment,
// sql_mode), in the client's protocol.
func (s *Session) evalOverAggregates(exprs []rewrite.ScatterExpr, binary bool) merge.EvalFunc {
	return func(fields []*mysql.Field, rows [][]mysql.FieldValue) (*mysql.Result, error) {
		var b strings.Builder
		b.WriteString("SELECT ")
		for i, x := range exprs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(x.Template + " AS " + sqlq.Ident(x.Name))
		}
		b.WriteString(" FROM (")
		empty := len(rows) == 0
		if empty {
			// No row: the columns' types alone, from a row of typed
			// placeholders (a NOT NULL column's is not NULL).
			rows = [][]mysql.FieldValue{make([]mysql.FieldValue, len(fields))}
			for i, f := range fields {
				rows[0][i] = mysql.NewFieldValue(mysql.FieldValueTypeNull, 0, nil)
				if f.Flag&mysql.NOT_NULL_FLAG != 0 {
					rows[0][i] = mysql.NewFieldValue(mysql.FieldValueTypeString, 0, placeholderValue(f))
				}
			}
		}
		for r, row := range rows {
			if r > 0 {
				b.WriteString(" UNION ALL ")
			}
			fmt.Fprintf(&b, "SELECT %d AS `__cvy_r`", r)
			for i, v := range row {
				lit, err := typedLiteral(fields[i], v)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(&b, ", %s AS `__cvy_x%d`", lit, i)
			}
		}
		b.WriteString(") AS `__cvy_t` ORDER BY `__cvy_r`")
		if empty {
			b.WriteString(" LIMIT 0")
		}
		sql := b.String()
		var res *mysql.Result
		err := s.withDefaultConn(func(c Conn) error {
			var err error
			if res, err = c.Exec(sql); err != nil || !binary || res == nil || res.Resultset == nil || mysqlrow.TextToBinary(res.Resultset) {
				return err
			}
			// A column without an exact binary form (FLOAT, DOUBLE): the
			// server's own binary rows.
			res, err = c.ExecPrepared(sql, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		return res, nil
	}
}

// placeholderValue is a valid value of f's type (its value unused).
func placeholderValue(f *mysql.Field) []byte {
	switch f.Type {
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP:
		return []byte("2000-01-01")
	case mysql.MYSQL_TYPE_TIME:
		return []byte("00:00:00")
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_TINY_BLOB,
		mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_BLOB:
		return []byte{}
	}
	return []byte("0")
}

// typedLiteral is v as SQL with the type of the column f it was merged
// in, and its nullability: CAST(value AS type), inside IF(TRUE, ..., NULL)
// when the column may be NULL (an aggregate over no row is), so an
// expression over it has the type and the nullability an expression over
// the aggregate has.
func typedLiteral(f *mysql.Field, v mysql.FieldValue) (string, error) {
	lit, err := castLiteral(f, v)
	if err != nil || f.Flag&mysql.NOT_NULL_FLAG != 0 {
		return lit, err
	}
	return "IF(TRUE, " + lit + ", NULL)", nil
}

// castLiteral is typedLiteral without its nullability.
func castLiteral(f *mysql.Field, v mysql.FieldValue) (string, error) {
	unsigned := f.Flag&mysql.UNSIGNED_FLAG != 0
	var typ string
	switch f.Type {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG,
		mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_YEAR:
		typ = "SIGNED"
		if unsigned {
			typ = "UNSIGNED"
		}
	case mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_DECIMAL:
		// The column length counts the digits, the point and the sign.
		scale := int(f.Decimal)
		prec := int(f.ColumnLength)
		if scale > 0 {
			prec--
		}
		if !unsigned {
			prec--
		}
		typ = fmt.Sprintf("DECIMAL(%d,%d)", min(max(prec, 1, scale), 65), min(scale, 38))
	case mysql.MYSQL_TYPE_FLOAT:
		typ = "FLOAT"
	case mysql.MYSQL_TYPE_DOUBLE:
		typ = "DOUBLE"
	case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE:
		typ = "DATE"
	case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP:
		typ = fmt.Sprintf("DATETIME(%d)", min(int(f.Decimal), 6))
	case mysql.MYSQL_TYPE_TIME:
		typ = fmt.Sprintf("TIME(%d)", min(int(f.Decimal), 6))
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING, mysql.MYSQL_TYPE_STRING, mysql.MYSQL_TYPE_TINY_BLOB,
		mysql.MYSQL_TYPE_MEDIUM_BLOB, mysql.MYSQL_TYPE_LONG_BLOB, mysql.MYSQL_TYPE_BLOB:
		if f.Charset == 63 {
			if v.Type == mysql.FieldValueTypeNull {
				return "CAST(NULL AS BINARY)", nil
			}
			return "X'" + hex.EncodeToString(v.AsString()) + "'", nil
		}
		coll, err := charset.GetCollationByID(int(f.Charset))
		if err != nil {
			return "", sqlerr.Errorf(sqlerr.NotSupported, "an expression over an aggregate of column %q (collation %d) cannot be computed across shards", f.Name, f.Charset)
		}
		if v.Type == mysql.FieldValueTypeNull {
			return fmt.Sprintf("CAST(NULL AS CHAR CHARACTER SET %s) COLLATE %s", coll.CharsetName, coll.Name), nil
		}
		return fmt.Sprintf("CAST(X'%s' AS CHAR CHARACTER SET %s) COLLATE %s", hex.EncodeToString(v.AsString()), coll.CharsetName, coll.Name), nil
	default:
		return "", sqlerr.Errorf(sqlerr.NotSupported, "an expression over an aggregate of column %q (type %d) cannot be computed across shards", f.Name, f.Type)
	}
	var val string
	switch v.Type {
	case mysql.FieldValueTypeNull:
		val = "NULL"
	case mysql.FieldValueTypeUnsigned:
		val = strconv.FormatUint(v.AsUint64(), 10)
	case mysql.FieldValueTypeSigned:
		val = strconv.FormatInt(v.AsInt64(), 10)
	case mysql.FieldValueTypeFloat:
		val = "'" + strconv.FormatFloat(v.AsFloat64(), 'g', -1, 64) + "'"
		if math.IsInf(v.AsFloat64(), 0) || math.IsNaN(v.AsFloat64()) {
			return "", sqlerr.Errorf(sqlerr.NotSupported, "an expression over a non-finite aggregate cannot be computed across shards")
		}
	default:
		lit, _ := rewrite.AppendLiteral(nil, string(v.AsString()))
		val = string(lit)
	}
	return "CAST(" + val + " AS " + typ + ")", nil
}
