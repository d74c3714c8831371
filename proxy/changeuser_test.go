package proxy

import (
	"bytes"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestParseChangeUser(t *testing.T) {
	auth := bytes.Repeat([]byte{0xaa}, 20)
	full := append(append(append([]byte("bob\x00"), 20), auth...), "im\x00\x2d\x00caching_sha2_password\x00\x05attrs"...)
	r, ok := parseChangeUser(full, true)
	if !ok || r.user != "bob" || !bytes.Equal(r.auth, auth) || r.db != "im" || r.charset != 45 || r.plugin != "caching_sha2_password" {
		t.Fatalf("full packet: %+v %v", r, ok)
	}
	// An old client: NUL-terminated auth, the packet ends after the database.
	r, ok = parseChangeUser([]byte("amy\x00xyz\x00im"), false)
	if !ok || r.user != "amy" || string(r.auth) != "xyz" || r.db != "im" || r.charset != 0 || r.plugin != "" {
		t.Fatalf("old packet: %+v %v", r, ok)
	}
	for _, bad := range [][]byte{nil, []byte("nouser"), append([]byte("bob\x00"), 30, 1, 2)} {
		if _, ok := parseChangeUser(bad, true); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	salt := bytes.Repeat([]byte{7}, 20)
	if got, ok := scrambleFor("", salt, "pw"); !ok || !bytes.Equal(got, mysql.CalcNativePassword(salt, []byte("pw"))) {
		t.Error("native scramble")
	}
	if got, ok := scrambleFor("mysql_native_password", salt, ""); !ok || got != nil {
		t.Error("an empty password answers nothing")
	}
	if _, ok := scrambleFor("client_ed25519", salt, "pw"); ok {
		t.Error("a plugin Convoy does not check must ask for a switch")
	}
}

// TestGreetingSalt: the scramble patchGreeting reports is the one go-mysql
// put in its greeting (parts 1 and 2).
func TestGreetingSalt(t *testing.T) {
	salt := []byte("abcdefgh" + "ijklmnopqrst")
	p := []byte{0, 0, 0, 0, 10}
	p = append(p, "10.11.19-MariaDB\x00"...)
	p = append(p, 1, 0, 0, 0)        // connection id
	p = append(p, salt[:8]...)       // part 1
	p = append(p, 0, 0xff, 0xf7, 45) // filler, capabilities low, charset
	p = append(p, 2, 0, 0xff, 0x81)  // status, capabilities high
	p = append(p, 21)                // salt length
	p = append(p, make([]byte, 10)...)
	p = append(p, salt[8:]...)
	p = append(p, 0)
	p = append(p, "mysql_native_password\x00"...)
	if got := patchGreeting(p, 0, 0, 0); !bytes.Equal(got, salt) {
		t.Fatalf("salt %q, want %q", got, salt)
	}
}
