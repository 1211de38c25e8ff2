package handlers

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// HTTPTimeoutDefault is the http handler's whole-request timeout.
const HTTPTimeoutDefault = 30 * time.Second

// DeniedAddressError is returned (wrapped) by an http handler whose client
// refuses private addresses when a connection, the first or one after a
// redirect, would reach one. The http handler makes it permanent: the
// same URL resolves to the same kind of address next time.
type DeniedAddressError struct {
	// Addr is the address that would have been dialled ("127.0.0.1:8080").
	Addr string
	// Range names the refused range ("loopback 127.0.0.0/8").
	Range string
}

func (e *DeniedAddressError) Error() string {
	return fmt.Sprintf("address %s is in a refused range (%s; the worker runs with --http-deny-private)", e.Addr, e.Range)
}

// deniedRange is one address range a deny-private client refuses.
type deniedRange struct {
	prefix netip.Prefix
	name   string
}

// privateRanges returns every range --http-deny-private refuses: nothing a
// task reaches through one of them is the public internet, and each is
// where the worker's own neighbours live (its database and broker on
// loopback or the private network, cloud metadata on link-local).
func privateRanges() []deniedRange {
	r := func(p, name string) deniedRange { return deniedRange{netip.MustParsePrefix(p), name} }
	return []deniedRange{
		r("0.0.0.0/8", "this network (unspecified)"),
		r("10.0.0.0/8", "private (RFC 1918)"),
		r("100.64.0.0/10", "shared address space (CGNAT, RFC 6598)"),
		r("127.0.0.0/8", "loopback"),
		r("169.254.0.0/16", "link-local (cloud metadata)"),
		r("172.16.0.0/12", "private (RFC 1918)"),
		r("192.0.0.0/24", "IETF protocol assignments"),
		r("192.0.2.0/24", "documentation (TEST-NET-1)"),
		r("192.168.0.0/16", "private (RFC 1918)"),
		r("198.18.0.0/15", "benchmarking (RFC 2544)"),
		r("198.51.100.0/24", "documentation (TEST-NET-2)"),
		r("203.0.113.0/24", "documentation (TEST-NET-3)"),
		r("224.0.0.0/4", "multicast"),
		r("240.0.0.0/4", "reserved (and broadcast)"),
		r("::/128", "unspecified"),
		r("::1/128", "loopback"),
		r("::/96", "IPv4-compatible (deprecated, RFC 4291)"),
		r("64:ff9b:1::/48", "local-use IPv4/IPv6 translation (RFC 8215)"),
		r("100::/64", "discard-only (RFC 6666)"),
		r("2001:db8::/32", "documentation"),
		r("fc00::/7", "unique local (ULA)"),
		r("fe80::/10", "link-local"),
		r("fec0::/10", "site-local (deprecated)"),
		r("ff00::/8", "multicast"),
	}
}

// deniedRangeOf returns the name and prefix of the refused range holding
// ip, or "" when ip may be dialled. A zone ("::1%lo", "fe80::1%eth0") is
// ignored: it names the interface, not the address, and netip.Prefix never
// contains a zoned address. An IPv6 address carrying an IPv4 address is
// judged by that IPv4 address first (see embeddedIPv4): ::ffff:10.0.0.1,
// 64:ff9b::10.0.0.1, ::ffff:0:10.0.0.1, 2002:a00:1::1 and ::10.0.0.1 are all
// refused as RFC 1918; the deprecated IPv4-compatible range ::/96 is
// refused whatever it carries.
func deniedRangeOf(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	if v4, ok := embeddedIPv4(ip); ok {
		if name := rangeOf(v4); name != "" {
			return name
		}
	}
	return rangeOf(ip)
}

// rangeOf returns the name and prefix of the first privateRanges entry
// holding ip (an unzoned address), or "".
func rangeOf(ip netip.Addr) string {
	for _, r := range privateRanges() {
		if r.prefix.Contains(ip) {
			return r.name + " " + r.prefix.String()
		}
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address an IPv6 address ip (unmapped,
// unzoned) carries, and whether it carries one: the last 32 bits of a
// NAT64 address of the well-known prefix (64:ff9b::/96, RFC 6052), of an
// SIIT IPv4-translated address (::ffff:0:0:0/96, RFC 2765) and of an
// IPv4-compatible address (::/96 but for :: and ::1, RFC 4291), or bits
// 16 to 48 of a 6to4 address (2002::/16, RFC 3056).
func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	last := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	for _, p := range []string{"64:ff9b::/96", "::ffff:0:0:0/96", "::/96"} {
		if netip.MustParsePrefix(p).Contains(ip) {
			if p == "::/96" && (ip == netip.IPv6Unspecified() || ip == netip.IPv6Loopback()) {
				return netip.Addr{}, false
			}
			return last, true
		}
	}
	if netip.MustParsePrefix("2002::/16").Contains(ip) {
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	}
	return netip.Addr{}, false
}

// denyControl returns a net.Dialer Control function refusing every address
// denied names a range for. It runs after name resolution, on the very
// address about to be dialled, so a name that resolves to a private
// address, a DNS answer that changes between checks (rebinding) and a
// redirect to a private host are all caught.
func denyControl(denied func(netip.Addr) string) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return &DeniedAddressError{Addr: address, Range: "unparsable address"}
		}
		if name := denied(ap.Addr()); name != "" {
			return &DeniedAddressError{Addr: address, Range: name}
		}
		return nil
	}
}

// HTTPClientOptions configures NewHTTPClient.
type HTTPClientOptions struct {
	// Timeout bounds a whole request, redirects included; 0 means
	// HTTPTimeoutDefault.
	Timeout time.Duration
	// DenyPrivate refuses every connection to a loopback, private (RFC 1918,
	// ULA), link-local, CGNAT, unspecified, multicast, documentation or
	// reserved address (the list is in privateRanges). It also disables
	// HTTP(S)_PROXY: through a proxy the dialled address would be the
	// proxy's, and the check would judge the wrong host.
	DenyPrivate bool
}

// NewHTTPClient returns the http handler's client: a clone of Go's default
// transport (proxy from the environment, HTTP/2, keep-alives) with
// opt.Timeout, or, with opt.DenyPrivate, no proxy and a dialer that refuses
// private addresses with a *DeniedAddressError.
func NewHTTPClient(opt HTTPClientOptions) *http.Client {
	return newHTTPClient(opt, deniedRangeOf)
}

// newHTTPClient is NewHTTPClient refusing what denied names (tests narrow
// it, so that they dial loopback only).
func newHTTPClient(opt HTTPClientOptions, denied func(netip.Addr) string) *http.Client {
	if opt.Timeout <= 0 {
		opt.Timeout = HTTPTimeoutDefault
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if opt.DenyPrivate {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: denyControl(denied)}
		tr.Proxy = nil
		tr.DialContext = d.DialContext
	}
	return &http.Client{Timeout: opt.Timeout, Transport: tr}
}

// isDenied reports whether err came from a deny-private dialer.
func isDenied(err error) bool {
	var de *DeniedAddressError
	return errors.As(err, &de)
}
