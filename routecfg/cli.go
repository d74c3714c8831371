package routecfg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"gopkg.in/yaml.v3"

	"github.com/convoy-im/convoy/router"
)

// CLIUsage is the help text of the `routes` command.
const CLIUsage = `usage: convoy routes <command> [arguments]

The route table of a cluster is one versioned document in etcd at
/convoy/<cluster>/routes. Every proxy watches it and swaps in each new valid
version; an invalid document is refused here and by every proxy.

Commands:

  routes init [--datasource SPEC]... [--dbs N] [--tables-per-db N]
              [--default-datasource NAME] [--force]
  routes init --file FILE [--force]
      Create the document (version 1). Fails if one exists, unless --force.

      --datasource NAME=USER@HOST:PORT[,password_env=VAR|,password_file=PATH]
            A MySQL server; repeat the flag for each one. The password is
            never stored in etcd: each proxy reads it from the environment
            variable or file named here. Example:
              --datasource ds0=convoy@10.0.0.1:3306,password_env=CONVOY_DS0_PW
            TLS options (each proxy reads the files locally):
              tls=disabled|preferred|required|verify-ca|verify-identity
                  default: preferred on a loopback address, required on
                  any other
              tls_ca=PATH            CA certificates (PEM) for verify-*
              tls_cert=PATH,tls_key=PATH   a client certificate
              tls_server_name=NAME   the name verify-identity checks
      --dbs N
            Number of databases im_0..im_<N-1> (default 8), spread evenly
            over the datasources in the order given; N must divide 1024 and
            be a multiple of the number of datasources.
      --tables-per-db N
            0 (default): one physical table per shard, the production layout
            (8 databases x 128 tables). N>0: N tables per database, each
            shared by several consecutive shards, for development and tests.
      --default-datasource NAME
            Where unsharded tables go (default: the first datasource).
      --file FILE
            Take the whole document from a JSON or YAML file instead of
            building it from the flags above.
      --force
            Replace an existing document. It is stored as the next version, so
            proxies take it, and it still fails rather than overwrite a change
            made concurrently.

  routes show
      Print the document as indented JSON: version, datasources, shard
      ranges. It never contains a password.

  routes apply FILE
      Store an edited document (JSON or YAML, e.g. the output of show). Its
      "version" must be the version etcd holds now, the one you showed and
      edited; it is stored as version+1 and the new version is printed. If
      someone applied a change in between, apply fails: show again, redo
      the edit, apply again.
`

// RunCLI runs `routes <args>` against the cluster's document in etcd, writing
// results to stdout. Errors are complete sentences meant for the operator.
func RunCLI(ctx context.Context, args []string, cli *clientv3.Client, cluster string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, CLIUsage)
		return errors.New("routes: missing command (init, show or apply)")
	}
	store := NewStore(cli, cluster)
	switch args[0] {
	case "init":
		return cliInit(ctx, store, args[1:], stdout)
	case "show":
		if len(args) > 1 {
			return fmt.Errorf("routes show takes no arguments, got %q", strings.Join(args[1:], " "))
		}
		return cliShow(ctx, store, stdout)
	case "apply":
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help") {
			fmt.Fprint(stdout, CLIUsage)
			return nil
		}
		if len(args) != 2 {
			return errors.New("routes apply needs exactly one argument: the document file (JSON or YAML)")
		}
		return cliApply(ctx, store, args[1], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, CLIUsage)
		return nil
	default:
		return fmt.Errorf("routes: unknown command %q (want init, show or apply; see `routes help`)", args[0])
	}
}

type datasourceFlags []router.Datasource

func (d *datasourceFlags) String() string { return fmt.Sprint(len(*d)) }

func (d *datasourceFlags) Set(spec string) error {
	ds, err := ParseDatasource(spec)
	if err != nil {
		return err
	}
	*d = append(*d, ds)
	return nil
}

// ParseDatasource parses NAME=USER@HOST:PORT[,password_env=VAR|,password_file=PATH]
// followed by TLS options: tls=MODE, tls_ca=PATH, tls_cert=PATH, tls_key=PATH,
// tls_server_name=NAME (router.DatasourceTLS).
func ParseDatasource(spec string) (router.Datasource, error) {
	const form = "NAME=USER@HOST:PORT[,password_env=VAR|,password_file=PATH][,tls=MODE,tls_ca=PATH,tls_cert=PATH,tls_key=PATH,tls_server_name=NAME]"
	name, rest, ok := strings.Cut(spec, "=")
	if !ok || strings.TrimSpace(name) == "" {
		return router.Datasource{}, fmt.Errorf("datasource %q is not of the form %s", spec, form)
	}
	parts := strings.Split(rest, ",")
	at := strings.LastIndex(parts[0], "@")
	if at <= 0 {
		return router.Datasource{}, fmt.Errorf("datasource %q needs a user: %s", spec, form)
	}
	ds := router.Datasource{Name: name, User: parts[0][:at], Addr: parts[0][at+1:]}
	host, port, err := net.SplitHostPort(ds.Addr)
	if p, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || p <= 0 || p > 65535 {
		return router.Datasource{}, fmt.Errorf("datasource %q has address %q; want HOST:PORT with a port in 1..65535", name, ds.Addr)
	}
	for _, opt := range parts[1:] {
		k, v, _ := strings.Cut(opt, "=")
		switch k {
		case "password_env":
			if !validEnvName(v) {
				return router.Datasource{}, fmt.Errorf("datasource %q: password_env=%q is not an environment variable name", name, v)
			}
			ds.PasswordEnv = v
		case "password_file":
			if v == "" {
				return router.Datasource{}, fmt.Errorf("datasource %q: password_file needs a path", name)
			}
			ds.PasswordFile = v
		case "tls":
			ds.TLS.Mode = v
		case "tls_ca":
			ds.TLS.CAFile = v
		case "tls_cert":
			ds.TLS.CertFile = v
		case "tls_key":
			ds.TLS.KeyFile = v
		case "tls_server_name":
			ds.TLS.ServerName = v
		case "password", "pass", "pwd":
			return router.Datasource{}, fmt.Errorf("datasource %q: passwords are never stored in etcd; name where each proxy reads it with password_env=VAR or password_file=PATH", name)
		default:
			return router.Datasource{}, fmt.Errorf("datasource %q: unknown option %q (want password_env, password_file, tls, tls_ca, tls_cert, tls_key or tls_server_name)", name, k)
		}
	}
	if ds.PasswordEnv != "" && ds.PasswordFile != "" {
		return router.Datasource{}, fmt.Errorf("datasource %q: give password_env or password_file, not both", name)
	}
	return ds, nil
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range s {
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

func cliInit(ctx context.Context, store *Store, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("routes init", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; help goes to stdout
	var (
		dss       datasourceFlags
		dbs       = fs.Int("dbs", 8, "")
		perDB     = fs.Int("tables-per-db", 0, "")
		defaultDS = fs.String("default-datasource", "", "")
		file      = fs.String("file", "", "")
		force     = fs.Bool("force", false, "")
	)
	fs.Var(&dss, "datasource", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, CLIUsage)
			return nil
		}
		return fmt.Errorf("routes init: %v (see `routes help`)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("routes init: unexpected argument %q (see `routes help`)", fs.Arg(0))
	}

	var doc router.Document
	if *file != "" {
		var layoutFlags []string
		fs.Visit(func(f *flag.Flag) {
			if f.Name != "file" && f.Name != "force" {
				layoutFlags = append(layoutFlags, "--"+f.Name)
			}
		})
		if len(layoutFlags) > 0 {
			return fmt.Errorf("routes init: --file takes the whole document; drop %s", strings.Join(layoutFlags, ", "))
		}
		var err error
		if doc, err = ReadDocFile(*file); err != nil {
			return fmt.Errorf("routes init: %w", err)
		}
	} else {
		if len(dss) == 0 {
			return errors.New("routes init: give at least one --datasource NAME=USER@HOST:PORT (or --file FILE)")
		}
		if *perDB < 0 {
			return fmt.Errorf("routes init: --tables-per-db must be 0 (one table per shard) or positive, not %d", *perDB)
		}
		var err error
		if *perDB == 0 {
			doc, err = router.DefaultLayout(dss, *dbs)
		} else {
			doc, err = router.SharedLayout(dss, *dbs, *perDB)
		}
		if err != nil {
			return fmt.Errorf("routes init: cannot build the layout: %w", err)
		}
		if *defaultDS != "" {
			doc.DefaultDatasource = *defaultDS
		}
	}

	if *force {
		v, err := store.Replace(ctx, doc)
		if err != nil {
			return fmt.Errorf("routes init --force: %w", err)
		}
		fmt.Fprintf(stdout, "stored routes for cluster %q as version %d (key %s)\n", store.Cluster(), v, store.Key())
		return nil
	}
	if doc.Version <= 0 {
		doc.Version = 1
	}
	if err := store.Init(ctx, doc); err != nil {
		if errors.Is(err, ErrExists) {
			msg := fmt.Sprintf("routes init: cluster %q already has a route document", store.Cluster())
			if cur, gerr := store.Get(ctx); gerr == nil {
				msg += fmt.Sprintf(" (version %d)", cur.Version)
			}
			return errors.New(msg + "; change it with `routes show` and `routes apply`, or replace it with `routes init --force`")
		}
		return fmt.Errorf("routes init: %w", err)
	}
	fmt.Fprintf(stdout, "initialized routes for cluster %q at version %d: %d datasources, %d shard ranges (key %s)\n",
		store.Cluster(), doc.Version, len(doc.Datasources), len(doc.Shards), store.Key())
	return nil
}

func cliShow(ctx context.Context, store *Store, stdout io.Writer) error {
	doc, err := store.Get(ctx)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("routes show: cluster %q has no route document yet; create one with `routes init`", store.Cluster())
	}
	if err != nil {
		return fmt.Errorf("routes show: %w", err)
	}
	// Decoding into router.Document dropped any field it does not define, so
	// even a hand-written "password" in etcd is never printed.
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("routes show: [BUG] cannot encode the document: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "%s\n", b)
	return err
}

func cliApply(ctx context.Context, store *Store, path string, stdout io.Writer) error {
	doc, err := ReadDocFile(path)
	if err != nil {
		return fmt.Errorf("routes apply: %w", err)
	}
	v, err := store.Apply(ctx, doc)
	if err != nil {
		return fmt.Errorf("routes apply %s: %w", path, err)
	}
	fmt.Fprintf(stdout, "applied routes for cluster %q: version %d\n", store.Cluster(), v)
	return nil
}

// ReadDocFile reads a document from JSON (.json, or content starting with
// '{') or YAML. Unknown fields are errors: a typo such as "datasorce" must
// not silently drop part of the routes.
func ReadDocFile(path string) (router.Document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return router.Document{}, fmt.Errorf("cannot read the document file: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return router.Document{}, fmt.Errorf("document file %s is empty", path)
	}
	var doc router.Document
	ext := strings.ToLower(filepath.Ext(path))
	isJSON := ext == ".json" || (ext != ".yaml" && ext != ".yml" && bytes.TrimSpace(b)[0] == '{')
	if isJSON {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&doc)
		if err == nil && dec.More() {
			err = errors.New("trailing data after the document")
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		err = dec.Decode(&doc)
	}
	if err != nil {
		if msg := err.Error(); strings.Contains(msg, `unknown field "password"`) || strings.Contains(msg, "field password not found") {
			return router.Document{}, fmt.Errorf("document file %s contains a password; passwords are never stored in etcd: name password_env or password_file per datasource instead", path)
		}
		return router.Document{}, fmt.Errorf("document file %s is not a valid route document: %v", path, err)
	}
	return doc, nil
}
