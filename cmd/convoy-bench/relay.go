package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
)

// runRelay is the reference "one extra hop": accept, dial the target, copy
// bytes both ways with one goroutine per direction. It never looks at the
// bytes, so its cost is the physical floor for any proxy on this machine.
func runRelay(args []string) error {
	fs := flag.NewFlagSet("relay", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:13320", "address to listen on")
	to := fs.String("to", "127.0.0.1:3306", "address to forward to")
	fs.Parse(args)

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "relay: %s -> %s\n", ln.Addr(), *to)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func(c net.Conn) {
			b, err := net.Dial("tcp", *to)
			if err != nil {
				log.Printf("relay: dial %s: %v", *to, err)
				c.Close()
				return
			}
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				io.Copy(dst, src)
				// Half-close so the other side sees EOF, then let the
				// other direction finish.
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(b, c)
			go pipe(c, b)
			<-done
			<-done
			c.Close()
			b.Close()
		}(c)
	}
}
