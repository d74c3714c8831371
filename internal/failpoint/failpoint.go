// Package failpoint lets a drill stop a Convoy process at a named point of
// its code, where a crash leaves the most to recover (a migration runner
// killed between the route flip and saving its step), which no signal sent
// from outside can hit on purpose.
//
// Points are armed by the CONVOY_FAILPOINTS environment variable, read
// once at start: "name=action[;name=action...]", where action is
//
//   - exit: the process exits at once with status 3, as after a SIGKILL
//     (no deferred function runs, no connection is closed politely);
//   - sleep(D): the goroutine sleeps for the Go duration D (a stall).
//
// An unarmed point costs a lookup in an empty map. Production never sets
// the variable; a malformed one is reported on stderr and ignored, so a
// typo cannot take a proxy down.
package failpoint

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// EnvVar is the variable that arms points.
const EnvVar = "CONVOY_FAILPOINTS"

type action struct {
	exit  bool
	sleep time.Duration
}

var armed = parse(os.Getenv(EnvVar))

// parse reads an EnvVar value; what it cannot read it reports and skips.
func parse(spec string) map[string]action {
	out := map[string]action{}
	for item := range strings.SplitSeq(spec, ";") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, act, ok := strings.Cut(item, "=")
		a, err := parseAction(act)
		if !ok || name == "" || err != nil {
			fmt.Fprintf(os.Stderr, "%s: ignoring %q: want name=exit or name=sleep(duration)\n", EnvVar, item)
			continue
		}
		out[name] = a
	}
	return out
}

func parseAction(s string) (action, error) {
	if s == "exit" {
		return action{exit: true}, nil
	}
	if d, ok := strings.CutPrefix(s, "sleep("); ok && strings.HasSuffix(d, ")") {
		dur, err := time.ParseDuration(strings.TrimSuffix(d, ")"))
		if err != nil || dur < 0 {
			return action{}, fmt.Errorf("bad duration %q", d)
		}
		return action{sleep: dur}, nil
	}
	return action{}, fmt.Errorf("unknown action %q", s)
}

// Inject runs the action armed at point name, if any.
func Inject(name string) {
	a, ok := armed[name]
	if !ok {
		return
	}
	if a.exit {
		fmt.Fprintf(os.Stderr, "%s: exiting at %s\n", EnvVar, name)
		os.Exit(3)
	}
	time.Sleep(a.sleep)
}
