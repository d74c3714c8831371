// Package loadfile reads the text files of LOAD DATA [LOCAL] INFILE the way
// MariaDB reads them (sql/sql_load.cc, READ_INFO and read_sep_field): Convoy
// receives a client's file for LOAD DATA LOCAL INFILE into a sharded table
// and must cut it into the same rows and fields, with the same NULLs, as the
// server would have, before it routes each row to its shard.
//
// The rules, as MariaDB has them:
//
//   - A field ends at FIELDS TERMINATED BY, a row at LINES TERMINATED BY
//     (a line terminator equal to the field terminator is ignored). Both
//     may be several bytes long.
//   - A field that starts with the ENCLOSED BY character runs to that
//     character followed by a field or line terminator (or the end of the
//     file); inside it terminators are data and a doubled enclosure is one.
//     An enclosure that never closes leaves the opening character in the
//     field. OPTIONALLY changes nothing when reading.
//   - The ESCAPED BY character (default backslash) takes the next byte
//     literally, except \0 \b \n \r \t \Z, which stand for NUL, backspace,
//     newline, return, tab and Ctrl-Z, and \N, which is NULL when it is the
//     whole field. When the escape and the enclosure are the same character,
//     only a doubled one is an escape (CSV's "").
//   - Unenclosed NULL is NULL when an enclosure is set.
//   - LINES STARTING BY skips every byte up to and including the prefix
//     before each row (a row without it is skipped with what precedes it).
//   - A row reads as many fields as the load has targets. A short line
//     leaves the rest missing (the caller warns, 1261); the rest of a long
//     line is skipped and the row reported cut (1262).
//
// Files are read as bytes. That equals MariaDB's reading for every
// character set in which no byte of a multi-byte character can be an ASCII
// byte (utf8mb4, utf8mb3, latin1, binary, ...), given ASCII terminators,
// enclosure and escape; the caller refuses the others.
package loadfile

import (
	"bufio"
	"io"
)

// Format is how a file's fields and lines are delimited (the FIELDS and
// LINES clauses). Enclosed and Escape are -1 when not set.
type Format struct {
	FieldTerm string
	Enclosed  int
	Escape    int
	LineStart string
	LineTerm  string
}

// DefaultFormat is LOAD DATA's without FIELDS or LINES clauses.
func DefaultFormat() Format {
	return Format{FieldTerm: "\t", Enclosed: -1, Escape: '\\', LineTerm: "\n"}
}

// Field is one field of a row.
type Field struct {
	Value []byte
	Null  bool
}

// eof is what get returns at the end of the file (MariaDB's my_b_EOF).
const eof = -1

// none never equals a byte (MariaDB's INT_MAX for "no such character").
const none = -2

// Reader reads rows from a file. It is not safe for concurrent use.
type Reader struct {
	br        *bufio.Reader
	err       error
	stack     []int // bytes read ahead and given back (MariaDB's PUSH/GET)
	fieldTerm []byte
	lineTerm  []byte
	lineStart []byte
	enclosed  int
	escape    int

	foundEndOfLine bool
	startOfLine    bool
	atEOF          bool
	done           bool

	// Of the last field read: its bytes (data[start:]), whether it was
	// enclosed and whether it held \N.
	data      []byte
	start     int
	wasQuoted bool
	foundNull bool

	lineCut bool
	skip    uint64 // rows still to skip (IGNORE n LINES without a line terminator)
	// noLines: LINES TERMINATED BY '' (not one equal to the field
	// terminator, which is dropped but still makes IGNORE n LINES skip
	// lines of none: nothing).
	noLines bool

	row     []Field
	buf     []byte
	ends    []int
	missing int
	cut     bool
}

// NewReader reads r in format f.
func NewReader(r io.Reader, f Format) *Reader {
	rd := &Reader{
		br:        bufio.NewReaderSize(r, 64<<10),
		fieldTerm: []byte(f.FieldTerm),
		lineTerm:  []byte(f.LineTerm),
		lineStart: []byte(f.LineStart),
		enclosed:  none,
		escape:    none,
		noLines:   f.LineTerm == "",
	}
	if f.Enclosed >= 0 {
		rd.enclosed = f.Enclosed
	}
	if f.Escape >= 0 {
		rd.escape = f.Escape
	}
	if string(rd.fieldTerm) == string(rd.lineTerm) {
		rd.lineTerm = nil // fields only: rows are n fields in a row
	}
	rd.startOfLine = len(rd.lineStart) > 0
	return rd
}

// SkipLines skips the first n lines (IGNORE n LINES): up to n line
// terminators, whatever they enclose; without a line terminator, n rows
// (and nothing when the line terminator is the field terminator, as in
// MariaDB).
func (r *Reader) SkipLines(n uint64) {
	if r.noLines {
		r.skip = n
		return
	}
	for ; n > 0; n-- {
		if r.nextLine() {
			r.done = true
			return
		}
	}
}

// Next reads the next row of n fields (n > 0). It returns false at the end
// of the file or on a read error (Err).
func (r *Reader) Next(n int) bool {
	for !r.done {
		r.buf, r.ends = r.buf[:0], r.ends[:0]
		r.row = r.row[:0]
		got := 0
		for ; got < n; got++ {
			if r.readField() {
				break
			}
			value := r.data[r.start:]
			null := len(value) == 4 && !r.wasQuoted && r.enclosed != none && string(value) == "NULL" ||
				len(value) == 1 && r.foundNull
			r.row = append(r.row, Field{Null: null})
			r.buf = append(r.buf, value...)
			r.ends = append(r.ends, len(r.buf))
		}
		if r.err != nil || got == 0 {
			// At the start of a row no field means the end of the file.
			r.done = true
			return false
		}
		if r.skip > 0 {
			r.skip--
			continue
		}
		from := 0
		for i, end := range r.ends {
			if !r.row[i].Null {
				r.row[i].Value = r.buf[from:end:end]
			}
			from = end
		}
		r.missing = n - got
		if r.nextLine() {
			// The last row: what follows its fields is not reported.
			r.done, r.cut = true, false
		} else {
			r.cut = r.lineCut
		}
		return true
	}
	return false
}

// Row is the row Next read: its fields (fewer than asked when its line was
// short), valid until the next call of Next.
func (r *Reader) Row() []Field { return r.row }

// Missing is the number of fields the row's line lacked.
func (r *Reader) Missing() int { return r.missing }

// Cut reports a row whose line held more than the fields asked for.
func (r *Reader) Cut() bool { return r.cut }

// Err is the read error that ended the file early, if any.
func (r *Reader) Err() error { return r.err }

func (r *Reader) get() int {
	if n := len(r.stack); n > 0 {
		c := r.stack[n-1]
		r.stack = r.stack[:n-1]
		return c
	}
	b, err := r.br.ReadByte()
	if err != nil {
		if err != io.EOF && r.err == nil {
			r.err = err
		}
		return eof
	}
	return int(b)
}

func (r *Reader) push(c int) { r.stack = append(r.stack, c) }

// terminator reports whether the bytes after t's first one (just read)
// follow; if not, it gives back what it read.
func (r *Reader) terminator(t []byte) bool {
	i, c := 1, 0
	for ; i < len(t); i++ {
		if c = r.get(); c != int(t[i]) {
			break
		}
	}
	if i == len(t) {
		return true
	}
	r.push(c)
	for i--; i >= 1; i-- {
		r.push(int(t[i]))
	}
	return false
}

// at reports whether c, just read, starts t and the rest of t follows.
func (r *Reader) at(c int, t []byte) bool {
	return len(t) > 0 && c == int(t[0]) && r.terminator(t)
}

// readField reads one field into data[start:]. It returns true when there
// is none: the line ended (call nextLine) or the file did.
func (r *Reader) readField() bool {
	r.foundNull = false
	if r.foundEndOfLine {
		return true
	}
	if r.startOfLine {
		r.startOfLine = false
		if r.findStartOfFields() {
			return true
		}
	}
	c := r.get()
	if c == eof {
		r.foundEndOfLine, r.atEOF = true, true
		return true
	}
	r.data = r.data[:0]
	quote := none
	if c == r.enclosed {
		quote = c
		r.data = append(r.data, byte(c)) // kept if the enclosure never closes
	} else {
		r.push(c)
	}
	for {
		c = r.get()
		if c == eof {
			r.fieldEnd(false, true)
			r.atEOF = true
			return false
		}
		if c == r.escape {
			if c = r.get(); c == eof {
				r.data = append(r.data, byte(r.escape))
				r.fieldEnd(false, true)
				r.atEOF = true
				return false
			}
			// An escape that is also the enclosure escapes only itself.
			if r.escape != r.enclosed || c == r.escape {
				r.data = append(r.data, r.unescape(byte(c)))
				continue
			}
			r.push(c)
			c = r.escape
		}
		if quote == none && len(r.lineTerm) > 0 && c == int(r.lineTerm[0]) && r.terminator(r.lineTerm) {
			r.fieldEnd(false, true)
			return false
		}
		if c == quote {
			if c = r.get(); c == quote {
				r.data = append(r.data, byte(c))
				continue
			}
			if c == eof || r.at(c, r.lineTerm) {
				r.fieldEnd(true, true)
				return false
			}
			if r.at(c, r.fieldTerm) {
				r.fieldEnd(true, false)
				return false
			}
			r.push(c)
			c = quote
		} else if quote == none && r.at(c, r.fieldTerm) {
			r.fieldEnd(false, false)
			return false
		}
		r.data = append(r.data, byte(c))
	}
}

func (r *Reader) fieldEnd(quoted, endOfLine bool) {
	r.wasQuoted = quoted
	r.start = 0
	if quoted {
		r.start = 1
	}
	if endOfLine {
		r.foundEndOfLine = true
	}
}

func (r *Reader) unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 't':
		return '\t'
	case 'r':
		return '\r'
	case 'b':
		return '\b'
	case '0':
		return 0
	case 'Z':
		return 0x1a
	case 'N':
		r.foundNull = true
	}
	return c
}

// nextLine skips the rest of the current line; it reports the end of the
// file. lineCut tells whether the rest held anything.
func (r *Reader) nextLine() bool {
	r.lineCut = false
	r.startOfLine = len(r.lineStart) > 0
	if r.foundEndOfLine || r.atEOF {
		r.foundEndOfLine = false
		return r.atEOF
	}
	if len(r.lineTerm) == 0 {
		return false
	}
	for {
		c := r.get()
		if c == eof {
			r.atEOF = true
			return true
		}
		if c == r.escape {
			r.lineCut = true
			if r.get() == eof {
				return true
			}
			continue
		}
		if r.at(c, r.lineTerm) {
			return false
		}
		r.lineCut = true
	}
}

// findStartOfFields skips to just after LINES STARTING BY; it reports the
// end of the file.
func (r *Reader) findStartOfFields() bool {
	for c := r.get(); c != eof; c = r.get() {
		if r.at(c, r.lineStart) {
			return false
		}
	}
	r.foundEndOfLine, r.atEOF = true, true
	return true
}
