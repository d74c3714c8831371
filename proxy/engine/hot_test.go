package engine

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestAppendDatetimeText: the hand-rolled text DATETIME encoder prints what
// MariaDB prints (the layout time.Format gives), for every precision.
func TestAppendDatetimeText(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	lo := time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC).UnixMilli()
	vals := []int64{lo, hi, 0, 1700000000123}
	for i := 0; i < 2000; i++ {
		vals = append(vals, lo+rng.Int63n(hi-lo))
	}
	for dec := byte(0); dec <= 6; dec++ {
		f := &mysql.Field{Type: mysql.MYSQL_TYPE_DATETIME, Decimal: dec}
		for _, ms := range vals {
			if dec < 3 {
				ms -= ms % []int64{1000, 100, 10}[dec] // a value the column can hold
			}
			tm := time.UnixMilli(ms).UTC()
			want := tm.Format("2006-01-02 15:04:05")
			if dec > 0 {
				want += "." + fmt.Sprintf("%06d", tm.Nanosecond()/1000)[:dec]
			}
			got, ok := appendDatetime([]byte("x"), f, ms, false)
			if !ok || string(got) != "x"+string(rune(len(want)))+want {
				t.Fatalf("dec %d ms %d: got %q ok %v, want %q", dec, ms, got, ok, want)
			}
		}
	}
	// A value finer than the column cannot have come from it.
	if _, ok := appendDatetime(nil, &mysql.Field{Type: mysql.MYSQL_TYPE_DATETIME}, 1500, false); ok {
		t.Fatal("1.5 s encoded for a DATETIME(0) column")
	}
}
