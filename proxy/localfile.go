package proxy

import (
	"io"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// localFile asks the client for a file of LOAD DATA LOCAL INFILE (a packet
// 0xFB with its name) and returns what the client sends: its content in
// packets, the last one empty, then the client waits for the statement's
// reply. The engine reads it (engine/loaddata.go); Close reads the rest.
func (h *handler) localFile(name string) (io.ReadCloser, error) {
	if !h.conn.HasCapability(mysql.CLIENT_LOCAL_FILES) {
		// As MariaDB answers a client that did not enable local files.
		return nil, &mysql.MyError{Code: mysql.ER_NOT_ALLOWED_COMMAND, State: "42000", Message: "The used command is not allowed with this MariaDB version"}
	}
	pkt := make([]byte, 4, 5+len(name))
	pkt = append(append(pkt, 0xfb), name...)
	if err := h.conn.WritePacket(pkt); err != nil {
		return nil, err
	}
	if err := h.cc.Flush(); err != nil {
		return nil, err
	}
	return &clientFile{h: h}, nil
}

// clientFile is the content of a file the client sends.
type clientFile struct {
	h    *handler
	buf  []byte
	done bool
	err  error
}

func (f *clientFile) Read(p []byte) (int, error) {
	for len(f.buf) == 0 {
		switch {
		case f.err != nil:
			return 0, f.err
		case f.done:
			return 0, io.EOF
		}
		// The file's packets are data, not commands: clientConn passes
		// them up as they are.
		f.h.cc.raw = true
		pkt, err := f.h.conn.ReadPacket()
		switch {
		case err != nil:
			f.err = err
		case len(pkt) == 0:
			f.done = true
		default:
			f.buf = pkt
		}
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

// Close reads what the client still sends of the file: it must be read
// whole before the reply, whatever ended the load.
func (f *clientFile) Close() error {
	var scratch [4096]byte
	for {
		if _, err := f.Read(scratch[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}
