// Package admin answers Convoy's directives, the DBA's commands written as
// an SQL comment (/*+ convoy ... */, parsed by proxy/directive): SHOW
// ROUTES, SHOW SHARD FOR, SHOW DATASOURCES, SHOW PROXIES, SHOW SHARD
// STATS / HEALTH / SIZES, PLAN EXPANSION, RELOAD ROUTES, the migration and
// archive commands, SHOW SEARCH STATUS, and the targeting directives
// (shard=N, datasource=NAME, all) that run the statement after them where
// they say.
//
// It is apart from proxy/engine, which executes statements, because a
// directive is not one: it reads the routes, the shard statistics and the
// datasources, or asks the process around the engine (etcd's proxy list,
// the migration and archive records, the capacity planner, the search
// index) through hooks cmd/convoy wires (Config). What it needs of the
// engine is two small interfaces declared here, Engine and Session, which
// *engine.Engine and *engine.Session satisfy; neither package imports the
// other. Package proxy tells a directive from SQL once per statement
// (Parse), and runs Run inside engine.Session.Answer, which keeps a
// statement's bookkeeping (process list, diagnostics area, reserved
// variables, error classification).
package admin
