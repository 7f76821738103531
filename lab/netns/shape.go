package netns

import (
	"fmt"
	"strconv"
)

// Shape caps h's link at mbit megabits per second (1e6 bits) in each
// direction, whatever the traffic's other end: a tbf qdisc on the egress of
// both of its veth ends, with a burst of 4 ms at that rate (at least 64 KiB,
// so that one GSO packet of a veth fits) and a queue of up to 20 ms. 0
// removes the cap.
func (h *Host) Shape(mbit float64) error {
	if mbit < 0 || mbit > 100000 || mbit != mbit {
		return fmt.Errorf("netns: rate %v Mbit/s: want 0..100000", mbit)
	}
	ends := [][2]string{{h.NS, "eth0"}, {h.net.router, h.routerIf}}
	for _, e := range ends {
		if mbit == 0 {
			tc("-n", e[0], "qdisc", "del", "dev", e[1], "root") // absent: nothing to remove
			continue
		}
		bits, burst, _ := shaping(mbit)
		if err := tc("-n", e[0], "qdisc", "replace", "dev", e[1], "root", "tbf",
			"rate", bits, "burst", burst, "latency", "20ms"); err != nil {
			return fmt.Errorf("netns: shape %s: %w", h.Name, err)
		}
	}
	return nil
}

// ShapePath caps the traffic between hosts a and b at mbit megabits per
// second (1e6 bits) each way, leaving their traffic with anyone else
// unshaped: a point-to-point link between two sites. On the router's
// egress to each of them, an htb class for packets from the other (a u32
// filter on the source subnet) with rate = ceil = mbit, a burst of 4 ms at
// that rate (at least 64 KiB) and a byte FIFO of 20 ms at that rate; other
// packets take an unshaped default class.
func (n *Net) ShapePath(a, b *Host, mbit float64) error {
	switch {
	case a == nil || b == nil || a == b || a.net != n || b.net != n:
		return fmt.Errorf("netns: shape path: want two different hosts of this net")
	case !(mbit > 0 && mbit <= 100000):
		return fmt.Errorf("netns: rate %v Mbit/s: want 0..100000, not 0", mbit)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.htb == nil {
		n.htb = map[string]bool{}
	}
	bits, burst, queue := shaping(mbit)
	for _, d := range [][2]*Host{{a, b}, {b, a}} {
		from, dev := d[0], d[1].routerIf
		if !n.htb[dev] {
			if err := tc("-n", n.router, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "ffff"); err != nil {
				return fmt.Errorf("netns: shape path: %w", err)
			}
			if err := tc("-n", n.router, "class", "add", "dev", dev, "parent", "1:", "classid", "1:ffff", "htb", "rate", "10gbit", "quantum", "65536"); err != nil {
				return fmt.Errorf("netns: shape path: %w", err)
			}
			n.htb[dev] = true
		}
		class := fmt.Sprintf("1:%x", from.index)
		steps := [][]string{
			{"class", "replace", "dev", dev, "parent", "1:", "classid", class, "htb", "rate", bits, "ceil", bits, "burst", burst, "cburst", burst, "quantum", "65536"},
			{"qdisc", "replace", "dev", dev, "parent", class, "handle", fmt.Sprintf("%x:", from.index+1), "bfifo", "limit", queue},
			{"filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "handle", fmt.Sprintf("800::%x", from.index), "u32",
				"match", "ip", "src", fmt.Sprintf("10.%d.%d.0/24", n.id, from.index), "flowid", class},
		}
		for _, s := range steps {
			if err := tc(append([]string{"-n", n.router}, s...)...); err != nil {
				return fmt.Errorf("netns: shape path %s→%s: %w", from.Name, d[1].Name, err)
			}
		}
	}
	return nil
}

// shaping is a cap of mbit Mbit/s as tc arguments: the rate in bit/s, a
// burst of 4 ms at that rate (at least 64 KiB, one GSO packet), and a queue
// of 20 ms at that rate (at least 128 KiB), both in bytes.
func shaping(mbit float64) (rate, burst, queue string) {
	bits := int64(mbit * 1e6)
	return strconv.FormatInt(bits, 10) + "bit", strconv.FormatInt(max(bits/8*4/1000, 64<<10), 10), strconv.FormatInt(max(bits/8*20/1000, 128<<10), 10)
}
