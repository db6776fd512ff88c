// A stand-in for dflockd's Go cmd/bench, written here because the Go module proxy refuses the real module:
// the same shape (persistent connection per worker, own random key per worker, `l` timeout 30 lease 10 + `r`
// per round) speaking the protocol with net + bufio only. It is not the official Go client; bench/run.js
// labels it as a stand-in. Prints one JSON object: ops, seconds, opsPerSec, meanMs, p50Ms, p99Ms.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	workers := flag.Int("workers", 10, "concurrent workers")
	seconds := flag.Float64("seconds", 2, "run for this long")
	maxRounds := flag.Int("rounds", 0, "rounds per worker (0 = until -seconds)")
	server := flag.String("server", "127.0.0.1:6388", "host:port")
	flag.Parse()

	type worker struct {
		conn net.Conn
		r    *bufio.Reader
		w    *bufio.Writer
		key  string
	}
	ws := make([]*worker, *workers)
	for i := range ws {
		c, err := net.Dial("tcp", *server)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		c.(*net.TCPConn).SetNoDelay(true)
		ws[i] = &worker{c, bufio.NewReader(c), bufio.NewWriter(c), fmt.Sprintf("bench_go%d_%d", i, 100000+rand.Intn(9900000))}
	}
	req := func(w *worker, cmd, arg string) string {
		fmt.Fprintf(w.w, "%s\n%s\n%s\n", cmd, w.key, arg)
		if err := w.w.Flush(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		line, err := w.r.ReadString('\n')
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return strings.TrimRight(line, "\r\n")
	}
	round := func(w *worker) {
		reply := req(w, "l", "30 10")
		f := strings.Fields(reply)
		if len(f) != 3 || f[0] != "ok" {
			fmt.Fprintf(os.Stderr, "l: unexpected reply %q\n", reply)
			os.Exit(1)
		}
		if reply = req(w, "r", f[1]); reply != "ok" {
			fmt.Fprintf(os.Stderr, "r: unexpected reply %q\n", reply)
			os.Exit(1)
		}
	}
	for _, w := range ws {
		round(w) // warm-up
	}
	var mu sync.Mutex
	var lat []float64
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(time.Duration(*seconds * float64(time.Second)))
	for _, w := range ws {
		wg.Add(1)
		go func(w *worker) {
			defer wg.Done()
			var mine []float64
			for n := 0; *maxRounds == 0 || n < *maxRounds; n++ {
				t := time.Now()
				round(w)
				t1 := time.Now()
				mine = append(mine, float64(t1.Sub(t).Nanoseconds())/1e6)
				if !t1.Before(end) {
					break
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(w)
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	for _, w := range ws {
		w.conn.Close()
	}
	sort.Float64s(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		rank := p / 100 * float64(len(lat)-1)
		lo := int(rank)
		hi := lo
		if float64(lo) < rank {
			hi = lo + 1
		}
		return lat[lo] + (lat[hi]-lat[lo])*(rank-float64(lo))
	}
	sum := 0.0
	for _, v := range lat {
		sum += v
	}
	out, _ := json.Marshal(map[string]float64{
		"ops": float64(len(lat)), "seconds": secs, "opsPerSec": float64(len(lat)) / secs,
		"meanMs": sum / float64(len(lat)), "p50Ms": pct(50), "p99Ms": pct(99),
	})
	fmt.Println(string(out))
}
