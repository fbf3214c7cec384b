// Command nodeapp is the workload of the local cluster's tenant nodes: what
// `kubectl logs`, `exec` and `port-forward` talk to in the end-to-end tests.
//
//	nodeapp serve ADDR   writes "tick N" every second and answers HTTP on ADDR
//	nodeapp echo ARGS    writes ARGS and exits
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nodeapp serve ADDR | nodeapp echo ARGS...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "echo":
		fmt.Println(strings.Join(os.Args[2:], " "))
	case "serve":
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: nodeapp serve ADDR")
			os.Exit(2)
		}
		serve(os.Args[2])
	default:
		fmt.Fprintf(os.Stderr, "nodeapp: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(addr string) {
	host, _ := os.Hostname()
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintf(w, "nodeapp on %s\n", host)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil {
			fmt.Fprintln(os.Stderr, "nodeapp:", err)
			os.Exit(1)
		}
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 1; ; n++ {
		select {
		case <-signals:
			return
		case <-tick.C:
			fmt.Printf("tick %d\n", n)
		}
	}
}
