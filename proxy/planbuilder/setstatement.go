package planbuilder

import (
	"regexp"
	"slices"
	"strings"

	"github.com/convoy-im/convoy/proxy/sqlerr"
	"github.com/convoy-im/convoy/rewrite"
)

// SET STATEMENT var = value [, ...] FOR statement is MariaDB's way of
// giving one statement its own settings (the usual one: a per-query
// max_statement_time). The parser does not know it: the text is split at
// the FOR that ends a valid SET, and the statement runs with the variables
// on top of the session's, on whatever backend connections it uses (they
// are synced to the session's own again by the next statement).

var setStatementPrefix = regexp.MustCompile(`(?is)^\s*set\s+statement\s+`)

// statementVars are the variables SET STATEMENT may set through Convoy:
// the server's own limits and optimizer settings. Variables Convoy reads
// or keeps itself (sql_mode, character sets, time_zone, autocommit,
// transaction characteristics) are refused: SET SESSION them.
var statementVars = []string{
	"big_tables", "div_precision_increment", "eq_range_index_dive_limit", "expensive_subquery_limit",
	"foreign_key_checks", "group_concat_max_len", "histogram_size", "in_predicate_conversion_threshold",
	"innodb_lock_wait_timeout", "join_buffer_size", "join_cache_level", "lock_wait_timeout", "long_query_time",
	"max_heap_table_size", "max_join_size", "max_length_for_sort_data", "max_sort_length", "max_statement_time",
	"net_read_timeout", "net_write_timeout", "optimizer_prune_level", "optimizer_search_depth", "optimizer_switch",
	"optimizer_use_condition_selectivity", "query_cache_type", "sort_buffer_size", "sql_big_selects",
	"sql_select_limit", "tmp_memory_table_size", "tmp_table_size", "unique_checks", "use_stat_tables",
}

// planSetStatement plans a SET STATEMENT ... FOR statement (false: sql is
// not one).
func planSetStatement(sql string, ctx Context) (*Plan, bool, error) {
	loc := setStatementPrefix.FindStringIndex(sql)
	if loc == nil {
		return nil, false, nil
	}
	rest := sql[loc[1]:]
	for _, at := range rewrite.WordOffsets(rest, "FOR") {
		stmts, err := ctx.Parser.Parse("SET " + rest[:at])
		if err != nil || len(stmts) != 1 {
			continue
		}
		a, err := rewrite.Analyze(stmts[0])
		if err != nil || a.Kind != rewrite.KindSet {
			continue
		}
		if len(a.Sharded)+len(a.Unsharded) > 0 {
			// The values go to the backends as written, unchecked by the
			// account's privileges: constants only.
			return nil, true, sqlerr.Errorf(sqlerr.NotSupported, "SET STATEMENT ... FOR takes constant values through Convoy, not values read from tables")
		}
		vars := map[string]string{}
		for _, v := range a.SetVars {
			if v.Global || v.User || v.NextTx || !slices.Contains(statementVars, v.Name) {
				return nil, true, sqlerr.Errorf(sqlerr.NotSupported, "SET STATEMENT %s ... FOR is not supported through Convoy: it takes %s; set other variables with SET SESSION", v.Name, strings.Join(statementVars, ", "))
			}
			SetSysVar(vars, v.Name, v.Value)
		}
		inner := strings.TrimSpace(rest[at+len("FOR"):])
		if setStatementPrefix.MatchString(inner) {
			return nil, true, sqlerr.Errorf(sqlerr.Syntax, "You have an error in your SQL syntax: SET STATEMENT cannot nest")
		}
		pl, err := Build(inner, ctx)
		if err != nil {
			return nil, true, err
		}
		pl.StmtSet = vars // (a new plan: Build caches nothing)
		return pl, true, nil
	}
	return nil, false, nil
}

// SetSysVar sets a system variable in m as the session variables backend
// connections carry are kept (@@name; DEFAULT removes it).
func SetSysVar(m map[string]string, name, value string) {
	if strings.EqualFold(value, "DEFAULT") {
		delete(m, "@@"+name)
		return
	}
	m["@@"+name] = value
}
