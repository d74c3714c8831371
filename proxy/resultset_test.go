package proxy

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestAppendFieldMatchesDump: the direct encoder writes exactly what
// go-mysql's Field.Dump writes, for renamed definitions (Data nil) with
// names of every length class, and copies backend bytes untouched.
func TestAppendFieldMatchesDump(t *testing.T) {
	long := []byte(strings.Repeat("n", 300)) // needs a 3-byte length
	fields := []*mysql.Field{
		{Schema: []byte("im"), Table: []byte("m"), OrgTable: []byte("conv_msg"), Name: []byte("seq"), OrgName: []byte("seq"),
			Charset: 63, ColumnLength: 20, Type: mysql.MYSQL_TYPE_LONGLONG, Flag: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG},
		{Name: long, OrgName: long, Charset: 45, ColumnLength: 1 << 24, Type: mysql.MYSQL_TYPE_BLOB, Decimal: 0x27},
		{Type: mysql.MYSQL_TYPE_NULL},
	}
	for i, f := range fields {
		if got, want := appendField([]byte("x"), f), append([]byte("x"), f.Dump()...); !bytes.Equal(got, want) {
			t.Fatalf("field %d:\n got %x\nwant %x", i, got, want)
		}
	}
	raw := &mysql.Field{Data: []byte{3, 'd', 'e', 'f', 9, 9}, Name: []byte("ignored")}
	if got := appendField(nil, raw); !bytes.Equal(got, raw.Data) {
		t.Fatalf("backend bytes not copied as is: %x", got)
	}
}

// recordConn keeps what is written to it.
type recordConn struct {
	net.Conn
	out bytes.Buffer
}

func (r *recordConn) Write(p []byte) (int, error) { return r.out.Write(p) }

// TestEndPacketFraming: payloads below, at and above the 16 MiB packet
// limit are framed as appendPackets frames them, sequence numbers carried,
// and big responses go out in chunks.
func TestEndPacketFraming(t *testing.T) {
	for _, n := range []int{0, 1, 0xffffff - 1, 0xffffff, 0xffffff + 1, 2 * 0xffffff} {
		rc := &recordConn{}
		l := &clientConn{Conn: rc}
		seq := uint8(3)
		start := l.startPacket()
		l.wbuf = append(l.wbuf, bytes.Repeat([]byte{'r'}, n)...)
		if err := l.endPacket(start, &seq); err != nil {
			t.Fatal(err)
		}
		if n >= writeChunk && rc.out.Len() == 0 {
			t.Fatalf("n=%d: a big response was not sent in chunks", n)
		}
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		want := appendPackets(nil, bytes.Repeat([]byte{'r'}, n), 3)
		if !bytes.Equal(rc.out.Bytes(), want) || seq != uint8(3+n/0xffffff+1) {
			t.Fatalf("n=%d: framing differs (%d bytes, want %d), next seq %d", n, rc.out.Len(), len(want), seq)
		}
	}
}
