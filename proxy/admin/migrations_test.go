package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// fakeMigrations records the calls of the migration directives.
type fakeMigrations struct {
	calls []string
	err   error
}

type badInput struct{ msg string }

func (e badInput) Error() string      { return e.msg }
func (e badInput) InvalidInput() bool { return true }

func (f *fakeMigrations) Start(_ context.Context, from, to int, ds, db string, rate float64, parallel int, auto bool) ([]int, error) {
	f.calls = append(f.calls, fmt.Sprintf("start %d-%d %s %q rate=%g parallel=%d auto=%v", from, to, ds, db, rate, parallel, auto))
	if f.err != nil {
		return nil, f.err
	}
	var out []int
	for sh := from; sh <= to; sh++ {
		out = append(out, sh)
	}
	return out, nil
}

func (f *fakeMigrations) Command(_ context.Context, shard int, verb string, rate float64) error {
	f.calls = append(f.calls, fmt.Sprintf("command %d %s rate=%g", shard, verb, rate))
	return f.err
}

func (f *fakeMigrations) Status(context.Context) ([]string, [][]string, error) {
	f.calls = append(f.calls, "status")
	return []string{"shard", "step"}, [][]string{{"0441", "backfill"}}, f.err
}

func (f *fakeMigrations) Detail(_ context.Context, shard int) ([]string, [][]string, error) {
	f.calls = append(f.calls, fmt.Sprintf("detail %d", shard))
	return []string{"field", "value"}, [][]string{{"shard", "0441"}}, f.err
}

func TestMigrationDirectives(t *testing.T) {
	f := &fakeMigrations{}
	s := &fakeSession{admin: true}

	// Without the hook: a clear refusal, not a panic.
	_, err := query(t, New(newFakeEngine(), Config{}), s, "/*+ convoy SHOW MIGRATIONS */")
	expectCode(t, err, sqlerr.NotSupported)

	a := New(newFakeEngine(), Config{Migrations: f})
	for _, q := range []string{
		"/*+ convoy MIGRATE SHARD 441 TO ds2 */",
		"/*+ convoy MIGRATE SHARD 441 TO ds2 DATABASE im_9 RATE 0 AUTO */",
		"/*+ convoy MIGRATE SHARDS 512-515 TO ds2 RATE 2000 PARALLEL 2 */",
		"/*+ convoy MIGRATION 441 RATE 500 */",
		"/*+ convoy MIGRATION 441 NEXT */",
		"/*+ convoy SHOW MIGRATIONS */",
		"/*+ convoy SHOW MIGRATION 441 */",
	} {
		r, err := query(t, a, s, q)
		if err != nil || r == nil || r.Resultset == nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	want := []string{
		`start 441-441 ds2 "" rate=0 parallel=0 auto=false`,
		`start 441-441 ds2 "im_9" rate=-1 parallel=0 auto=true`,
		`start 512-515 ds2 "" rate=2000 parallel=2 auto=false`,
		`command 441 RATE rate=500`,
		`command 441 NEXT rate=0`,
		`status`,
		`detail 441`,
	}
	if strings.Join(f.calls, "\n") != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}

	// The admin's refusals are the client's errors; anything else is the
	// backing store's.
	f.err = badInput{"unknown datasource \"ds9\""}
	_, err = query(t, a, s, "/*+ convoy MIGRATE SHARD 1 TO ds9 */")
	expectCode(t, err, sqlerr.WrongArguments)
	if !strings.Contains(err.Error(), `unknown datasource "ds9"`) {
		t.Fatalf("error %q does not name the datasource", err)
	}
	f.err = fmt.Errorf("wrapped: %w", badInput{"no job"})
	_, err = query(t, a, s, "/*+ convoy MIGRATION 3 PAUSE */")
	expectCode(t, err, sqlerr.WrongArguments)
	f.err = errors.New("etcdserver: request timed out")
	_, err = query(t, a, s, "/*+ convoy SHOW MIGRATIONS */")
	expectCode(t, err, sqlerr.BackendUnavailable)

	s.admin = false
	_, err = query(t, a, s, "/*+ convoy MIGRATION 3 PAUSE */")
	expectCode(t, err, sqlerr.AccessDenied)
}
