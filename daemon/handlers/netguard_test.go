package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/flowforge/flowforge/core"
)

// TestDeniedRangeOfClassifiesAddresses judges a table of addresses without
// dialling any of them.
func TestDeniedRangeOfClassifiesAddresses(t *testing.T) {
	cases := []struct {
		ip     string
		denied string // a piece of the range name, "" for allowed
	}{
		{"127.0.0.1", "loopback"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"10.1.2.3", "RFC 1918"},
		{"172.16.0.1", "RFC 1918"},
		{"172.31.255.255", "RFC 1918"},
		{"192.168.1.1", "RFC 1918"},
		{"::ffff:192.168.1.1", "RFC 1918"},
		{"64:ff9b::10.0.0.1", "RFC 1918"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"fd00::1", "ULA"},
		{"fc12::1", "ULA"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"255.255.255.255", "reserved"},
		{"198.18.0.1", "benchmarking"},
		{"2001:db8::1", "documentation"},
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"172.32.0.1", ""},
		{"100.128.0.1", ""},
		{"192.169.0.1", ""},
		{"2606:4700:4700::1111", ""},
		{"64:ff9b::8.8.8.8", ""},
	}
	for _, c := range cases {
		got := deniedRangeOf(netip.MustParseAddr(c.ip))
		if c.denied == "" && got != "" || c.denied != "" && !strings.Contains(got, c.denied) {
			t.Errorf("deniedRangeOf(%s) = %q, want %q", c.ip, got, c.denied)
		}
	}
}

// listen starts a test server on addr (a loopback address).
func listen(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestHTTPDenyPrivateRefusesLoopbackAndRedirectsToIt: with deny-private the
// handler never reaches a loopback server, directly or through a redirect,
// and says so with a permanent error. Only 127.0.0.0/8 is dialled: for the
// redirect the refused set is narrowed to 127.0.0.2, so that the first hop
// (127.0.0.1) is allowed and the redirect target is not.
func TestHTTPDenyPrivateRefusesLoopbackAndRedirectsToIt(t *testing.T) {
	var reached atomic.Int32
	target := listen(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Write([]byte("internal secret"))
	}))
	front := listen(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/admin", http.StatusFound)
	}))
	params := func(url string) core.Task {
		return core.Task{RunID: "r", TaskRunID: "t", Attempt: 1, Params: json.RawMessage(`{"url": "` + url + `", "method": "GET"}`)}
	}
	only127002 := func(ip netip.Addr) string {
		if ip == netip.MustParseAddr("127.0.0.2") {
			return "loopback 127.0.0.2/32 (test)"
		}
		return ""
	}
	cases := []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"loopback directly", NewHTTPClient(HTTPClientOptions{DenyPrivate: true}), target.URL},
		{"loopback by name", NewHTTPClient(HTTPClientOptions{DenyPrivate: true}), strings.Replace(front.URL, "127.0.0.1", "localhost", 1)},
		{"redirect to a refused address", newHTTPClient(HTTPClientOptions{DenyPrivate: true}, only127002), front.URL},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := HTTP(c.client)(context.Background(), params(c.url))
			var de *DeniedAddressError
			if err == nil || !core.IsPermanent(err) || !errors.As(err, &de) || !strings.Contains(err.Error(), "--http-deny-private") {
				t.Fatalf("out %s err %v: want a permanent *DeniedAddressError naming --http-deny-private", out, err)
			}
			if n := reached.Load(); n != 0 {
				t.Fatalf("the refused server was reached %d times", n)
			}
		})
	}
	// Without the option the same redirect is followed (the test can fail).
	out, err := HTTP(NewHTTPClient(HTTPClientOptions{}))(context.Background(), params(front.URL))
	if err != nil || !strings.Contains(string(out), "internal secret") || reached.Load() != 1 {
		t.Fatalf("without deny-private: out %s err %v reached %d", out, err, reached.Load())
	}
}
