package proxy

import (
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// writeResultset sends a result set as go-mysql's writer would (the same
// packets: column count, definitions, EOF, rows, EOF with the connection's
// status) but encodes straight into the send buffer: go-mysql allocates a
// buffer per result, copies every row into it, and re-encodes every renamed
// column definition through a chain of small allocations. Rows, text or
// binary, are forwarded as the backend sent them. The closing EOF carries
// the count of the engine's own warnings for the statement (the cold
// tier's "result may be incomplete"), which SHOW WARNINGS then lists.
func (h *handler) writeResultset(rs *mysql.Resultset) error {
	cc, seq := h.cc, h.conn.Sequence
	start := cc.startPacket()
	cc.wbuf = mysql.AppendLengthEncodedInteger(cc.wbuf, uint64(len(rs.Fields)))
	if err := cc.endPacket(start, &seq); err != nil {
		return err
	}
	for _, f := range rs.Fields {
		start := cc.startPacket()
		cc.wbuf = appendField(cc.wbuf, f)
		if err := cc.endPacket(start, &seq); err != nil {
			return err
		}
	}
	status := h.status()
	if err := cc.eof(&seq, status, 0); err != nil {
		return err
	}
	for _, row := range rs.RowDatas {
		start := cc.startPacket()
		cc.wbuf = append(cc.wbuf, row...)
		if err := cc.endPacket(start, &seq); err != nil {
			return err
		}
	}
	err := cc.eof(&seq, status, h.sess.WarningCount())
	h.conn.Sequence = seq
	return err
}

// status is the server status go-mysql's own writer would send (it keeps
// the flags unexported; syncStatus and multiQuery set them).
func (h *handler) status() uint16 {
	var st uint16
	for bit := uint16(1); bit != 0; bit <<= 1 {
		if h.conn.HasStatus(bit) {
			st |= bit
		}
	}
	return st
}

// appendField encodes a column definition (Protocol::ColumnDefinition41).
// A definition still holding the backend's bytes is copied as is.
func appendField(b []byte, f *mysql.Field) []byte {
	if f.Data != nil {
		return append(b, f.Data...)
	}
	if f.DefaultValue != nil { // only COM_FIELD_LIST answers carry one
		return append(b, f.Dump()...)
	}
	b = append(b, 3, 'd', 'e', 'f')
	for _, s := range [][]byte{f.Schema, f.Table, f.OrgTable, f.Name, f.OrgName} {
		b = mysql.AppendLengthEncodedInteger(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = append(b, 0x0c)
	b = binary.LittleEndian.AppendUint16(b, f.Charset)
	b = binary.LittleEndian.AppendUint32(b, f.ColumnLength)
	b = append(b, f.Type)
	b = binary.LittleEndian.AppendUint16(b, f.Flag)
	return append(b, f.Decimal, 0, 0)
}

// startPacket reserves a packet header in the send buffer and returns where
// the payload starts; endPacket fills the header in.
func (l *clientConn) startPacket() int {
	l.wbuf = append(l.wbuf, 0, 0, 0, 0)
	return len(l.wbuf)
}

// endPacket frames the payload written since startPacket with sequence
// *seq (splitting one of 16 MiB or more, as the protocol wants) and sends
// the buffer once it holds writeChunk bytes.
func (l *clientConn) endPacket(start int, seq *uint8) error {
	n := len(l.wbuf) - start
	if n < 0xffffff {
		h := l.wbuf[start-4 : start]
		h[0], h[1], h[2], h[3] = byte(n), byte(n>>8), byte(n>>16), *seq
		*seq++
	} else {
		payload := append([]byte(nil), l.wbuf[start:]...)
		l.wbuf = appendPackets(l.wbuf[:start-4], payload, *seq)
		*seq += byte(n/0xffffff + 1)
	}
	if len(l.wbuf) >= writeChunk {
		return l.Flush()
	}
	return nil
}

// eof appends an EOF packet: a warning count and the status.
func (l *clientConn) eof(seq *uint8, status, warnings uint16) error {
	start := l.startPacket()
	l.wbuf = append(l.wbuf, mysql.EOF_HEADER, byte(warnings), byte(warnings>>8), byte(status), byte(status>>8))
	return l.endPacket(start, seq)
}
