// Command s3fake is an S3-compatible server for tests (gofakes3, objects in
// memory). It binds the address given by -addr (default a free loopback
// port chosen by the kernel, so no port is ever raced for) and prints
// "listening <host:port>" as its first line on stdout once it accepts
// connections. It serves path-style requests and creates buckets on first
// use.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"

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
	fmt.Printf("listening %s\n", ln.Addr())
	log.Fatal(http.Serve(ln, fake.Server()))
}
