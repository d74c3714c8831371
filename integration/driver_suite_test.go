package integration

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/convoy-im/convoy/internal/testsvc"
)

// driverModule is the go-sql-driver/mysql package whose own test suite
// TestDriverSuite runs; the version is the one go.mod pins.
const driverModule = "github.com/go-sql-driver/mysql"

// A driverRefusal is one of the driver's tests that fails through Convoy
// because it needs something Convoy refuses by design (README, refusals
// table). Its failures (the test's and its subtests') are accepted only if
// the test's output through Convoy shows the documented refusal (evidence),
// so another failure in the same test is still reported. A listed test that
// passes through Convoy fails TestDriverSuite: the list cannot go stale.
type driverRefusal struct {
	evidence []string // texts the failing test prints through Convoy, all of them
	reason   string
}

// shownIn reports whether a test's output shows the refusal.
func (r driverRefusal) shownIn(output string) bool {
	for _, e := range r.evidence {
		if !strings.Contains(output, e) {
			return false
		}
	}
	return len(r.evidence) > 0
}

var driverRefusals = map[string]driverRefusal{
	// (TestLoadData passes: Convoy reads LOAD DATA LOCAL's file and writes
	// its rows, into the suite's unsharded tables with local_infile: all.)
	// (TestSQLInjection and TestInsertRetrieveEscapedData, whose second
	// halves connect with sql_mode='NO_BACKSLASH_ESCAPES', pass since
	// Convoy reads that mode itself.)
}

// TestDriverSuite runs go-sql-driver/mysql's own tests (driver_test.go and
// friends, as `go test github.com/go-sql-driver/mysql` with its MYSQL_TEST_*
// variables) against database gotest behind Convoy, and the same binary
// against plain MariaDB. Every test that passes on MariaDB must pass through
// Convoy, except the documented refusals in driverRefusals. Tests that do
// not pass on MariaDB itself (the driver's own compression bug in
// TestLongData/compress; TestConnectionAttributes skips: the test servers
// run without performance_schema) are only logged: they say nothing about
// Convoy.
//
// Both runs log in as convoy/convoy (on MariaDB a user created for the
// purpose), so tests that look at the password (TestEmptyPassword) expect
// the same answer from both servers. With CONVOY_KEEP_TESTDIRS set, a
// failing run keeps both complete outputs and logs where they are.
func TestDriverSuite(t *testing.T) {
	bin := buildDriverTests(t)
	s := newStack(t)
	// Both servers speak TLS (TestTLS, TestIssue1567 connect with
	// tls=skip-verify): a Convoy of the stack's cluster with a certificate,
	// and a MariaDB of its own as the baseline.
	cert, key := testsvc.SelfSigned(t)
	convoy := startConvoy(t, s.etcd.Endpoints(), "tls_cert: "+cert, "tls_key: "+key, "engine:\n  local_infile: all")
	base := testsvc.StartMariaDB(t, testsvc.WithMariaDBArgs("--ssl-cert="+cert, "--ssl-key="+key))
	// gotest is an unsharded database: behind Convoy it lives on the
	// default datasource, like database im.
	s.ds[0].Exec(t, "CREATE DATABASE gotest")
	base.Exec(t, "CREATE DATABASE gotest",
		"CREATE USER convoy@'%' IDENTIFIED BY 'convoy'",
		"GRANT ALL ON *.* TO convoy@'%' WITH GRANT OPTION")

	want := runDriverTests(t, bin, base.Addr())
	got := runDriverTests(t, bin, convoy.addr)
	t.Logf("driver suite: %d verdicts (tests and subtests) on MariaDB, %d through Convoy", len(want.result), len(got.result))

	// Verdicts are per test and subtest; the report groups them by
	// top-level test and prints each one's output once.
	baseline := map[string][]string{} // top-level test -> names not passing on MariaDB
	diffs := map[string][]string{}    // top-level test -> names passing on MariaDB only
	for _, name := range sortedNames(want.result) {
		top := topLevelTest(name)
		w, g := want.result[name], got.result[name]
		refusal, listed := driverRefusals[top]
		switch {
		case w != "PASS":
			baseline[top] = append(baseline[top], name+" "+w)
		case g == "PASS":
		case listed && refusal.shownIn(got.output[top]):
			t.Logf("refused by design: %s (%s)", name, refusal.reason)
		default:
			diffs[top] = append(diffs[top], name+" "+verdictOrNotRun(g))
		}
	}
	for _, top := range sortedNames(driverRefusals) {
		if got.result[top] == "PASS" {
			t.Errorf("%s passes through Convoy but is listed as refused (%s): remove it from driverRefusals", top, driverRefusals[top].reason)
		}
	}
	for _, top := range sortedNames(baseline) {
		t.Logf("not passing on MariaDB itself, not compared: %s\n%s", strings.Join(baseline[top], ", "), reportExcerpt(want.output[top]))
	}
	if want.crashed != "" {
		t.Errorf("the driver's test binary did not finish against MariaDB:\n%s", want.crashed)
	}
	if got.crashed != "" {
		t.Errorf("the driver's test binary did not finish through Convoy:\n%s", got.crashed)
	}
	for _, top := range sortedNames(diffs) {
		t.Errorf("%s passes on MariaDB, not through Convoy: %s\n%s", top, strings.Join(diffs[top], ", "), reportExcerpt(got.output[top]))
	}
	if t.Failed() && os.Getenv("CONVOY_KEEP_TESTDIRS") != "" {
		dir, err := os.MkdirTemp("", "convoy-driver-suite-")
		if err == nil {
			_ = os.WriteFile(filepath.Join(dir, "mariadb.out"), []byte(want.raw), 0o644)
			_ = os.WriteFile(filepath.Join(dir, "convoy.out"), []byte(got.raw), 0o644)
			t.Logf("complete outputs kept in %s", dir)
		}
	}
}

// buildDriverTests compiles the driver's test binary once (go test -c).
func buildDriverTests(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mysql.test")
	cmd := exec.Command("go", "test", "-c", "-o", bin, driverModule)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s: %v\n%s", driverModule, err, out)
	}
	return bin
}

// driverRun is the outcome of one run of the driver's tests: PASS, FAIL or
// SKIP per test and subtest name, and the verbose output of each top-level
// test (for the failure report).
type driverRun struct {
	result  map[string]string
	output  map[string]string
	raw     string // the whole verbose output
	crashed string // non-empty if the binary ended without a verdict for every test (panic, timeout)
}

var (
	driverRunRE    = regexp.MustCompile(`^=== (?:RUN|CONT|PAUSE)\s+(\S+)`)
	driverResultRE = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(`)
	driverDoneRE   = regexp.MustCompile(`(?m)^(PASS|FAIL)$`)
)

// runDriverTests runs the compiled driver tests against addr as
// convoy/convoy in database gotest. The driver's TestConcurrent opens up to
// @@max_connections connections; it runs (MYSQL_TEST_CONCURRENT) because
// a proxy must survive that too.
func runDriverTests(t *testing.T, bin, addr string) driverRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	// TestConnectorReturnsTimeout dials 1.1.1.1 to provoke a timeout: not
	// loopback traffic, and no server under test is involved.
	cmd := exec.CommandContext(ctx, bin, "-test.v", "-test.count=1", "-test.timeout=6m", "-test.skip", "^TestConnectorReturnsTimeout$")
	cmd.Dir = filepath.Dir(bin) // a scratch directory
	cmd.Env = append(os.Environ(),
		"MYSQL_TEST_USER=convoy",
		"MYSQL_TEST_PASS=convoy",
		"MYSQL_TEST_PROT=tcp",
		"MYSQL_TEST_ADDR="+addr,
		"MYSQL_TEST_DBNAME=gotest",
		"MYSQL_TEST_CONCURRENT=1",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("driver tests against %s: %v (%s)", addr, err, time.Since(start).Round(time.Second))

	r := driverRun{result: map[string]string{}, output: map[string]string{}, raw: out.String()}
	var cur string
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := driverRunRE.FindStringSubmatch(line); m != nil {
			cur = topLevelTest(m[1])
		}
		if m := driverResultRE.FindStringSubmatch(line); m != nil {
			r.result[m[2]] = m[1]
		}
		if cur != "" {
			r.output[cur] += line + "\n"
		}
	}
	// A test binary that finishes prints PASS or FAIL on a line of its own;
	// a panic or its timeout ends it without one, and the tail says why.
	if !driverDoneRE.MatchString(r.raw) {
		tail := r.raw
		if len(tail) > 3000 {
			tail = tail[len(tail)-3000:]
		}
		r.crashed = tail
		if cur != "" && r.result[cur] == "" {
			r.result[cur] = "CRASH"
		}
	}
	return r
}

// topLevelTest is the top-level test of a (sub)test name.
func topLevelTest(name string) string {
	if i := strings.IndexByte(name, '/'); i >= 0 {
		return name[:i]
	}
	return name
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// verdictOrNotRun names a missing verdict: the subtest did not run.
func verdictOrNotRun(s string) string {
	if s == "" {
		return "no result (not run)"
	}
	return s
}

// reportExcerpt indents and shortens a test's output to what a failure
// report needs.
func reportExcerpt(s string) string {
	const max = 2500
	if len(s) > max {
		s = s[:max] + "\n... (truncated)"
	}
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
