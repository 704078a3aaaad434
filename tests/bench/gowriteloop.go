// gowriteloop: writeloop's --tls mode (tests/writeloop.c) with Go's crypto/tls, the cost of a
// traced Go TLS write for `make bench`.
//
// A reader process (this program again, started through a shell that exits at once, so that it
// is no descendant of the writer and a tracer of the writer does not follow it) connects over
// loopback TCP with TLS, sends one streaming HTTP request and drains
// the response. This process accepts it, prints `ready PID`, waits for a line on stdin (the
// benchmark attaches a tracer meanwhile), reads the request, then writes the response head and
// N SSE frames as HTTP chunks, one (*tls.Conn).Write each, and prints the CPU (the whole
// process's: goroutines move between threads) and wall time per write; it exits after a second
// line (or EOF).
//
// usage: gowriteloop -n FRAMES -tls PEM   (a certificate and its key in one file)
package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

const request = "POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\n" +
	"Content-Type: application/json\r\nContent-Length: 34\r\n\r\n" +
	"{\"model\":\"bench\",\"stream\":true}  "
const head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" +
	"Transfer-Encoding: chunked\r\n\r\n"

func die(what string, err error) {
	fmt.Fprintf(os.Stderr, "gowriteloop: %s: %v\n", what, err)
	os.Exit(1)
}

func reader(addr string) {
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		die("reader dial", err)
	}
	if _, err := c.Write([]byte(request)); err != nil {
		die("reader write", err)
	}
	io.Copy(io.Discard, c)
}

func cpuNs() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano() + ru.Stime.Nano())
}

// frame is an SSE frame of size bytes (JSON padded with content), wrapped as one chunk, as
// writeloop makes it.
func frame(size int) []byte {
	pre := "data: {\"choices\":[{\"delta\":{\"content\":\""
	post := "\"}}]}\n\n"
	return []byte(fmt.Sprintf("%x\r\n%s%s%s\r\n", size, pre,
		strings.Repeat("x", size-len(pre)-len(post)), post))
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "reader" {
		reader(os.Args[2])
		return
	}
	n := flag.Int("n", 100000, "frames")
	size := flag.Int("s", 280, "frame bytes")
	pem := flag.String("tls", "", "certificate and key (one PEM file)")
	flag.Parse()
	cert, err := tls.LoadX509KeyPair(*pem, *pem)
	if err != nil {
		die("certificate", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		die("listen", err)
	}
	rd := exec.Command("/bin/sh", "-c", `"$0" reader "$1" </dev/null >/dev/null &`,
		os.Args[0], ln.Addr().String())
	rd.Stderr = os.Stderr
	if err := rd.Run(); err != nil {
		die("reader", err)
	}
	raw, err := ln.Accept()
	if err != nil {
		die("accept", err)
	}
	srv := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{cert}})
	if err := srv.Handshake(); err != nil {
		die("handshake", err)
	}
	fmt.Printf("ready %d\n", os.Getpid())
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		os.Exit(1)
	}
	req := make([]byte, 1024)
	if _, err := srv.Read(req); err != nil {
		die("read request", err)
	}
	if _, err := srv.Write([]byte(head)); err != nil {
		die("write head", err)
	}
	f := frame(*size)
	c0, w0 := cpuNs(), time.Now()
	for i := 0; i < *n; i++ {
		if _, err := srv.Write(f); err != nil {
			die("write frame", err)
		}
	}
	c1, w1 := cpuNs(), time.Now()
	srv.Write([]byte("0\r\n\r\n"))
	srv.Close()
	fmt.Printf("frames=%d bytes_per_write=%d cpu_ns_per_write=%.1f wall_ns_per_write=%.1f\n",
		*n, len(f), (c1-c0)/float64(*n), float64(w1.Sub(w0).Nanoseconds())/float64(*n))
	in.ReadString('\n')
}
