package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
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
		// A zone names an interface, not another address.
		{"::1%lo", "loopback"},
		{"::1%1", "loopback"},
		{"fe80::1%lo", "link-local"},
		{"fe80::1%eth0", "link-local"},
		{"ff02::1%lo", "multicast"},
		{"fd00::1%eth0", "ULA"},
		{"::ffff:127.0.0.1%lo", "loopback"},
		{"2606:4700:4700::1111%eth0", ""},
		// IPv6 forms carrying an IPv4 address are judged by it.
		{"::127.0.0.1", "loopback"},      // IPv4-compatible (::/96)
		{"::10.0.0.1", "RFC 1918"},       // IPv4-compatible
		{"::8.8.8.8", "IPv4-compatible"}, // deprecated: refused whatever it carries
		{"::127.0.0.1%lo", "loopback"},   // and zoned
		{"::ffff:0:7f00:1", "loopback"},  // SIIT IPv4-translated (::ffff:0:0:0/96)
		{"::ffff:0:a9fe:a9fe", "link-local"},
		{"::ffff:0:808:808", ""},
		{"2002:7f00:1::1", "loopback"}, // 6to4 (2002::/16), IPv4 in bits 16-48
		{"2002:c0a8:101::1", "RFC 1918"},
		{"2002:a9fe:a9fe::1", "link-local"},
		{"2002:808:808::1", ""},
		{"64:ff9b::127.0.0.1", "loopback"},
		{"::2", "this network"},
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

// TestHTTPDenyPrivateRefusesZonedIPv6Loopback: through the real http
// handler and the real deny-private client, a server on IPv6 loopback is
// not reached by a URL naming it with a zone ([::1%25lo], [::1%251]).
// Only ::1 is dialled; without the option the same URLs reach the server
// (so the test can fail). It is skipped when the machine has no IPv6
// loopback (TestDeniedRangeOfClassifiesAddresses judges zoned addresses
// without dialling).
func TestHTTPDenyPrivateRefusesZonedIPv6Loopback(t *testing.T) {
	var reached atomic.Int32
	secret := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Write([]byte("internal secret"))
	})
	params := func(url string) core.Task {
		return core.Task{RunID: "r", TaskRunID: "t", Attempt: 1, Params: json.RawMessage(`{"url": "` + url + `", "method": "GET"}`)}
	}
	lo := loopbackInterface(t)
	cases := []struct {
		name   string
		listen string
		url    func(port string) string
	}{
		{"IPv6 loopback with the interface's name as zone", "[::1]:0", func(port string) string { return "http://[::1%25" + lo.Name + "]:" + port + "/x" }},
		{"IPv6 loopback with the interface's index as zone", "[::1]:0", func(port string) string {
			return "http://[::1%25" + strconv.Itoa(lo.Index) + "]:" + port + "/x"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := net.Listen("tcp", c.listen)
			if err != nil {
				t.Skipf("no IPv6 loopback on this machine: %v", err)
			}
			srv := httptest.NewUnstartedServer(secret)
			srv.Listener.Close()
			srv.Listener = l
			srv.Start()
			t.Cleanup(srv.Close)
			_, port, _ := net.SplitHostPort(l.Addr().String())
			url := c.url(port)
			reached.Store(0)
			out, err := HTTP(NewHTTPClient(HTTPClientOptions{DenyPrivate: true}))(context.Background(), params(url))
			var de *DeniedAddressError
			if err == nil || !core.IsPermanent(err) || !errors.As(err, &de) || !strings.Contains(de.Range, "loopback") {
				t.Fatalf("%s: out %s err %v: want a permanent *DeniedAddressError naming loopback", url, out, err)
			}
			if n := reached.Load(); n != 0 {
				t.Fatalf("%s: the refused server was reached %d times", url, n)
			}
			out, err = HTTP(NewHTTPClient(HTTPClientOptions{}))(context.Background(), params(url))
			if err != nil || !strings.Contains(string(out), "internal secret") || reached.Load() != 1 {
				t.Fatalf("%s without deny-private: out %s err %v reached %d", url, out, err, reached.Load())
			}
		})
	}
}

// loopbackInterface returns the machine's loopback interface (its name
// and index make a zone).
func loopbackInterface(t *testing.T) net.Interface {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			return i
		}
	}
	t.Fatal("no loopback interface")
	return net.Interface{}
}
