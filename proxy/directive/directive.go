package directive

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/convoy-im/convoy/router"
)

// Kind is what a directive asks for.
type Kind int

// The directive kinds. The zero Kind is not a valid directive.
const (
	ShowRoutes       Kind = iota + 1 // SHOW ROUTES [WHERE shard = N | WHERE datasource = NAME]
	ShowShardFor                     // SHOW SHARD FOR col = key
	ShowDatasources                  // SHOW DATASOURCES
	ShowProxies                      // SHOW PROXIES
	ReloadRoutes                     // RELOAD ROUTES
	ShowShardStats                   // SHOW SHARD STATS [WHERE shard = N]
	ShowShardHealth                  // SHOW SHARD HEALTH [ALL]
	ShowMigrations                   // SHOW MIGRATIONS
	MigrateShard                     // MIGRATE SHARD N | SHARDS A-B TO NAME [options]
	MigrationCommand                 // MIGRATION N PAUSE | RESUME | NEXT | ROLLBACK | CANCEL | RATE R
	ShowShardSizes                   // SHOW SHARD SIZES
	PlanExpansion                    // PLAN EXPANSION [TO N DATASOURCES]
	ShowArchive                      // SHOW ARCHIVE
	ArchiveCommand                   // ARCHIVE SHARD N NOW | ARCHIVE PAUSE | ARCHIVE RESUME
	Target                           // shard=N | datasource=NAME | all, followed by a statement
	ShowMigration                    // SHOW MIGRATION N: one job in detail
	ShowSearchStatus                 // SHOW SEARCH STATUS: the index feeds
	ShowOutbox                       // SHOW OUTBOX [DEAD]: the outbox per datasource, or its dead letters
	OutboxCommand                    // OUTBOX RETRY | DISCARD 'id': one dead letter
)

var kindNames = [...]string{
	ShowRoutes:       "SHOW ROUTES",
	ShowShardFor:     "SHOW SHARD FOR",
	ShowDatasources:  "SHOW DATASOURCES",
	ShowProxies:      "SHOW PROXIES",
	ReloadRoutes:     "RELOAD ROUTES",
	ShowShardStats:   "SHOW SHARD STATS",
	ShowShardHealth:  "SHOW SHARD HEALTH",
	ShowMigrations:   "SHOW MIGRATIONS",
	MigrateShard:     "MIGRATE SHARD",
	MigrationCommand: "MIGRATION",
	ShowShardSizes:   "SHOW SHARD SIZES",
	PlanExpansion:    "PLAN EXPANSION",
	ShowArchive:      "SHOW ARCHIVE",
	ArchiveCommand:   "ARCHIVE",
	Target:           "TARGET",
	ShowMigration:    "SHOW MIGRATION",
	ShowSearchStatus: "SHOW SEARCH STATUS",
	ShowOutbox:       "SHOW OUTBOX",
	OutboxCommand:    "OUTBOX",
}

// String returns the command words of the kind ("SHOW ROUTES"); Target is
// "TARGET".
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Directive is one parsed directive. Fields that do not apply to its Kind
// keep their zero value, except Shard, which is -1 when not set.
type Directive struct {
	Kind Kind

	// Shard is the shard filter (SHOW ROUTES / SHOW SHARD STATS WHERE shard =
	// N), the (first) shard to migrate (MIGRATE SHARD[S]), the job's shard
	// (MIGRATION N), the target shard (shard=N), or the computed shard of Key
	// (SHOW SHARD FOR). -1 when not set.
	Shard int
	// LastShard is the last shard of MIGRATE SHARDS A-B (Shard for MIGRATE
	// SHARD N), at least Shard.
	LastShard int
	// Database (MIGRATE ... DATABASE d; "" keeps the shard's database
	// name), Rate (MIGRATE ... RATE r and MIGRATION N RATE r, rows per
	// second, 0 unlimited; -1 when not given), Parallel (MIGRATE SHARDS ...
	// PARALLEL p; 0 when not given: all at once) and Auto (MIGRATE ... AUTO:
	// switch without waiting for NEXT).
	Database string
	Rate     int64
	Parallel int
	Auto     bool
	// MinDatasources is PLAN EXPANSION TO N DATASOURCES (0: not given).
	MinDatasources int
	// Verb is the command of MIGRATION N: PAUSE, RESUME, NEXT, ROLLBACK,
	// CANCEL, RATE, READ or PURGE, upper case; of ARCHIVE: NOW (with
	// Shard), PAUSE or RESUME.
	Verb string
	// Percent is MIGRATION N READ PERCENT P's share of conversations read
	// from the new side.
	Percent int64
	// Datasource is the filter of SHOW ROUTES WHERE datasource = NAME, the
	// destination of MIGRATE SHARD ... TO NAME, or the target of
	// datasource=NAME. Quotes are removed; existence is not checked here.
	Datasource string
	// KeyColumn (lower case) and Key are the arguments of SHOW SHARD FOR.
	KeyColumn string
	Key       uint64
	// Entry is the outbox entry of OUTBOX RETRY | DISCARD (its id as SHOW
	// OUTBOX DEAD prints it: datasource:home:seq), quotes removed.
	Entry string
	// All is set by the targeting directive "all", and by SHOW SHARD
	// HEALTH ALL (every row, not only those over a threshold).
	All bool
	// Rest is, for Target, everything after the closing "*/", byte for byte
	// as sent (leading whitespace and trailing ";" included). It is never
	// blank and never itself starts with a Convoy directive.
	Rest string
}

// Error is a malformed directive. Its message is meant for the client and
// is kept short (MySQL clients truncate error messages at 512 bytes): the
// offending input is quoted and truncated.
type Error struct {
	Msg string
}

func (e *Error) Error() string { return "convoy directive: " + e.Msg }

func errorf(parts ...string) error { return &Error{Msg: strings.Join(parts, "")} }

const (
	// maxBody bounds the text between "/*+ convoy" and "*/"; real
	// directives are a few dozen bytes.
	maxBody = 1024
	// maxName bounds datasource names (MySQL's identifier length).
	maxName = 64
	// maxQuote bounds how much of the input an error message echoes.
	maxQuote = 32
)

// keyColumns are the shard key columns of the sharded logical tables, in the
// stable order of router.ShardedTables, without duplicates.
var keyColumns = func() []string {
	var cols []string
	seen := map[string]bool{}
	for _, t := range router.ShardedTables() {
		if c, ok := router.ShardKeyColumn(t); ok && !seen[c] {
			seen[c] = true
			cols = append(cols, c)
		}
	}
	return cols
}()

// Command syntaxes, used in Usage and in error messages.
var (
	synShowRoutes   = "SHOW ROUTES [WHERE shard = N | WHERE datasource = NAME]"
	synShowShardFor = "SHOW SHARD FOR {" + strings.Join(keyColumns, "|") + "} = KEY"
	synShardStats   = "SHOW SHARD STATS [WHERE shard = N]"
	synShardHealth  = "SHOW SHARD HEALTH [ALL]"
	synShardSizes   = "SHOW SHARD SIZES"
	synPlan         = "PLAN EXPANSION [TO N DATASOURCES]"
	synDatasources  = "SHOW DATASOURCES"
	synProxies      = "SHOW PROXIES"
	synMigrations   = "SHOW MIGRATIONS"
	synMigrationOne = "SHOW MIGRATION N"
	synReload       = "RELOAD ROUTES"
	synMigrate      = "MIGRATE SHARD N TO NAME [DATABASE D] [RATE R] [AUTO]"
	synMigrateRange = "MIGRATE SHARDS A-B TO NAME [DATABASE D] [RATE R] [PARALLEL P] [AUTO]"
	synMigration    = "MIGRATION N {PAUSE|RESUME|NEXT|ROLLBACK|CANCEL|RATE R|READ PERCENT P|PURGE}"
	synArchive      = "SHOW ARCHIVE"
	synSearch       = "SHOW SEARCH STATUS"
	synArchiveCmd   = "ARCHIVE {SHARD N NOW|PAUSE|RESUME}"
	synShowOutbox   = "SHOW OUTBOX [DEAD]"
	synOutbox       = "OUTBOX {RETRY|DISCARD} 'ID'"
	synTarget       = "shard=N | datasource=NAME | all, then a statement"
	maxShard        = strconv.Itoa(router.NumShards - 1)
)

var usage = "valid directives /*+ convoy ... */: " + strings.Join([]string{
	"SHOW ROUTES [WHERE ...]", synShowShardFor, "SHOW SHARD {STATS|HEALTH [ALL]|SIZES}", "PLAN EXPANSION [...]",
	// The MIGRATE forms in short: the list must fit a MySQL error
	// message (512 bytes); their errors give the full syntax.
	// SHOW ROUTES, SHOW SHARD ..., SHOW MIGRATION N and SHOW ARCHIVE in
	// short too; their own errors give their syntax.
	synDatasources, synProxies, "SHOW MIGRATIONS|MIGRATION N|ARCHIVE|SEARCH STATUS|OUTBOX", synReload, "MIGRATE SHARD[S] N[-M] TO NAME [...]", "MIGRATION N VERB", "OUTBOX VERB ID",
}, ", ") + "; as a statement prefix: " + synTarget +
	" (N is a shard 0.." + maxShard + ")"

// Usage lists the valid directives on one line, for error messages and docs.
func Usage() string { return usage }

// Parse reports whether sql starts with a Convoy directive.
//
// ok=false: sql is not a directive (plain SQL, an executable comment
// /*! ... */, a plain comment /* ... */, or another /*+ ... */ hint); the
// caller treats it as SQL. ok=true and err != nil: it is a directive but it
// is malformed; err is an *Error whose message is client-facing. Parse never
// panics and its work is linear in len(sql), with the comment itself bounded
// to a few KiB.
func Parse(sql string) (d *Directive, ok bool, err error) {
	start, ok := header(sql)
	if !ok {
		return nil, false, nil
	}
	// The comment ends at the first "*/", as it does for the server: quotes
	// inside a comment do not hide it.
	window := sql[start:]
	if len(window) > maxBody+2 {
		window = window[:maxBody+2]
	}
	end := strings.Index(window, "*/")
	if end < 0 {
		if len(sql)-start > len(window) {
			return nil, true, errorf("comment longer than ", strconv.Itoa(maxBody), " bytes or not terminated by */")
		}
		return nil, true, errorf("unterminated comment: missing */")
	}
	body := sql[start : start+end]
	after := sql[start+end+2:]

	toks, err := lex(body)
	if err != nil {
		return nil, true, err
	}
	p := &parser{toks: toks}
	d, err = p.directive()
	if err != nil {
		return nil, true, err
	}

	if d.Kind == Target {
		if blank(after) {
			return nil, true, errorf(targetName(d), " must be followed by a statement in the same query")
		}
		if _, nested := header(after); nested {
			return nil, true, errorf(targetName(d), " must be followed by SQL, not another convoy directive")
		}
		d.Rest = after
		return d, true, nil
	}
	if !blank(after) {
		return nil, true, errorf(d.Kind.String(), " must be the whole statement; unexpected ", quote(strings.TrimLeft(after, wsChars)), " after */")
	}
	return d, true, nil
}

// MigrationRate is Rate as the migration jobs take it: 0 when RATE was not
// given (the configured default), < 0 for RATE 0 (unlimited), else rows/s.
func (d *Directive) MigrationRate() float64 {
	switch d.Rate {
	case -1:
		return 0
	case 0:
		return -1
	}
	return float64(d.Rate)
}

func targetName(d *Directive) string {
	switch {
	case d.All:
		return "all"
	case d.Shard >= 0:
		return "shard=" + strconv.Itoa(d.Shard)
	default:
		return "datasource=" + d.Datasource
	}
}

// wsChars is the whitespace the MySQL lexer skips between tokens.
const wsChars = " \t\n\r\v\f"

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isIdentChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$'
}

// header finds "/*+ convoy" after optional whitespace at the start of s and
// returns the offset just after the word convoy. The word must be the whole
// first identifier of the hint ("convoyx" is some other hint).
func header(s string) (int, bool) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	if !strings.HasPrefix(s[i:], "/*+") {
		return 0, false
	}
	i += 3
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	const word = "convoy"
	if len(s)-i < len(word) || !strings.EqualFold(s[i:i+len(word)], word) {
		return 0, false
	}
	i += len(word)
	if i < len(s) && isIdentChar(s[i]) {
		return 0, false
	}
	return i, true
}

// blank reports whether s is only whitespace with at most one ';'.
func blank(s string) bool {
	semi := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case isSpace(c):
		case c == ';' && !semi:
			semi = true
		default:
			return false
		}
	}
	return true
}

// quote renders user input for an error message: Go-quoted (so control
// bytes and invalid UTF-8 are escaped) and truncated.
func quote(s string) string {
	if s == "" {
		return "end of directive"
	}
	q := strconv.Quote(s)
	if len(q) <= maxQuote+2 {
		return q
	}
	// Cut the text so that its quoted form (bytes that are not UTF-8
	// take four characters there) stays within maxQuote, at a rune start.
	for cut := min(len(s), maxQuote); cut > 0; cut-- {
		if cut < len(s) && !utf8.RuneStart(s[cut]) {
			continue
		}
		if q := strconv.Quote(s[:cut]); len(q) <= maxQuote+2 {
			return q + "..."
		}
	}
	return `"..."`
}

type tokKind int

const (
	tEOF    tokKind = iota
	tWord           // run of [A-Za-z0-9_$]
	tString         // '...' ('' is a quote)
	tQuoted         // `...` (`` is a backtick)
	tPunct          // any other single byte
)

type token struct {
	kind tokKind
	text string // unquoted value
	raw  string // as written, for error messages
}

func lex(body string) ([]token, error) {
	var toks []token
	i := 0
	for {
		for i < len(body) && isSpace(body[i]) {
			i++
		}
		if i >= len(body) {
			return append(toks, token{kind: tEOF}), nil
		}
		c := body[i]
		switch {
		case isIdentChar(c):
			j := i
			for j < len(body) && isIdentChar(body[j]) {
				j++
			}
			toks = append(toks, token{kind: tWord, text: body[i:j], raw: body[i:j]})
			i = j
		case c == '\'' || c == '`':
			var b strings.Builder
			j := i + 1
			closed := false
			for j < len(body) {
				if body[j] == c {
					if j+1 < len(body) && body[j+1] == c {
						b.WriteByte(c)
						j += 2
						continue
					}
					closed = true
					j++
					break
				}
				b.WriteByte(body[j])
				j++
			}
			if !closed {
				return nil, errorf("unterminated quoted name ", quote(body[i:]))
			}
			k := tString
			if c == '`' {
				k = tQuoted
			}
			toks = append(toks, token{kind: k, text: b.String(), raw: body[i:j]})
			i = j
		default:
			_, n := utf8.DecodeRuneInString(body[i:])
			toks = append(toks, token{kind: tPunct, text: body[i : i+n], raw: body[i : i+n]})
			i += n
		}
	}
}

type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() token { return p.toks[p.pos] }

func (p *parser) next() token {
	t := p.toks[p.pos]
	if t.kind != tEOF {
		p.pos++
	}
	return t
}

func (t token) is(word string) bool { return t.kind == tWord && strings.EqualFold(t.text, word) }

func (t token) desc() string {
	if t.kind == tEOF {
		return "end of directive"
	}
	return quote(t.raw)
}

// unknown reports an unknown (or cut short) command: prefix is the words
// read so far, t the one that did not fit.
func unknown(prefix string, t token) error {
	if t.kind == tEOF {
		if prefix == "" {
			return errorf("empty directive; ", usage)
		}
		return errorf("incomplete directive ", prefix, "; ", usage)
	}
	if prefix != "" {
		prefix += " "
	}
	return errorf("unknown directive ", prefix, t.descWord(), "; ", usage)
}

func syntaxErr(syntax string, msg ...string) error {
	return errorf(strings.Join(msg, ""), " (syntax: ", syntax, ")")
}

// expect consumes the keyword word or fails with the command's syntax.
func (p *parser) expect(word, syntax string) error {
	t := p.next()
	if !t.is(word) {
		return syntaxErr(syntax, "expected ", strings.ToUpper(word), ", got ", t.desc())
	}
	return nil
}

// end requires the end of the comment body.
func (p *parser) end(syntax string) error {
	if t := p.peek(); t.kind != tEOF {
		return syntaxErr(syntax, "unexpected ", t.desc())
	}
	return nil
}

func (p *parser) directive() (*Directive, error) {
	d := &Directive{Shard: -1, LastShard: -1, Rate: -1}
	first := p.next()
	var syntax string
	var err error
	switch {
	case first.is("SHOW"):
		syntax, err = p.show(d)
	case first.is("RELOAD"):
		syntax = synReload
		t := p.next()
		if !t.is("ROUTES") {
			return nil, unknown("RELOAD", t)
		}
		d.Kind = ReloadRoutes
	case first.is("PLAN"):
		syntax = synPlan
		if t := p.next(); !t.is("EXPANSION") {
			return nil, unknown("PLAN", t)
		}
		d.Kind = PlanExpansion
		if p.peek().is("TO") {
			p.next()
			var n int64
			if n, err = p.number(synPlan, "TO", 1, router.NumShards); err == nil {
				d.MinDatasources = int(n)
				if t := p.next(); !t.is("DATASOURCES") {
					err = syntaxErr(synPlan, "expected DATASOURCES, got ", t.desc())
				}
			}
		}
	case first.is("MIGRATE"):
		syntax, err = p.migrate(d)
	case first.is("MIGRATION"):
		syntax, err = p.migration(d)
	case first.is("ARCHIVE"):
		syntax, err = p.archive(d)
	case first.is("OUTBOX"):
		syntax, err = p.outbox(d)
	case first.is("SHARD"):
		syntax = synTarget
		d.Kind = Target
		if err = p.equals(syntax); err == nil {
			d.Shard, err = p.shardNumber(syntax)
		}
	case first.is("DATASOURCE"):
		syntax = synTarget
		d.Kind = Target
		if err = p.equals(syntax); err == nil {
			d.Datasource, err = p.name(syntax, "datasource")
		}
	case first.is("ALL"):
		syntax = synTarget
		d.Kind = Target
		d.All = true
	default:
		return nil, unknown("", first)
	}
	if err != nil {
		return nil, err
	}
	if d.Kind == Target && p.peek().kind != tEOF {
		return nil, errorf("a targeting directive takes exactly one of shard=N, datasource=NAME or all; unexpected ", p.peek().desc())
	}
	if err := p.end(syntax); err != nil {
		return nil, err
	}
	return d, nil
}

// descWord renders a token inside "unknown directive ..." messages.
func (t token) descWord() string {
	if t.kind == tWord {
		return strings.ToUpper(quoteBare(t.raw))
	}
	return t.desc()
}

func quoteBare(s string) string {
	if len(s) > maxQuote {
		return s[:maxQuote] + "..."
	}
	return s
}

func (p *parser) show(d *Directive) (string, error) {
	t := p.next()
	switch {
	case t.is("ROUTES"):
		d.Kind = ShowRoutes
		if !p.peek().is("WHERE") {
			return synShowRoutes, nil
		}
		p.next()
		f := p.next()
		var err error
		switch {
		case f.is("SHARD"):
			if err = p.equals(synShowRoutes); err == nil {
				d.Shard, err = p.shardNumber(synShowRoutes)
			}
		case f.is("DATASOURCE"):
			if err = p.equals(synShowRoutes); err == nil {
				d.Datasource, err = p.name(synShowRoutes, "datasource")
			}
		default:
			err = syntaxErr(synShowRoutes, "SHOW ROUTES can filter by shard or datasource, got ", f.desc())
		}
		return synShowRoutes, err
	case t.is("SHARD"):
		u := p.next()
		switch {
		case u.is("FOR"):
			d.Kind = ShowShardFor
			return synShowShardFor, p.shardFor(d)
		case u.is("STATS"):
			d.Kind = ShowShardStats
			if !p.peek().is("WHERE") {
				return synShardStats, nil
			}
			p.next()
			var err error
			if err = p.expect("SHARD", synShardStats); err == nil {
				if err = p.equals(synShardStats); err == nil {
					d.Shard, err = p.shardNumber(synShardStats)
				}
			}
			return synShardStats, err
		case u.is("SIZES"):
			d.Kind = ShowShardSizes
			return synShardSizes, nil
		case u.is("HEALTH"):
			d.Kind = ShowShardHealth
			if p.peek().is("ALL") {
				p.next()
				d.All = true
			}
			return synShardHealth, nil
		default:
			return "", unknown("SHOW SHARD", u)
		}
	case t.is("DATASOURCES"):
		d.Kind = ShowDatasources
		return synDatasources, nil
	case t.is("PROXIES"):
		d.Kind = ShowProxies
		return synProxies, nil
	case t.is("MIGRATIONS"):
		d.Kind = ShowMigrations
		return synMigrations, nil
	case t.is("MIGRATION"):
		d.Kind = ShowMigration
		n, err := p.shardNumber(synMigrationOne)
		if err != nil {
			return "", err
		}
		d.Shard = n
		return synMigrationOne, nil
	case t.is("ARCHIVE"):
		d.Kind = ShowArchive
		return synArchive, nil
	case t.is("OUTBOX"):
		d.Kind = ShowOutbox
		if p.peek().is("DEAD") {
			p.next()
			d.Verb = "DEAD"
		}
		return synShowOutbox, nil
	case t.is("SEARCH"):
		if u := p.next(); !u.is("STATUS") {
			return "", unknown("SHOW SEARCH", u)
		}
		d.Kind = ShowSearchStatus
		return synSearch, nil
	default:
		return "", unknown("SHOW", t)
	}
}

func (p *parser) equals(syntax string) error {
	t := p.next()
	if t.kind != tPunct || t.text != "=" {
		return syntaxErr(syntax, "expected =, got ", t.desc())
	}
	return nil
}

// shardNumber reads a decimal shard number in [0, NumShards).
func (p *parser) shardNumber(syntax string) (int, error) {
	t := p.next()
	bad := func(what string) error {
		return errorf("shard ", what, " is not a shard number 0..", maxShard)
	}
	if t.kind == tPunct && t.text == "-" {
		n := p.next()
		if n.kind == tWord && digits(n.text) {
			return -1, bad(quote("-" + n.raw))
		}
		return -1, syntaxErr(syntax, "expected a shard number, got ", quote("-"+n.raw))
	}
	if t.kind != tWord || !digits(t.text) {
		if t.kind == tEOF {
			return -1, syntaxErr(syntax, "expected a shard number, got end of directive")
		}
		return -1, bad(t.desc())
	}
	s := strings.TrimLeft(t.text, "0")
	if len(s) > 4 {
		return -1, bad(t.desc())
	}
	n := 0
	for i := 0; i < len(s); i++ {
		n = n*10 + int(s[i]-'0')
	}
	if n >= router.NumShards {
		return -1, bad(t.desc())
	}
	if f := p.peek(); f.kind == tPunct && f.text == "." {
		return -1, bad(quote(t.raw + "."))
	}
	return n, nil
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// name reads a datasource (or database: what) name: a bare identifier,
// '...' or `...`.
func (p *parser) name(syntax, what string) (string, error) {
	t := p.next()
	switch t.kind {
	case tWord:
	case tString, tQuoted:
		if t.text == "" {
			return "", errorf("empty ", what, " name")
		}
		for i := 0; i < len(t.text); i++ {
			if c := t.text[i]; c < 0x20 || c == 0x7f || c == '\\' || c == '\'' || c == '`' || c == '"' {
				return "", errorf(what, " name ", quote(t.raw), " must not contain quotes, backslashes or control characters")
			}
		}
		if !utf8.ValidString(t.text) {
			return "", errorf(what, " name ", quote(t.raw), " is not valid UTF-8")
		}
	default:
		return "", syntaxErr(syntax, "expected a ", what, " name, got ", t.desc())
	}
	if len(t.text) > maxName {
		return "", errorf(what, " name ", quote(t.raw), " is longer than ", strconv.Itoa(maxName), " bytes")
	}
	return t.text, nil
}

// shardFor parses "col = key" of SHOW SHARD FOR and computes the shard.
func (p *parser) shardFor(d *Directive) error {
	c := p.next()
	if c.kind != tWord && c.kind != tQuoted {
		return syntaxErr(synShowShardFor, "expected a shard key column, got ", c.desc())
	}
	col := strings.ToLower(c.text)
	valid := false
	for _, k := range keyColumns {
		if col == k {
			valid = true
		}
	}
	if !valid {
		return errorf("column ", quote(c.text), " is not a shard key column; valid: ", strings.Join(keyColumns, ", "))
	}
	if err := p.equals(synShowShardFor); err != nil {
		return err
	}
	t := p.next()
	text := t.text
	switch {
	case t.kind == tPunct && t.text == "-":
		n := p.next()
		if n.kind != tWord {
			return syntaxErr(synShowShardFor, "expected a key, got ", quote("-"+n.raw))
		}
		text = "-" + n.text
	case t.kind == tWord:
	case t.kind == tEOF:
		return syntaxErr(synShowShardFor, "expected a key, got end of directive")
	default:
		return syntaxErr(synShowShardFor, "the key must be an unquoted decimal integer, got ", t.desc())
	}
	if f := p.peek(); f.kind == tPunct && f.text == "." {
		return errorf("shard key ", quote(text+"."), " is not an integer")
	}
	key, err := router.KeyFromValue(text)
	if err != nil {
		return errorf(err.Error())
	}
	d.KeyColumn = col
	d.Key = key
	d.Shard = int(router.ShardOf(key))
	return nil
}

// migrate parses MIGRATE SHARD N | SHARDS A-B TO NAME and its options.
func (p *parser) migrate(d *Directive) (string, error) {
	d.Kind = MigrateShard
	syntax := synMigrate
	t := p.next()
	var err error
	switch {
	case t.is("SHARD"):
		if d.Shard, err = p.shardNumber(syntax); err != nil {
			return syntax, err
		}
		d.LastShard = d.Shard
	case t.is("SHARDS"):
		syntax = synMigrateRange
		if d.Shard, err = p.shardNumber(syntax); err != nil {
			return syntax, err
		}
		if dash := p.next(); dash.kind != tPunct || dash.text != "-" {
			return syntax, syntaxErr(syntax, "expected - between the first and the last shard, got ", dash.desc())
		}
		if d.LastShard, err = p.shardNumber(syntax); err != nil {
			return syntax, err
		}
		if d.LastShard < d.Shard {
			return syntax, errorf("shard range ", strconv.Itoa(d.Shard), "-", strconv.Itoa(d.LastShard), " ends before it starts")
		}
	default:
		return syntax, unknown("MIGRATE", t)
	}
	if err := p.expect("TO", syntax); err != nil {
		return syntax, err
	}
	if d.Datasource, err = p.name(syntax, "datasource"); err != nil {
		return syntax, err
	}
	seen := map[string]bool{}
	for p.peek().kind != tEOF {
		o := p.next()
		word := strings.ToUpper(o.text)
		if o.kind == tWord && seen[word] {
			return syntax, syntaxErr(syntax, word, " given twice")
		}
		seen[word] = true
		switch {
		case o.is("DATABASE"):
			d.Database, err = p.name(syntax, "database")
		case o.is("RATE"):
			d.Rate, err = p.number(syntax, "RATE", 0, maxRate)
		case o.is("PARALLEL") && syntax == synMigrateRange:
			var n int64
			n, err = p.number(syntax, "PARALLEL", 1, router.NumShards)
			d.Parallel = int(n)
		case o.is("AUTO"):
			d.Auto = true
		default:
			return syntax, syntaxErr(syntax, "unexpected ", o.desc())
		}
		if err != nil {
			return syntax, err
		}
	}
	return syntax, nil
}

// maxRate bounds RATE: far above what one shard's copy can do, low enough
// that no arithmetic on it overflows.
const maxRate = 1_000_000_000

// migration parses MIGRATION N VERB.
func (p *parser) migration(d *Directive) (string, error) {
	d.Kind = MigrationCommand
	var err error
	if d.Shard, err = p.shardNumber(synMigration); err != nil {
		return synMigration, err
	}
	t := p.next()
	for _, v := range []string{"PAUSE", "RESUME", "NEXT", "ROLLBACK", "CANCEL", "RATE", "READ", "PURGE"} {
		if t.is(v) {
			d.Verb = v
		}
	}
	switch d.Verb {
	case "":
		return synMigration, syntaxErr(synMigration, "expected PAUSE, RESUME, NEXT, ROLLBACK, CANCEL, RATE, READ PERCENT or PURGE, got ", t.desc())
	case "RATE":
		d.Rate, err = p.number(synMigration, "RATE", 0, maxRate)
	case "READ":
		if w := p.next(); !w.is("PERCENT") {
			return synMigration, syntaxErr(synMigration, "READ takes PERCENT P, got ", w.desc())
		}
		d.Percent, err = p.number(synMigration, "PERCENT", 0, 100)
	}
	return synMigration, err
}

// archive parses ARCHIVE SHARD N NOW | PAUSE | RESUME.
func (p *parser) archive(d *Directive) (string, error) {
	d.Kind = ArchiveCommand
	t := p.next()
	switch {
	case t.is("PAUSE"), t.is("RESUME"):
		d.Verb = strings.ToUpper(t.text)
		return synArchiveCmd, nil
	case t.is("SHARD"):
		var err error
		if d.Shard, err = p.shardNumber(synArchiveCmd); err != nil {
			return synArchiveCmd, err
		}
		if w := p.next(); !w.is("NOW") {
			return synArchiveCmd, syntaxErr(synArchiveCmd, "ARCHIVE SHARD N takes NOW, got ", w.desc())
		}
		d.Verb = "NOW"
		return synArchiveCmd, nil
	}
	return synArchiveCmd, syntaxErr(synArchiveCmd, "expected SHARD N NOW, PAUSE or RESUME, got ", t.desc())
}

func (p *parser) outbox(d *Directive) (string, error) {
	d.Kind = OutboxCommand
	t := p.next()
	if !t.is("RETRY") && !t.is("DISCARD") {
		return synOutbox, syntaxErr(synOutbox, "expected RETRY or DISCARD, got ", t.desc())
	}
	d.Verb = strings.ToUpper(t.text)
	id := p.next()
	if id.kind != tString || id.text == "" || len(id.text) > 3*maxName {
		return synOutbox, syntaxErr(synOutbox, d.Verb, " takes an entry id in quotes, as SHOW OUTBOX DEAD prints it, got ", id.desc())
	}
	d.Entry = id.text
	return synOutbox, nil
}

// number reads a decimal integer in [lo, hi] after the option word what.
func (p *parser) number(syntax, what string, lo, hi int64) (int64, error) {
	t := p.next()
	if t.kind != tWord || !digits(t.text) {
		return 0, syntaxErr(syntax, what, " takes a whole number, got ", t.desc())
	}
	n, err := strconv.ParseInt(t.text, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, errorf(what, " ", quote(t.raw), " is outside ", strconv.FormatInt(lo, 10), "..", strconv.FormatInt(hi, 10))
	}
	if f := p.peek(); f.kind == tPunct && f.text == "." {
		return 0, errorf(what, " ", quote(t.raw+"."), " is not a whole number")
	}
	return n, nil
}
