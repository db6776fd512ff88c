// A minimal stand-in dflockd server for client-bound measurements: it answers `l`/`sl` with
// `ok <32 hex> <ttl>`, `e`/`se` with `acquired <32 hex> <ttl>` and `r`/`sr` with `ok` at once, keeps no state and never blocks, so the clients'
// own cost is what the benchmark measures. It is not dflockd; bench/run.js labels its rows as such.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "host:port")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	var seq atomic.Uint64
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(c, &seq)
	}
}

func serve(c net.Conn, seq *atomic.Uint64) {
	defer c.Close()
	c.(*net.TCPConn).SetNoDelay(true)
	r := bufio.NewReader(c)
	w := bufio.NewWriter(c)
	var lines [3]string
	for {
		for i := range lines {
			l, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines[i] = strings.TrimRight(l, "\r\n")
		}
		switch lines[0] {
		case "l", "sl":
			ttl := "33"
			if f := strings.Fields(lines[2]); len(f) >= 2 && lines[0] == "l" {
				ttl = f[1]
			}
			fmt.Fprintf(w, "ok %032x %s\n", seq.Add(1), ttl)
		case "e", "se":
			// `e`/`se` never wait: always granted at once (`DistributedLock` sends `e` for a blocking acquire).
			ttl := "33"
			if f := strings.Fields(lines[2]); lines[0] == "e" && len(f) == 1 {
				ttl = f[0]
			} else if lines[0] == "se" && len(f) == 2 {
				ttl = f[1]
			}
			fmt.Fprintf(w, "acquired %032x %s\n", seq.Add(1), ttl)
		case "r", "sr":
			w.WriteString("ok\n")
		case "n", "sn":
			w.WriteString("ok 33\n")
		default:
			w.WriteString("error\n")
		}
		// flush only when no further request is already buffered (pipelined requests get one write)
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return
			}
		}
	}
}
