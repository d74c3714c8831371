package sqlq

import "testing"

func TestIdent(t *testing.T) {
	for in, want := range map[string]string{"conv_msg": "`conv_msg`", "a`b": "`a``b`", "": "``", "``": "``````"} {
		if got := Ident(in); got != want {
			t.Errorf("Ident(%q) = %s, want %s", in, got, want)
		}
	}
}
