package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/convoy-im/convoy/proxy/sqlerr"
)

// fakeArchive records the calls of the archive directives.
type fakeArchive struct {
	calls []string
	err   error
}

func (f *fakeArchive) Status(context.Context) ([]string, [][]string, error) {
	f.calls = append(f.calls, "status")
	return []string{"shard", "state"}, [][]string{{"0441", "idle"}}, f.err
}

func (f *fakeArchive) Command(_ context.Context, shard int, verb string) error {
	f.calls = append(f.calls, fmt.Sprintf("command %d %s", shard, verb))
	return f.err
}

func TestArchiveDirectives(t *testing.T) {
	f := &fakeArchive{}
	s := &fakeSession{admin: true}
	_, err := query(t, New(newFakeEngine(), Config{}), s, "/*+ convoy SHOW ARCHIVE */")
	expectCode(t, err, sqlerr.NotSupported)

	a := New(newFakeEngine(), Config{Archive: f})
	for q, want := range map[string]string{
		"/*+ convoy SHOW ARCHIVE */":          "0441 idle",
		"/*+ convoy ARCHIVE SHARD 441 NOW */": "0441 NOW",
		"/*+ convoy ARCHIVE PAUSE */":         "PAUSE",
		"/*+ convoy ARCHIVE RESUME */":        "RESUME",
	} {
		r, err := query(t, a, s, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		_, got := rows(t, r)
		if len(got) != 1 || strings.ReplaceAll(got[0], " | ", " ") != want {
			t.Errorf("%s: row %q, want %q", q, got, want)
		}
	}
	calls := strings.Join(f.calls, ",")
	for _, c := range []string{"status", "command 441 NOW", "command -1 PAUSE", "command -1 RESUME"} {
		if !strings.Contains(calls, c) {
			t.Errorf("calls %q lack %q", calls, c)
		}
	}

	// Malformed directives are syntax errors; the admin's refusals are the
	// client's; anything else the backing store's.
	_, err = query(t, a, s, "/*+ convoy ARCHIVE SHARD 9999 NOW */")
	expectCode(t, err, sqlerr.Syntax)
	f.err = badInput{"shard out of range"}
	_, err = query(t, a, s, "/*+ convoy ARCHIVE SHARD 3 NOW */")
	expectCode(t, err, sqlerr.WrongArguments)
	f.err = errors.New("etcdserver: request timed out")
	_, err = query(t, a, s, "/*+ convoy SHOW ARCHIVE */")
	expectCode(t, err, sqlerr.BackendUnavailable)
	s.admin = false
	_, err = query(t, a, s, "/*+ convoy ARCHIVE PAUSE */")
	expectCode(t, err, sqlerr.AccessDenied)
}
