package qstashdev_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/outboxkit/outboxkit/qstash/qstashdev"
)

// serveOn serves srv on ln until a request through ln is answered, then
// closes srv. It returns Serve's error if Serve gave up first, nil if the
// server answered.
func serveOn(t *testing.T, srv *qstashdev.Server, ln net.Listener, token string) error {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+port+"/v2/keys", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	answered := make(chan int, 1)
	go func() {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Do(req)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	select {
	case err := <-served:
		<-answered
		srv.Close()
		return err
	case status := <-answered:
		srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve after Close: %v, want http.ErrServerClosed", err)
		}
		if status != http.StatusOK {
			t.Fatalf("GET /v2/keys on %s: status %d", ln.Addr(), status)
		}
		return nil
	}
}

func listenAny(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatalf("listen on all interfaces: %v", err)
	}
	return ln
}

// The default token is printed in Upstash's documentation: on any address
// other than loopback it lets everyone on the network publish, read and
// delete messages. Serving there needs a token of one's own.
func TestServeRefusesPublicTokenOffLoopback(t *testing.T) {
	t.Parallel()
	for _, tok := range []string{"", qstashdev.DefaultToken} {
		srv, err := qstashdev.New(qstashdev.Config{Token: tok})
		if err != nil {
			t.Fatal(err)
		}
		ln := listenAny(t)
		err = serveOn(t, srv, ln, qstashdev.DefaultToken)
		if !errors.Is(err, qstashdev.ErrPublicToken) || !strings.Contains(err.Error(), "Config.Token") || !strings.Contains(err.Error(), ln.Addr().String()) {
			t.Fatalf("Token %q on %s: Serve = %v, want ErrPublicToken naming the address and Config.Token", tok, ln.Addr(), err)
		}
		if _, err := ln.Accept(); err == nil {
			t.Fatal("the refused listener is still open")
		}
	}

	srv, err := qstashdev.New(qstashdev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.ListenAndServe(context.Background(), "0.0.0.0:0"); !errors.Is(err, qstashdev.ErrPublicToken) {
		t.Fatalf("ListenAndServe on 0.0.0.0: %v, want ErrPublicToken", err)
	}
}

func TestServeLoopbackWithPublicToken(t *testing.T) {
	t.Parallel()
	srv, err := qstashdev.New(qstashdev.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := serveOn(t, srv, listenLocal(t), qstashdev.DefaultToken); err != nil {
		t.Fatalf("Serve on loopback: %v", err)
	}
}

func TestServeOffLoopbackWithOwnToken(t *testing.T) {
	t.Parallel()
	srv, err := qstashdev.New(qstashdev.Config{Token: "not-the-public-one"})
	if err != nil {
		t.Fatal(err)
	}
	if err := serveOn(t, srv, listenAny(t), "not-the-public-one"); err != nil {
		t.Fatalf("Serve on 0.0.0.0 with a token of its own: %v", err)
	}
}
