// gotlspair: both ends of one crypto/tls connection in one Go process, for
// tests/bpf/test_bpf_gotls.c. It handshakes, prints "ready", and waits for a line on stdin
// before either end calls Read or Write (a Read already blocked when the probes attach would
// have no entry seen); then the client writes REQUEST, the server reads it and writes
// RESPONSE, the client reads it, and it prints "done".
//
// Usage: gotlspair REQUEST RESPONSE
package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"os"
	"time"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gotlspair:", err)
	os.Exit(1)
}

// selfSigned is a throwaway certificate for the server end.
func selfSigned() tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		fail(err)
	}
	tmpl := x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "gotlspair"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &key.PublicKey, key)
	if err != nil {
		fail(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func main() {
	if len(os.Args) != 3 {
		fail(fmt.Errorf("usage: gotlspair REQUEST RESPONSE"))
	}
	request, response := []byte(os.Args[1]), []byte(os.Args[2])
	ln, err := tls.Listen("tcp", "127.0.0.1:0",
		&tls.Config{Certificates: []tls.Certificate{selfSigned()}})
	if err != nil {
		fail(err)
	}
	start := make(chan struct{})
	served := make(chan error, 1)
	handshaken := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
		}
		handshaken <- err
		if err != nil {
			return
		}
		<-start
		buf := make([]byte, len(request))
		if _, err = io.ReadFull(c, buf); err == nil && string(buf) != string(request) {
			err = fmt.Errorf("server read %q", buf)
		}
		if err == nil {
			_, err = c.Write(response)
		}
		served <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		fail(err)
	}
	if err := <-handshaken; err != nil {
		fail(err)
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fail(err)
	}
	close(start)
	if _, err := c.Write(request); err != nil {
		fail(err)
	}
	buf := make([]byte, len(response))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != string(response) {
		fail(fmt.Errorf("client read %q: %v", buf, err))
	}
	if err := <-served; err != nil {
		fail(err)
	}
	fmt.Println("done")
}
