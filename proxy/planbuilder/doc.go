// Package planbuilder decides what Convoy does with one SQL statement,
// before it runs: Build parses and analyses the text (rewrite), and gives
// a Plan with one Op (Route, Scatter, History, InsertSeq, Passthrough, ...)
// and the facts the engine needs to run it: the template that names each
// shard's physical tables, where the shard key values are, which tiers
// may answer it, what it does to the session. It asks nothing of a
// datasource but, through its Context, the columns of a sharded table for
// an INSERT without a column list. Plan.String prints a plan on one line;
// the golden plans (testdata/plans.json) are those
// lines for every statement shape. The engine (proxy/engine) runs plans;
// see docs/architecture.md.
package planbuilder
