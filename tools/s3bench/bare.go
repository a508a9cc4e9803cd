package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// bareServer is a plain net/http server that does the least an object server must: GET
// answers a fixed body from memory, PUT reads and drops the body. Measured with the same
// client, it is the ceiling this machine allows.
type bareServer struct {
	srv *http.Server
	url string
}

func startBare(body []byte) (*bareServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	length := strconv.Itoa(len(body))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			w.Header().Set("Content-Length", length)
			w.Write(body)
		case http.MethodPut:
			io.Copy(io.Discard, r.Body)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	})
	b := &bareServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, url: "http://" + ln.Addr().String()}
	go b.srv.Serve(ln)
	return b, nil
}

func (b *bareServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if b.srv.Shutdown(ctx) != nil {
		b.srv.Close()
	}
}
