package pg

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// fencedHBA keeps the local and replication lines of a pg_hba.conf.
func fencedHBA(orig string) string {
	var b strings.Builder
	b.WriteString("# fenced by sluice: only local and replication connections\n")
	for _, line := range strings.Split(orig, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && !strings.HasPrefix(f[0], "#") && (f[0] == "local" || f[1] == "replication") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// admitHBA is fencedHBA plus, for each address in admit, the host lines of
// orig that cover it, narrowed to that single address (/32 or /128) and kept
// in their original order: a connection from an admitted address meets the
// same first matching line, so the same authentication, as before; any other
// TCP connection matches nothing and is refused.
//
// It reads address fields written as CIDR, as an address followed by a mask
// field, or as "all". It does not resolve host names, "samehost" or
// "samenet", and skips lines with quoted fields; if some admitted address is
// covered by no line it can read, it returns an error (the caller then
// fences without admitting anyone).
func admitHBA(orig string, admit []netip.Addr) (string, error) {
	var b strings.Builder
	b.WriteString(strings.TrimSuffix(fencedHBA(orig), "\n"))
	b.WriteString("\n# admitted by sluice (the router's own addresses), each under its original rules\n")
	covered := make(map[netip.Addr]bool, len(admit))
	for _, line := range strings.Split(orig, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[0], "host") || f[1] == "replication" || strings.Contains(line, `"`) {
			continue
		}
		rest := 4
		var pfx netip.Prefix
		switch a := f[3]; {
		case a == "all":
		case strings.Contains(a, "/"):
			p, err := netip.ParsePrefix(a)
			if err != nil {
				continue
			}
			pfx = p.Masked()
		default:
			ip, err := netip.ParseAddr(a)
			if err != nil {
				continue // a host name, samehost, samenet
			}
			m := net.ParseIP(f[4])
			if m == nil {
				continue
			}
			if ip.Is4() {
				m = m.To4()
			}
			ones, bits := net.IPMask(m).Size()
			if bits == 0 {
				continue // not a contiguous mask
			}
			pfx = netip.PrefixFrom(ip, ones).Masked()
			rest = 5
		}
		if rest >= len(f) {
			continue
		}
		for _, ip := range admit {
			if f[3] != "all" && !pfx.Contains(ip) {
				continue
			}
			covered[ip] = true
			fmt.Fprintf(&b, "%s %s %s %s %s\n", f[0], f[1], f[2], netip.PrefixFrom(ip, ip.BitLen()), strings.Join(f[rest:], " "))
		}
	}
	for _, ip := range admit {
		if !covered[ip] {
			return "", fmt.Errorf("no pg_hba.conf line the fence can narrow covers %s", ip)
		}
	}
	return b.String(), nil
}
