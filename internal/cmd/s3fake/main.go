// Command s3fake is an S3-compatible server for tests (gofakes3, objects in
// memory). It binds the address given by -addr (default a free loopback
// port chosen by the kernel, so no port is ever raced for) and prints
// "listening <host:port>" as its first line on stdout once it accepts
// connections. It serves path-style requests and creates buckets on first
// use.
//
// GET /_fault/latency?d=900ms makes every later read (GET, HEAD) wait that
// long before it is answered (d=0 ends it): a slow object store, for the
// cold tier's budget tests, without losing the objects a restart would.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("s3fake: %v", err)
	}
	fake := gofakes3.New(s3mem.New(), gofakes3.WithAutoBucket(true), gofakes3.WithLogger(gofakes3.DiscardLog()))
	s3 := fake.Server()
	var latency atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_fault/latency" {
			d, err := time.ParseDuration(r.URL.Query().Get("d"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			latency.Store(int64(d))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if d := time.Duration(latency.Load()); d > 0 && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		s3.ServeHTTP(w, r)
	})
	fmt.Printf("listening %s\n", ln.Addr())
	log.Fatal(http.Serve(ln, handler))
}
