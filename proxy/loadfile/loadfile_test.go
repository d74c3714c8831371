package loadfile

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// row is a row as the tests write it: "\\N" for NULL, "<missing>" for a
// field the line lacked.
type row []string

func readAll(t testing.TB, data string, f Format, n int, skip uint64) (rows []row, cuts []bool) {
	t.Helper()
	r := NewReader(strings.NewReader(data), f)
	r.SkipLines(skip)
	for r.Next(n) {
		var out row
		for _, fl := range r.Row() {
			if fl.Null {
				out = append(out, `\N`)
			} else {
				out = append(out, string(fl.Value))
			}
		}
		for range r.Missing() {
			out = append(out, "<missing>")
		}
		rows = append(rows, out)
		cuts = append(cuts, r.Cut())
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return rows, cuts
}

func csv() Format {
	return Format{FieldTerm: ",", Enclosed: '"', Escape: '\\', LineTerm: "\n"}
}

func TestReader(t *testing.T) {
	for _, c := range []struct {
		name string
		data string
		f    Format
		n    int
		skip uint64
		want []row
		cuts []bool
	}{
		{"tabs", "1\ta\t10\n2\tb\tx\n", DefaultFormat(), 3, 0,
			[]row{{"1", "a", "10"}, {"2", "b", "x"}}, []bool{false, false}},
		{"header skipped, short and long lines", "h1\th2\th3\n3\td\n4\te\t40\t99\n5\t\\N\t\n", DefaultFormat(), 3, 1,
			[]row{{"3", "d", "<missing>"}, {"4", "e", "40"}, {"5", `\N`, ""}}, []bool{false, true, false}},
		{"escapes", "a\\tb\\n\\\\\\0\\Z\\q\tx\n", DefaultFormat(), 2, 0,
			[]row{{"a\tb\n\\\x00\x1aq", "x"}}, []bool{false}},
		{"escaped terminators are data", "a\\\tb\\\nc\td\n", DefaultFormat(), 2, 0,
			[]row{{"a\tb\nc", "d"}}, []bool{false}},
		{"csv enclosures and NULL words", "1,\"NULL\",7\n2,NULL,8\n4,\\N,\"\\N\"\n5,\"x\"\"y\",\"\"\n6,\"a\"b\",9\n", csv(), 3, 0,
			[]row{{"1", "NULL", "7"}, {"2", `\N`, "8"}, {"4", `\N`, `\N`}, {"5", `x"y`, ""}, {"6", `a"b`, "9"}}, []bool{false, false, false, false, false}},
		{"terminators inside an enclosure", "\"a,b\nc\",d\n", csv(), 2, 0,
			[]row{{"a,b\nc", "d"}}, []bool{false}},
		{"an enclosure that never closes keeps its quote", "\"abc\n", csv(), 1, 0,
			[]row{{"\"abc\n"}}, []bool{false}},
		{"escape equal to the enclosure", "\"a\"\"b\",\"c\\n\"\n", Format{FieldTerm: ",", Enclosed: '"', Escape: '"', LineTerm: "\n"}, 2, 0,
			[]row{{`a"b`, `c\n`}}, []bool{false}},
		{"multi-byte terminators", "a||b\r\nc||d\r\n", Format{FieldTerm: "||", Enclosed: -1, Escape: '\\', LineTerm: "\r\n"}, 2, 0,
			[]row{{"a", "b"}, {"c", "d"}}, []bool{false, false}},
		{"a terminator's prefix is data", "a|b||c\r\r\n", Format{FieldTerm: "||", Enclosed: -1, Escape: '\\', LineTerm: "\r\n"}, 2, 0,
			[]row{{"a|b", "c\r"}}, []bool{false}},
		{"lines starting by", "xx#1,a\nno prefix\n#2,b\n", Format{FieldTerm: ",", Enclosed: -1, Escape: '\\', LineStart: "#", LineTerm: "\n"}, 2, 0,
			[]row{{"1", "a"}, {"2", "b"}}, []bool{false, false}},
		{"no line terminator at the end", "1\ta\n2\tb", DefaultFormat(), 2, 0,
			[]row{{"1", "a"}, {"2", "b"}}, []bool{false, false}},
		{"a cut last line without its terminator is not reported", "1\ta\tz", DefaultFormat(), 2, 0,
			[]row{{"1", "a"}}, []bool{false}},
		{"empty line", "1\ta\n\n2\tb\n", DefaultFormat(), 2, 0,
			[]row{{"1", "a"}, {"", "<missing>"}, {"2", "b"}}, []bool{false, false, false}},
		{"field terminator equal to the line terminator: IGNORE LINES skips nothing", "1,a,2,b,", Format{FieldTerm: ",", Enclosed: -1, Escape: '\\', LineTerm: ","}, 2, 1,
			[]row{{"1", "a"}, {"2", "b"}}, []bool{false, false}},
		{"no line terminator: IGNORE LINES skips rows", "1,a,2,b,", Format{FieldTerm: ",", Enclosed: -1, Escape: '\\'}, 2, 1,
			[]row{{"2", "b"}}, []bool{false}},
		{"no escape", "a\\N\t\\N\n", Format{FieldTerm: "\t", Enclosed: -1, Escape: -1, LineTerm: "\n"}, 2, 0,
			[]row{{`a\N`, `\N`}}, []bool{false}},
		{"trailing escape", "a\\", DefaultFormat(), 1, 0,
			[]row{{`a\`}}, []bool{false}},
		{"skip more lines than the file has", "1\n2\n", DefaultFormat(), 1, 5, nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows, cuts := readAll(t, c.data, c.f, c.n, c.skip)
			if !reflect.DeepEqual(rows, c.want) || !reflect.DeepEqual(cuts, c.cuts) {
				t.Errorf("rows %q cuts %v, want %q %v", rows, cuts, c.want, c.cuts)
			}
		})
	}
}

// TestReaderReadError: a failing file ends the rows with the error.
func TestReaderReadError(t *testing.T) {
	r := NewReader(io.MultiReader(strings.NewReader("1\ta\n2\t"), failing{}), DefaultFormat())
	n := 0
	for r.Next(2) {
		n++
	}
	if r.Err() == nil || n != 1 {
		t.Fatalf("rows %d err %v: want 1 row then the read error", n, r.Err())
	}
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, fmt.Errorf("connection reset") }

// TestReaderMatchesMariaDB loads random files in random formats into
// MariaDB (LOAD DATA LOCAL INFILE) and reads them with Reader: the same
// rows, fields, NULLs, missing fields (1261) and cut lines (1262).
func TestReaderMatchesMariaDB(t *testing.T) {
	testsvc.NeedsServers(t)
	addr := os.Getenv("LOADFILE_TEST_MYSQL")
	if addr == "" {
		addr = "127.0.0.1:3306"
	}
	ctx := context.Background()
	db, err := sql.Open("mysql", "root@tcp("+addr+")/?allowAllFiles=false")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("MariaDB at %s (LOADFILE_TEST_MYSQL): %v", addr, err)
	}
	defer conn.Close()
	name := fmt.Sprintf("loadfile_test_%d", rand.Int64())
	exec := func(q string) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE DATABASE " + name)
	defer func() { _, _ = db.Exec("DROP DATABASE " + name) }()
	exec("USE " + name)
	exec("SET SESSION max_error_count = 65535")

	formats := []Format{
		DefaultFormat(),
		csv(),
		{FieldTerm: ",", Enclosed: '"', Escape: '"', LineTerm: "\n"},
		{FieldTerm: "||", Enclosed: -1, Escape: '\\', LineTerm: "\r\n"},
		{FieldTerm: ",", Enclosed: '\'', Escape: -1, LineStart: "#>", LineTerm: "\n"},
		{FieldTerm: ";", Enclosed: '"', Escape: '\\', LineTerm: ";"},
		{FieldTerm: "\t", Enclosed: '|', Escape: '|', LineTerm: "\n\n"},
		{FieldTerm: ",", Enclosed: '"', Escape: '\\'},
	}
	alphabet := []string{"a", "b", "7", ",", "\t", "\n", "\r", "\"", "'", "\\", "|", ";", "#", ">", "N", "NULL", "\\N", "\"\"", "é", " "}
	rng := rand.New(rand.NewPCG(7, uint64(len(formats))))
	const cols = 3
	for i := range 240 {
		f := formats[i%len(formats)]
		var sb strings.Builder
		for range rng.IntN(12) {
			for range rng.IntN(12) {
				sb.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			sb.WriteString(f.LineTerm)
		}
		data := sb.String()
		skip := uint64(rng.IntN(3))
		exec("DROP TABLE IF EXISTS t")
		exec("CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, c1 LONGBLOB, c2 LONGBLOB, c3 LONGBLOB)")
		handler := "f" + strconv.Itoa(i)
		mysqldrv.RegisterReaderHandler(handler, func() io.Reader { return strings.NewReader(data) })
		q := "LOAD DATA LOCAL INFILE 'Reader::" + handler + "' INTO TABLE t CHARACTER SET binary" + clauses(f) +
			" IGNORE " + strconv.FormatUint(skip, 10) + " LINES (c1, c2, c3)"
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		mysqldrv.DeregisterReaderHandler(handler)
		short, cut := warnedRows(t, ctx, conn)
		var want []row
		rs, err := conn.QueryContext(ctx, "SELECT c1, c2, c3 FROM t ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var v [cols]sql.RawBytes
			if err := rs.Scan(&v[0], &v[1], &v[2]); err != nil {
				t.Fatal(err)
			}
			var r row
			for _, x := range v {
				if x == nil {
					r = append(r, `\N`)
				} else {
					r = append(r, string(x))
				}
			}
			want = append(want, r)
		}
		rs.Close()

		got, cuts := readAll(t, data, f, cols, skip)
		var gotShort, gotCut []int
		for k := range got {
			for j, v := range got[k] {
				if v == "<missing>" {
					got[k][j] = `\N` // a missing field of a column whose default is NULL
					gotShort = append(gotShort, k+1)
				}
			}
			if cuts[k] {
				gotCut = append(gotCut, k+1)
			}
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gotShort, short) || !reflect.DeepEqual(gotCut, cut) {
			t.Fatalf("file %q, format %+v, IGNORE %d LINES:\nReader  %q short %v cut %v\nMariaDB %q short %v cut %v",
				data, f, skip, got, gotShort, gotCut, want, short, cut)
		}
	}
}

// warnedRows lists the rows of the last statement's 1261 warnings (one per
// missing field) and 1262 warnings.
func warnedRows(t *testing.T, ctx context.Context, conn *sql.Conn) (short, cut []int) {
	t.Helper()
	rs, err := conn.QueryContext(ctx, "SHOW WARNINGS")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var level, msg string
		var code int
		if err := rs.Scan(&level, &code, &msg); err != nil {
			t.Fatal(err)
		}
		var n int
		switch code {
		case 1261:
			if _, err := fmt.Sscanf(msg, "Row %d doesn't", &n); err != nil {
				t.Fatalf("warning %q: %v", msg, err)
			}
			short = append(short, n)
		case 1262:
			if _, err := fmt.Sscanf(msg, "Row %d was truncated", &n); err != nil {
				t.Fatalf("warning %q: %v", msg, err)
			}
			cut = append(cut, n)
		default:
			t.Fatalf("unexpected warning %d %s", code, msg)
		}
	}
	return short, cut
}

// clauses prints f as FIELDS and LINES clauses.
func clauses(f Format) string {
	ch := func(c int) string {
		if c < 0 {
			return "''"
		}
		return quote(string(rune(c)))
	}
	s := " FIELDS TERMINATED BY " + quote(f.FieldTerm) + " ENCLOSED BY " + ch(f.Enclosed) + " ESCAPED BY " + ch(f.Escape) + " LINES"
	if f.LineStart != "" {
		s += " STARTING BY " + quote(f.LineStart)
	}
	return s + " TERMINATED BY " + quote(f.LineTerm)
}

func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`, "\n", `\n`, "\r", `\r`, "\t", `\t`)
	return "'" + r.Replace(s) + "'"
}
