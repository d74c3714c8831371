package failpoint

import (
	"os"
	"os/exec"
	"reflect"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	got := parse(" a/b=exit; c=sleep(250ms);bad;d=sleep(x);e=jump;=exit;")
	want := map[string]action{"a/b": {exit: true}, "c": {sleep: 250 * time.Millisecond}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parse: %+v, want %+v", got, want)
	}
	if got := parse(""); len(got) != 0 {
		t.Fatalf("parse of nothing: %+v", got)
	}
}

// An armed exit point ends the process with status 3 at the point, and
// not before: the child prints a line first.
func TestInjectExit(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Inject("unarmed")
		os.Stdout.WriteString("before\n")
		Inject("here")
		os.Stdout.WriteString("after\n")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestInjectExit$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"=here=exit")
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("child: %v, output %q", err, out)
	}
	if string(out) != "before\n" {
		t.Fatalf("child's output %q, want only the line before the point", out)
	}
}
