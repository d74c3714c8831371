// Package mysqlrow encodes and decodes the rows of MySQL result sets as
// they travel on the wire: text-protocol rows split into values and built
// from them, and text rows rewritten as the binary protocol's (what a
// COM_STMT_EXECUTE client reads), byte for byte what MariaDB sends.
package mysqlrow
