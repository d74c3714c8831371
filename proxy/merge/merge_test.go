package merge

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// The tests split one table into shard tables t_0..t_4 (t_4 stays empty) on
// a real MariaDB, run the per-shard query on each (text and prepared /
// binary), merge, and compare with the query the client would have sent,
// run on t_all, which holds every row.

const nShards = 5

var (
	testConn *client.Conn
	testDB   string
	skipWhy  string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() { // make unit: no servers
		skipWhy = "needs MariaDB: run by make test, not by make unit (-short)"
		return m.Run()
	}
	addr := os.Getenv("MERGE_TEST_MYSQL")
	if addr == "" {
		addr = "127.0.0.1:3306"
	}
	conn, err := client.Connect(addr, "root", "", "", func(c *client.Conn) error { return c.SetCollation("utf8mb4_general_ci") })
	if err != nil {
		skipWhy = fmt.Sprintf("no MariaDB at %s: %v", addr, err)
		return m.Run()
	}
	testDB = fmt.Sprintf("merge_test_%d", rand.Int63())
	if err := setup(conn); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		_, _ = conn.Execute("DROP DATABASE IF EXISTS " + testDB)
		return 1
	}
	testConn = conn
	code := m.Run()
	if _, err := conn.Execute("DROP DATABASE IF EXISTS " + testDB); err != nil {
		fmt.Fprintln(os.Stderr, "cleanup:", err)
	}
	_ = conn.Close()
	return code
}

func db(t testing.TB) *client.Conn {
	t.Helper()
	if testConn == nil {
		t.Skip(skipWhy)
	}
	return testConn
}

var names = []string{"alice", "Alice", "ALICE", "bob", "Bob", "carol", "Émile", "emile", "zoe", "Zoë", "dave ", "dave", "", "Ärger", "arger", "ß"}

func setup(c *client.Conn) error {
	stmts := []string{
		"CREATE DATABASE " + testDB + " CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
		"USE " + testDB,
	}
	schema := ` (
		id INT NOT NULL PRIMARY KEY,
		g INT NULL,
		neg INT NOT NULL,
		u BIGINT UNSIGNED NULL,
		d DECIMAL(12,3) NULL,
		dt DATETIME(3) NULL,
		tm TIME NULL,
		name VARCHAR(32) NULL,
		f DOUBLE NULL,
		b VARBINARY(16) NULL
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci`
	stmts = append(stmts, "CREATE TABLE t_all"+schema)
	for i := range nShards {
		stmts = append(stmts, fmt.Sprintf("CREATE TABLE t_%d", i)+schema)
	}
	for _, s := range stmts {
		if _, err := c.Execute(s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	rng := rand.New(rand.NewSource(42))
	var all []string
	perShard := make([][]string, nShards)
	for id := 1; id <= 240; id++ {
		null := func(p int, v string) string {
			if rng.Intn(100) < p {
				return "NULL"
			}
			return v
		}
		g := null(10, fmt.Sprint(rng.Intn(7)))
		neg := fmt.Sprint(rng.Intn(2000) - 1000)
		u := null(5, fmt.Sprint(uint64(18446744073709551615)-uint64(rng.Intn(50))*uint64(rng.Int63n(1<<40))))
		d := null(10, fmt.Sprintf("%d.%03d", rng.Intn(20000)-10000, rng.Intn(1000)))
		dt := null(10, fmt.Sprintf("'2024-%02d-%02d %02d:%02d:%02d.%03d'", 1+rng.Intn(12), 1+rng.Intn(28), rng.Intn(24), rng.Intn(60), rng.Intn(3), rng.Intn(1000)))
		tm := null(10, fmt.Sprintf("'%s%d:%02d:%02d'", []string{"", "-"}[rng.Intn(2)], rng.Intn(200), rng.Intn(60), rng.Intn(60)))
		name := null(8, "'"+names[rng.Intn(len(names))]+"'")
		f := null(10, fmt.Sprintf("%g", float64(rng.Intn(4000)-2000)/4))
		b := null(10, fmt.Sprintf("0x%x", []byte{byte(rng.Intn(4)), byte(rng.Intn(256))}))
		row := fmt.Sprintf("(%d,%s,%s,%s,%s,%s,%s,%s,%s,%s)", id, g, neg, u, d, dt, tm, name, f, b)
		all = append(all, row)
		// t_4 stays empty; the others get uneven shares.
		sh := [...]int{0, 0, 1, 2, 2, 2, 3}[rng.Intn(7)]
		perShard[sh] = append(perShard[sh], row)
	}
	if _, err := c.Execute("INSERT INTO t_all VALUES " + strings.Join(all, ",")); err != nil {
		return err
	}
	for i, rows := range perShard {
		if len(rows) == 0 {
			continue
		}
		if _, err := c.Execute(fmt.Sprintf("INSERT INTO t_%d VALUES ", i) + strings.Join(rows, ",")); err != nil {
			return err
		}
	}
	return nil
}

// run executes sql with {t} replaced by table, as text or prepared.
func run(t testing.TB, table, sql string, bin bool, args []any) *mysql.Result {
	t.Helper()
	c := db(t)
	q := strings.ReplaceAll(sql, "{t}", table)
	var r *mysql.Result
	var err error
	if bin {
		st, perr := c.Prepare(q)
		if perr != nil {
			t.Fatalf("prepare %s: %v", q, perr)
		}
		r, err = st.Execute(args...)
		_ = st.Close()
	} else {
		if len(args) > 0 {
			q = strings.Replace(q, "?", fmt.Sprint(args[0]), 1)
		}
		r, err = c.Execute(q)
	}
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return r
}

func shardResults(t testing.TB, sql string, bin bool, args []any) []*mysql.Result {
	parts := make([]*mysql.Result, nShards)
	for i := range parts {
		parts[i] = run(t, fmt.Sprintf("t_%d", i), sql, bin, args)
	}
	return parts
}

type mergeCase struct {
	name  string
	shard string // per-shard SQL, {t} = table
	want  string // the client's SQL, run on t_all
	args  []any
	spec  Spec
	fold  bool // string values may differ in letter case (general_ci ties)
	multi bool // result is a set: compare ignoring order (DISTINCT without ORDER BY)
}

func aggs(k ...AggKind) []AggKind { return k }

var cases = []mergeCase{
	{
		name:  "rollup one column",
		shard: "SELECT g, COUNT(*), SUM(d), MIN(name), MAX(dt) FROM {t} GROUP BY g",
		want:  "SELECT g, COUNT(*), SUM(d), MIN(name), MAX(dt) FROM {t} GROUP BY g WITH ROLLUP",
		spec:  Spec{GroupBy: []int{0}, Aggs: aggs(AggNone, AggCount, AggSum, AggMin, AggMax), Rollup: true, Limit: -1},
		fold:  true,
	},
	{
		name:  "rollup two columns",
		shard: "SELECT g, neg % 3 AS m, COUNT(*), SUM(u), MAX(tm) FROM {t} GROUP BY g, m",
		want:  "SELECT g, neg % 3 AS m, COUNT(*), SUM(u), MAX(tm) FROM {t} GROUP BY g, m WITH ROLLUP",
		spec:  Spec{GroupBy: []int{0, 1}, Aggs: aggs(AggNone, AggNone, AggCount, AggSum, AggMax), Rollup: true, Limit: -1},
	},
	{
		name:  "rollup descending key, offset and limit",
		shard: "SELECT g, neg % 3 AS m, COUNT(*) FROM {t} GROUP BY g, m",
		want:  "SELECT g, neg % 3 AS m, COUNT(*) FROM {t} GROUP BY g DESC, m WITH ROLLUP LIMIT 3, 7",
		spec:  Spec{GroupBy: []int{0, 1}, GroupDesc: []bool{true, false}, Aggs: aggs(AggNone, AggNone, AggCount), Rollup: true, Offset: 3, Limit: 7},
	},
	{
		name:  "rollup over no rows",
		shard: "SELECT g, COUNT(*) FROM {t} WHERE id < 0 GROUP BY g",
		want:  "SELECT g, COUNT(*) FROM {t} WHERE id < 0 GROUP BY g WITH ROLLUP",
		spec:  Spec{GroupBy: []int{0}, Aggs: aggs(AggNone, AggCount), Rollup: true, Limit: -1},
	},
	{
		name:  "order int asc limit offset",
		shard: "SELECT id, g, name FROM {t} WHERE id >= ? ORDER BY id LIMIT 12",
		want:  "SELECT id, g, name FROM {t} WHERE id >= ? ORDER BY id LIMIT 7, 5",
		args:  []any{3},
		spec:  Spec{OrderBy: []Order{{Col: 0}}, Offset: 7, Limit: 5},
	},
	{
		name:  "order negative int desc",
		shard: "SELECT neg, id FROM {t} ORDER BY neg DESC, id LIMIT 25",
		want:  "SELECT neg, id FROM {t} ORDER BY neg DESC, id LIMIT 10, 15",
		spec:  Spec{OrderBy: []Order{{Col: 0, Desc: true}, {Col: 1}}, Offset: 10, Limit: 15},
	},
	{
		name:  "order two columns with NULL group",
		shard: "SELECT g, id, neg FROM {t} ORDER BY g, neg DESC, id",
		want:  "SELECT g, id, neg FROM {t} ORDER BY g, neg DESC, id",
		spec:  Spec{OrderBy: []Order{{Col: 0}, {Col: 2, Desc: true}, {Col: 1}}, Limit: -1},
	},
	{
		name:  "bigint unsigned near 2^64-1 desc",
		shard: "SELECT u, id FROM {t} ORDER BY u DESC, id LIMIT 30",
		want:  "SELECT u, id FROM {t} ORDER BY u DESC, id LIMIT 30",
		spec:  Spec{OrderBy: []Order{{Col: 0, Desc: true}, {Col: 1}}, Limit: 30},
	},
	{
		name:  "bigint unsigned asc NULL first",
		shard: "SELECT u, id FROM {t} ORDER BY u, id",
		want:  "SELECT u, id FROM {t} ORDER BY u, id",
		spec:  Spec{OrderBy: []Order{{Col: 0}, {Col: 1}}, Limit: -1},
	},
	{
		name:  "decimal",
		shard: "SELECT d, id FROM {t} ORDER BY d, id",
		want:  "SELECT d, id FROM {t} ORDER BY d, id",
		spec:  Spec{OrderBy: []Order{{Col: 0}, {Col: 1}}, Limit: -1},
	},
	{
		name:  "datetime(3) desc NULL last",
		shard: "SELECT dt, id FROM {t} ORDER BY dt DESC, id",
		want:  "SELECT dt, id FROM {t} ORDER BY dt DESC, id",
		spec:  Spec{OrderBy: []Order{{Col: 0, Desc: true}, {Col: 1}}, Limit: -1},
	},
	{
		name:  "time with negatives",
		shard: "SELECT tm, id FROM {t} ORDER BY tm, id",
		want:  "SELECT tm, id FROM {t} ORDER BY tm, id",
		spec:  Spec{OrderBy: []Order{{Col: 0}, {Col: 1}}, Limit: -1},
	},
	{
		name:  "varchar general_ci",
		shard: "SELECT name, id FROM {t} ORDER BY name, id",
		want:  "SELECT name, id FROM {t} ORDER BY name, id",
		spec:  Spec{OrderBy: []Order{{Col: 0}, {Col: 1}}, Limit: -1},
	},
	{
		name:  "varchar general_ci desc",
		shard: "SELECT name, id FROM {t} ORDER BY name DESC, id DESC LIMIT 40",
		want:  "SELECT name, id FROM {t} ORDER BY name DESC, id DESC LIMIT 40",
		spec:  Spec{OrderBy: []Order{{Col: 0, Desc: true}, {Col: 1, Desc: true}}, Limit: 40},
	},
	{
		name:  "double and varbinary",
		shard: "SELECT f, b, id FROM {t} ORDER BY f DESC, b, id",
		want:  "SELECT f, b, id FROM {t} ORDER BY f DESC, b, id",
		spec:  Spec{OrderBy: []Order{{Col: 0, Desc: true}, {Col: 1}, {Col: 2}}, Limit: -1},
	},
	{
		name:  "hidden order column",
		shard: "SELECT id, name, neg FROM {t} ORDER BY neg, id LIMIT 20",
		want:  "SELECT id, name FROM {t} ORDER BY neg, id LIMIT 5, 15",
		spec:  Spec{OrderBy: []Order{{Col: 2}, {Col: 0}}, Offset: 5, Limit: 15, Visible: 2},
	},
	{
		name:  "no order: concatenation",
		shard: "SELECT id, name FROM {t} WHERE id IN (5, 77, 150, 151, 152)",
		want:  "SELECT id, name FROM {t} WHERE id IN (5, 77, 150, 151, 152)",
		spec:  Spec{Limit: -1},
		multi: true,
	},
	{
		name:  "count only",
		shard: "SELECT COUNT(*) FROM {t}",
		want:  "SELECT COUNT(*) FROM {t}",
		spec:  Spec{Aggs: aggs(AggCount), Limit: -1},
	},
	{
		name:  "aggregates without GROUP BY",
		shard: "SELECT COUNT(*), SUM(neg), MIN(name), MAX(dt), AVG(d), MIN(u), MAX(tm), SUM(f), SUM(d), COUNT(d) FROM {t}",
		want:  "SELECT COUNT(*), SUM(neg), MIN(name), MAX(dt), AVG(d), MIN(u), MAX(tm), SUM(f) FROM {t}",
		spec: Spec{Aggs: aggs(AggCount, AggSum, AggMin, AggMax, AggNone, AggMin, AggMax, AggSum, AggSum, AggCount),
			Avgs: []Avg{{Out: 4, Sum: 8, Count: 9, Scale: 7}}, Visible: 8, Limit: -1},
		fold: true,
	},
	{
		name:  "group by with implicit order, sum of unsigned near 2^64",
		shard: "SELECT g, COUNT(*), SUM(u), AVG(neg), MIN(d), MAX(tm), SUM(neg), COUNT(neg) FROM {t} GROUP BY g",
		want:  "SELECT g, COUNT(*), SUM(u), AVG(neg), MIN(d), MAX(tm) FROM {t} GROUP BY g",
		spec: Spec{GroupBy: []int{0}, Aggs: aggs(AggNone, AggCount, AggSum, AggNone, AggMin, AggMax, AggSum, AggCount),
			Avgs: []Avg{{Out: 3, Sum: 6, Count: 7, Scale: 4}}, Visible: 6, Limit: -1},
	},
	{
		name:  "group by having order by count limit",
		shard: "SELECT g, COUNT(*), AVG(f), SUM(f), COUNT(f) FROM {t} WHERE id > ? GROUP BY g",
		want:  "SELECT g, COUNT(*), AVG(f) FROM {t} WHERE id > ? GROUP BY g HAVING COUNT(*) > 20 ORDER BY COUNT(*) DESC, g LIMIT 1, 3",
		args:  []any{10},
		spec: Spec{GroupBy: []int{0}, Aggs: aggs(AggNone, AggCount, AggNone, AggSum, AggCount),
			Avgs:    []Avg{{Out: 2, Sum: 3, Count: 4}},
			Having:  func(row []mysql.FieldValue) (bool, error) { return row[1].AsInt64() > 20, nil },
			OrderBy: []Order{{Col: 1, Desc: true}, {Col: 0}}, Offset: 1, Limit: 3, Visible: 3},
	},
	{
		name:  "group by two columns, order by aggregate",
		shard: "SELECT g, neg < 0, SUM(d), MAX(name) FROM {t} GROUP BY g, neg < 0",
		want:  "SELECT g, neg < 0, SUM(d), MAX(name) FROM {t} GROUP BY g, neg < 0 ORDER BY SUM(d) DESC",
		spec: Spec{GroupBy: []int{0, 1}, Aggs: aggs(AggNone, AggNone, AggSum, AggMax),
			OrderBy: []Order{{Col: 2, Desc: true}}, Limit: -1},
		fold: true,
	},
	{
		name:  "group by varchar general_ci",
		shard: "SELECT name, COUNT(*), SUM(neg) FROM {t} GROUP BY name",
		want:  "SELECT name, COUNT(*), SUM(neg) FROM {t} GROUP BY name ORDER BY name",
		spec:  Spec{GroupBy: []int{0}, Aggs: aggs(AggNone, AggCount, AggSum), OrderBy: []Order{{Col: 0}}, Limit: -1},
		fold:  true,
	},
	{
		name:  "distinct ordered",
		shard: "SELECT DISTINCT g FROM {t} ORDER BY g",
		want:  "SELECT DISTINCT g FROM {t} ORDER BY g",
		spec:  Spec{Distinct: true, OrderBy: []Order{{Col: 0}}, Limit: -1},
	},
	{
		name:  "distinct varchar general_ci unordered",
		shard: "SELECT DISTINCT name FROM {t}",
		want:  "SELECT DISTINCT name FROM {t}",
		spec:  Spec{Distinct: true, Limit: -1},
		fold:  true, multi: true,
	},
	{
		name:  "distinct over aggregates",
		shard: "SELECT COUNT(*) > 30, g FROM {t} GROUP BY g",
		want:  "SELECT DISTINCT COUNT(*) > 30 FROM {t} GROUP BY g",
		spec:  Spec{GroupBy: []int{1}, Aggs: aggs(AggNone, AggNone), Distinct: true, Visible: 1, Limit: -1},
		multi: true,
	},
	{
		name:  "all shards empty: aggregates still give one row",
		shard: "SELECT COUNT(*), SUM(neg), MIN(name), AVG(d), SUM(d), COUNT(d) FROM {t} WHERE id < 0",
		want:  "SELECT COUNT(*), SUM(neg), MIN(name), AVG(d) FROM {t} WHERE id < 0",
		spec: Spec{Aggs: aggs(AggCount, AggSum, AggMin, AggNone, AggSum, AggCount),
			Avgs: []Avg{{Out: 3, Sum: 4, Count: 5, Scale: 7}}, Visible: 4, Limit: -1},
	},
	{
		name:  "count distinct general_ci per group, with other aggregates",
		shard: "SELECT g, COUNT(DISTINCT name), COUNT(*), SUM(neg), MAX(name), name FROM {t} GROUP BY g, name",
		want:  "SELECT g, COUNT(DISTINCT name), COUNT(*), SUM(neg), MAX(name) FROM {t} GROUP BY g",
		spec: Spec{GroupBy: []int{0}, Aggs: aggs(AggNone, AggNone, AggCount, AggSum, AggMax, AggNone),
			DistinctAggs: []DistinctAgg{{Out: 1, Func: DistinctCount, Args: []int{5}}}, Visible: 5, Limit: -1},
		fold: true,
	},
	{
		name: "count distinct of tuples and of every type, NULLs ignored",
		shard: "SELECT COUNT(DISTINCT g, name), COUNT(DISTINCT d), COUNT(DISTINCT f), COUNT(DISTINCT dt), COUNT(DISTINCT tm), COUNT(DISTINCT b), COUNT(DISTINCT u), COUNT(*), " +
			"g, name, d, f, dt, tm, b, u FROM {t} GROUP BY g, name, d, f, dt, tm, b, u",
		want: "SELECT COUNT(DISTINCT g, name), COUNT(DISTINCT d), COUNT(DISTINCT f), COUNT(DISTINCT dt), COUNT(DISTINCT tm), COUNT(DISTINCT b), COUNT(DISTINCT u), COUNT(*) FROM {t}",
		spec: Spec{Aggs: aggs(AggNone, AggNone, AggNone, AggNone, AggNone, AggNone, AggNone, AggCount, AggNone, AggNone, AggNone, AggNone, AggNone, AggNone, AggNone, AggNone),
			DistinctAggs: []DistinctAgg{
				{Out: 0, Func: DistinctCount, Args: []int{8, 9}}, {Out: 1, Func: DistinctCount, Args: []int{10}},
				{Out: 2, Func: DistinctCount, Args: []int{11}}, {Out: 3, Func: DistinctCount, Args: []int{12}},
				{Out: 4, Func: DistinctCount, Args: []int{13}}, {Out: 5, Func: DistinctCount, Args: []int{14}},
				{Out: 6, Func: DistinctCount, Args: []int{15}},
			}, Visible: 8, Limit: -1},
	},
	{
		name:  "sum and avg distinct, having and order by on count distinct",
		shard: "SELECT g, SUM(DISTINCT neg), AVG(DISTINCT neg), SUM(DISTINCT d), AVG(DISTINCT d), SUM(DISTINCT f), AVG(DISTINCT f), SUM(DISTINCT u), COUNT(DISTINCT name), neg, d, f, u, name FROM {t} GROUP BY g, neg, d, f, u, name",
		want:  "SELECT g, SUM(DISTINCT neg), AVG(DISTINCT neg), SUM(DISTINCT d), AVG(DISTINCT d), SUM(DISTINCT f), AVG(DISTINCT f), SUM(DISTINCT u) FROM {t} GROUP BY g HAVING COUNT(DISTINCT name) > 5 ORDER BY COUNT(DISTINCT name) DESC, g LIMIT 1, 4",
		spec: Spec{GroupBy: []int{0}, Aggs: make([]AggKind, 14),
			DistinctAggs: []DistinctAgg{
				{Out: 1, Func: DistinctSum, Args: []int{9}}, {Out: 2, Func: DistinctAvg, Args: []int{9}, Scale: 4},
				{Out: 3, Func: DistinctSum, Args: []int{10}}, {Out: 4, Func: DistinctAvg, Args: []int{10}, Scale: 7},
				{Out: 5, Func: DistinctSum, Args: []int{11}}, {Out: 6, Func: DistinctAvg, Args: []int{11}},
				{Out: 7, Func: DistinctSum, Args: []int{12}}, {Out: 8, Func: DistinctCount, Args: []int{13}},
			},
			Having:  func(row []mysql.FieldValue) (bool, error) { return row[8].AsInt64() > 5, nil },
			OrderBy: []Order{{Col: 8, Desc: true}, {Col: 0}}, Offset: 1, Limit: 4, Visible: 8},
	},
	{
		name:  "all shards empty: distinct aggregates give 0 and NULL",
		shard: "SELECT COUNT(DISTINCT name), SUM(DISTINCT neg), AVG(DISTINCT d), name, neg, d FROM {t} WHERE id < 0 GROUP BY name, neg, d",
		want:  "SELECT COUNT(DISTINCT name), SUM(DISTINCT neg), AVG(DISTINCT d) FROM {t} WHERE id < 0",
		spec: Spec{Aggs: make([]AggKind, 6), DistinctAggs: []DistinctAgg{
			{Out: 0, Func: DistinctCount, Args: []int{3}}, {Out: 1, Func: DistinctSum, Args: []int{4}}, {Out: 2, Func: DistinctAvg, Args: []int{5}, Scale: 7}},
			Visible: 3, Limit: -1},
	},
	{
		name:  "all shards empty: group by gives nothing",
		shard: "SELECT g, COUNT(*) FROM {t} WHERE id < 0 GROUP BY g",
		want:  "SELECT g, COUNT(*) FROM {t} WHERE id < 0 GROUP BY g",
		spec:  Spec{GroupBy: []int{0}, Aggs: aggs(AggNone, AggCount), Limit: -1},
	},
	{
		name:  "all shards empty: ordered",
		shard: "SELECT id, name FROM {t} WHERE id < 0 ORDER BY id LIMIT 10",
		want:  "SELECT id, name FROM {t} WHERE id < 0 ORDER BY id LIMIT 10",
		spec:  Spec{OrderBy: []Order{{Col: 0}}, Limit: 10},
	},
}

func TestMergeAgainstMariaDB(t *testing.T) {
	db(t)
	for _, tc := range cases {
		for _, bin := range []bool{false, true} {
			proto := "text"
			if bin {
				proto = "binary"
			}
			t.Run(tc.name+"/"+proto, func(t *testing.T) {
				parts := shardResults(t, tc.shard, bin, tc.args)
				spec := tc.spec
				spec.Binary = bin
				got, err := Merge(parts, spec)
				if err != nil {
					t.Fatalf("Merge: %v", err)
				}
				want := run(t, "t_all", tc.want, bin, tc.args)
				checkResult(t, got, want, bin, tc.fold, tc.multi)
			})
		}
	}
}

// checkResult compares merged and single-server results, and proves the
// merged RowDatas are valid packets that decode to the merged Values.
func checkResult(t *testing.T, got, want *mysql.Result, bin, fold, multi bool) {
	t.Helper()
	if len(got.Fields) != len(want.Fields) {
		t.Fatalf("got %d columns, want %d", len(got.Fields), len(want.Fields))
	}
	for i := range got.Fields {
		g, w := got.Fields[i], want.Fields[i]
		if g.Type != w.Type || g.Flag&mysql.UNSIGNED_FLAG != w.Flag&mysql.UNSIGNED_FLAG {
			t.Errorf("column %d: type %d flags %x, want type %d flags %x", i, g.Type, g.Flag, w.Type, w.Flag)
		}
	}
	if len(got.RowDatas) != len(got.Values) {
		t.Fatalf("%d RowDatas but %d Values", len(got.RowDatas), len(got.Values))
	}
	for i, rd := range got.RowDatas {
		vals, err := mysql.RowData(append([]byte(nil), rd...)).Parse(got.Fields, bin, nil)
		if err != nil {
			t.Fatalf("row %d does not parse: %v (% x)", i, err, rd)
		}
		if a, b := render(vals, false), render(got.Values[i], false); a != b {
			t.Fatalf("row %d: packet decodes to %s, Values say %s", i, a, b)
		}
	}
	var g, w []string
	for _, r := range got.Values {
		g = append(g, render(r, fold))
	}
	for _, r := range want.Values {
		w = append(w, render(r, fold))
	}
	if multi {
		g, w = sortedCopy(g), sortedCopy(w)
	}
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Fatalf("merged rows differ from the single-server rows\n got (%d):\n  %s\nwant (%d):\n  %s",
			len(g), strings.Join(g, "\n  "), len(w), strings.Join(w, "\n  "))
	}
}

func render(row []mysql.FieldValue, fold bool) string {
	var b strings.Builder
	for i := range row {
		if i > 0 {
			b.WriteString(" | ")
		}
		v := row[i]
		if fold && v.Type == mysql.FieldValueTypeString {
			// general_ci ties ('Bob' / 'bob', 'Zoë' / 'ZOE', 'dave ' /
			// 'dave') may surface as either spelling: compare weights
			// (ciWeight is itself checked against the server).
			var w []rune
			for _, r := range string(v.AsString()) {
				w = append(w, ciWeight(r, 1))
			}
			v = mysql.NewFieldValue(v.Type, 0, []byte(strings.TrimRight(string(w), " ")))
		}
		fmt.Fprintf(&b, "%d:%s", v.Type, v.String())
	}
	return b.String()
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func TestPassThroughReusesRowBytes(t *testing.T) {
	for _, bin := range []bool{false, true} {
		parts := shardResults(t, "SELECT id, name, dt FROM {t} ORDER BY id", bin, nil)
		got, err := Merge(parts, Spec{Binary: bin, OrderBy: []Order{{Col: 0}}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for i, rd := range got.RowDatas {
			found := false
			for _, p := range parts {
				for _, in := range p.RowDatas {
					if len(in) > 0 && len(rd) > 0 && &in[0] == &rd[0] {
						found = true
					}
				}
			}
			if !found {
				t.Fatalf("binary=%v row %d was copied or re-encoded", bin, i)
			}
		}
	}
}

func TestMaxRows(t *testing.T) {
	for _, bin := range []bool{false, true} {
		parts := shardResults(t, "SELECT id, g FROM {t} ORDER BY id", bin, nil)
		total := 0
		for _, p := range parts {
			total += len(p.RowDatas)
		}
		if _, err := Merge(parts, Spec{Binary: bin, OrderBy: []Order{{Col: 0}}, Limit: 5, MaxRows: total - 1}); !errors.Is(err, ErrTooManyRows) {
			t.Fatalf("streaming over the cap: err = %v", err)
		}
		if _, err := Merge(parts, Spec{Binary: bin, OrderBy: []Order{{Col: 0}}, Limit: 5, MaxRows: total}); err != nil {
			t.Fatalf("streaming at the cap: %v", err)
		}
		// Grouping by id makes one group per row: inputs + groups > cap.
		if _, err := Merge(parts, Spec{Binary: bin, GroupBy: []int{0}, Limit: -1, MaxRows: total + 10}); !errors.Is(err, ErrTooManyRows) {
			t.Fatalf("grouping over the cap: err = %v", err)
		}
		if _, err := Merge(parts, Spec{Binary: bin, Distinct: true, Limit: -1, MaxRows: total + 10}); !errors.Is(err, ErrTooManyRows) {
			t.Fatalf("distinct over the cap: err = %v", err)
		}
		// COUNT(DISTINCT): the shards return one row per distinct value,
		// all of which count.
		parts = shardResults(t, "SELECT COUNT(DISTINCT name), name FROM {t} GROUP BY name", bin, nil)
		total = 0
		for _, p := range parts {
			total += len(p.RowDatas)
		}
		distinct := Spec{Binary: bin, Aggs: aggs(AggNone, AggNone), DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctCount, Args: []int{1}}},
			Visible: 1, Limit: -1, MaxRows: total}
		if _, err := Merge(parts, distinct); !errors.Is(err, ErrTooManyRows) {
			t.Fatalf("count distinct over the cap: err = %v", err)
		}
		distinct.MaxRows++
		if _, err := Merge(parts, distinct); err != nil {
			t.Fatalf("count distinct at the cap: %v", err)
		}
		// Grouping by g makes at most 8 groups.
		parts = shardResults(t, "SELECT g, COUNT(*) FROM {t} GROUP BY g", bin, nil)
		total = 0
		for _, p := range parts {
			total += len(p.RowDatas)
		}
		if _, err := Merge(parts, Spec{Binary: bin, GroupBy: []int{0}, Aggs: aggs(AggNone, AggCount), Limit: -1, MaxRows: total + 8}); err != nil {
			t.Fatalf("grouping under the cap: %v", err)
		}
	}
}

func TestSpecErrors(t *testing.T) {
	parts := shardResults(t, "SELECT id, name FROM {t} ORDER BY id", false, nil)
	for _, spec := range []Spec{
		{OrderBy: []Order{{Col: 2}}},
		{GroupBy: []int{-1}},
		{Aggs: aggs(AggCount)},
		{Aggs: aggs(AggCount, AggKind(9))},
		{Visible: 3},
		{Avgs: []Avg{{Out: 0, Sum: 0, Count: 1}}},
		{Offset: -1},
		{DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctCount}}},
		{DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctCount, Args: []int{0}}}},
		{DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctCount, Args: []int{2}}}},
		{DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctSum, Args: []int{0, 1}}}},
		{DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctFunc(7), Args: []int{1}}}},
		{DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctCount, Args: []int{1}}, {Out: 0, Func: DistinctCount, Args: []int{1}}}},
		{Aggs: aggs(AggCount, AggNone), DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctCount, Args: []int{1}}}},
	} {
		if _, err := Merge(parts, spec); !errors.Is(err, ErrMalformed) {
			t.Errorf("spec %+v: err = %v, want ErrMalformed", spec, err)
		}
	}
	// SUM(DISTINCT) de-duplicates numbers, not strings ('1' = '1.0').
	if _, err := Merge(parts, Spec{DistinctAggs: []DistinctAgg{{Out: 0, Func: DistinctSum, Args: []int{1}}}}); !errors.Is(err, ErrUnsupported) {
		t.Errorf("SUM(DISTINCT) over a string column: %v", err)
	}
	if _, err := Merge(nil, Spec{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("no parts: %v", err)
	}
	other := run(t, "t_0", "SELECT id FROM {t}", false, nil)
	if _, err := Merge([]*mysql.Result{parts[0], other}, Spec{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("column count mismatch: %v", err)
	}
	// A text row claimed to be binary does not parse.
	if _, err := Merge(parts, Spec{Binary: true, OrderBy: []Order{{Col: 0}}, Limit: -1}); !errors.Is(err, ErrMalformed) {
		t.Errorf("protocol mismatch: %v", err)
	}
}

// TestGeneralCIWeights checks ciWeight against MariaDB's WEIGHT_STRING for
// every BMP character, plus PAD SPACE and supplementary characters.
func TestGeneralCIWeights(t *testing.T) {
	c := db(t)
	res, err := c.Execute(`SELECT seq, HEX(WEIGHT_STRING(CONVERT(CHAR(seq USING utf16) USING utf8mb4) COLLATE utf8mb4_general_ci))
		FROM mysql.seq_0_to_65535 WHERE seq NOT BETWEEN 0xD800 AND 0xDFFF`)
	if err != nil {
		t.Skipf("no sequence engine: %v", err)
	}
	if len(res.Values) < 60000 {
		t.Fatalf("only %d characters", len(res.Values))
	}
	bad := 0
	for _, row := range res.Values {
		r := rune(row[0].AsUint64())
		want := string(row[1].AsString())
		if got := fmt.Sprintf("%04X", ciWeight(r, 1)); got != want {
			if bad++; bad < 10 {
				t.Errorf("U+%04X: weight %s, server %s", r, got, want)
			}
		}
	}
	for _, tc := range []struct{ a, b string }{
		{"dave ", "dave"}, {"a", "a\t"}, {"😀", "😃"}, {"æ", "ae"}, {"Zoë", "ZOE"}, {"ß", "s"}, {"", " "}, {"a", "B"}, {"straße", "STRASSE"},
	} {
		var srv int64
		q := fmt.Sprintf("SELECT STRCMP(_utf8mb4 X'%x' COLLATE utf8mb4_general_ci, _utf8mb4 X'%x')", tc.a, tc.b)
		r, err := c.Execute(q)
		if err != nil {
			t.Fatal(err)
		}
		srv = r.Values[0][0].AsInt64()
		if got := compareCI([]byte(tc.a), []byte(tc.b)); int64(got) != srv {
			t.Errorf("%q vs %q: merge %d, server %d", tc.a, tc.b, got, srv)
		}
	}
}

// TestFormatDouble checks the text form of computed DOUBLE sums against the
// server's own rendering.
func TestFormatDouble(t *testing.T) {
	c := db(t)
	vals := []string{"0", "1.5", "-2.25", "1e15", "1e14", "123456789012345", "0.00001", "1.5e-7", "1e-15", "1e-16",
		"1e20", "12345678901234567890", "0.1+0.2", "1/3", "-1.2345678901234567e-30", "2.5e300"}
	var sel []string
	for _, v := range vals {
		sel = append(sel, "("+v+")*1e0")
	}
	r, err := c.Execute("SELECT " + strings.Join(sel, ","))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range r.Values[0] {
		f := v.AsFloat64()
		server := string(textColumn(t, r.RowDatas[0], i))
		if got := string(formatDouble(f, 64)); got != server {
			t.Errorf("%s: formatDouble %q, server %q", vals[i], got, server)
		}
	}
}

func textColumn(t *testing.T, row []byte, col int) []byte {
	t.Helper()
	cells := make([]cell, col+1)
	pos := 0
	for i := 0; i <= col; i++ {
		s, _, n, ok := readLenEncString(row[pos:])
		if !ok {
			t.Fatal("bad row")
		}
		cells[i].raw = s
		pos += n
	}
	return cells[col].raw
}

// TestExprs: columns computed by Eval from merged operands come after
// grouping, ORDER BY and LIMIT (Eval sees only the rows returned), in
// both protocols, with Eval's column metadata; an Eval answering another
// shape is an error.
func TestExprs(t *testing.T) {
	c := db(t)
	for _, bin := range []bool{false, true} {
		parts := shardResults(t, "SELECT g, NULL AS e, COUNT(*) AS n FROM {t} GROUP BY g", bin, nil)
		var seen int
		var evalField *mysql.Field
		eval := func(fields []*mysql.Field, rows [][]mysql.FieldValue) (r *mysql.Result, err error) {
			defer func() {
				if err == nil {
					evalField = r.Fields[0]
				}
			}()
			seen += len(rows)
			var sel []string
			for _, r := range rows {
				sel = append(sel, fmt.Sprintf("SELECT CAST(%d AS SIGNED) * 10 AS e", r[0].AsInt64()))
			}
			q := strings.Join(sel, " UNION ALL ")
			if bin {
				st, err := c.Prepare(q)
				if err != nil {
					return nil, err
				}
				defer st.Close()
				return st.Execute()
			}
			return c.Execute(q)
		}
		spec := Spec{Binary: bin, GroupBy: []int{0}, Aggs: aggs(AggNone, AggNone, AggCount), Visible: 2,
			OrderBy: []Order{{Col: 0}}, Offset: 1, Limit: 3, Exprs: []Expr{{Out: 1, Args: []int{2}}}, Eval: eval}
		got, err := Merge(parts, spec)
		if err != nil {
			t.Fatal(err)
		}
		want := run(t, "t_all", "SELECT g, COUNT(*) * 10 AS e FROM {t} GROUP BY g ORDER BY g LIMIT 1, 3", bin, nil)
		var g, w []string
		for i := range got.Values {
			g = append(g, render(got.Values[i], false))
		}
		for i := range want.Values {
			w = append(w, render(want.Values[i], false))
		}
		if fmt.Sprint(g) != fmt.Sprint(w) || seen != 3 || got.Fields[1] != evalField {
			t.Fatalf("binary %v: %v (eval saw %d rows; Eval's column metadata kept: %v), want %v", bin, g, seen, got.Fields[1] == evalField, w)
		}
		spec.Eval = func(fields []*mysql.Field, rows [][]mysql.FieldValue) (*mysql.Result, error) {
			return c.Execute("SELECT 1 AS e")
		}
		if _, err := Merge(parts, spec); !errors.Is(err, ErrMalformed) {
			t.Fatalf("an Eval answering one row for three: %v, want ErrMalformed", err)
		}
	}
}
