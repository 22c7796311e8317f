// Command kubeprobe is the program of the local Kubernetes tests' pods
// (test/e2e/localkube): a static binary in an image of its own, so a test
// needs no image from a registry.
//
//	kubeprobe serve ADDR   answer every HTTP request with "hello from HOSTNAME"
//	kubeprobe get URL      print the body of a GET (exit 1 on failure)
//	kubeprobe hello        print "hello from HOSTNAME"
//	kubeprobe sleep        block until SIGTERM
//	kubeprobe write FILE TEXT  write TEXT to FILE (a volume's)
//	kubeprobe resolve NAME     print NAME's addresses, sorted, one line
//	                           (the pod's resolv.conf: the cluster DNS)
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kubeprobe serve ADDR | get URL | hello | sleep | write FILE TEXT | resolve NAME")
		os.Exit(2)
	}
	host, _ := os.Hostname()
	switch os.Args[1] {
	case "serve":
		fmt.Printf("serving on %s\n", os.Args[2])
		err := http.ListenAndServe(os.Args[2], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s\n", host)
		}))
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	case "get":
		c := &http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, b)
	case "write":
		if len(os.Args) != 4 {
			fmt.Fprintln(os.Stderr, "usage: kubeprobe write FILE TEXT")
			os.Exit(2)
		}
		if err := os.WriteFile(os.Args[2], []byte(os.Args[3]), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "resolve":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, os.Args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		slices.Sort(addrs)
		fmt.Println(strings.Join(addrs, " "))
	case "hello":
		fmt.Printf("hello from %s\n", host)
	case "sleep":
		fmt.Println("sleeping")
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
	default:
		fmt.Fprintf(os.Stderr, "unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}
