package netns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The delay line: this kernel has no netem, so a fixed delay (and loss)
// between two hosts is added in user space, in the router.
//
// Model. Net.Delay(a, b, d, p) sends every IPv4 packet the router forwards
// between a and b (both directions) to a tun device, "dly", through policy
// routing (ip rule: arriving on a's link and bound for b's subnet, or the
// reverse → table 100 → dev dly). This process reads each packet from the
// tun, drops it with probability p (independently, from a seeded RNG),
// else holds it exactly d (one way) in a FIFO of its pair and direction and
// writes it back to the tun; arriving on dly, the packet follows the main
// table to its host. So the pair's round trip is 2·d plus the links'
// serialisation; order within a direction is kept (a constant delay
// cannot reorder); there is no jitter. Bandwidth is the links' tbf (Shape):
// the delay line itself has no rate, and holds up to bandwidth × d bytes
// (a FIFO holds at most fifoPackets packets; beyond that it drops, counted
// in DelayStats.Overflow). Packets between other hosts, and between a host
// and this process, do not pass through it.
//
// Cost: two system calls per packet in this process. The tun takes the
// kernel's segmentation offloads (IFF_VNET_HDR, TUNSETOFFLOAD): a TCP
// sender's GSO packets (up to 64 KiB) pass through whole, each read back
// with its virtio-net header and written back unchanged, so a 200 Mbit/s
// stream costs hundreds of packets per second, not the 17 000 of 1500-byte
// frames (which one reader did not keep up with: the tun's queue dropped,
// and TCP backed off to 80 % of the link).

const (
	tunName     = "dly"
	delayTable  = "100"
	fifoPackets = 1 << 16
	// vnetHdrLen is struct virtio_net_hdr's size, before each packet the
	// tun hands over or takes with IFF_VNET_HDR.
	vnetHdrLen = 10
	// tunSetOffload is TUNSETOFFLOAD, _IOW('T', 208, unsigned int); the
	// TUN_F_* bits are linux/if_tun.h's.
	tunSetOffload = 0x400454d0
	tunFCsum      = 0x01
	tunFTSO4      = 0x02
	tunFTSO6      = 0x04
	// maxPacket is the largest packet with its header: a GSO packet is
	// up to 64 KiB.
	maxPacket = vnetHdrLen + 65535
)

type pairKey struct{ src, dst byte } // third octets of the hosts' addresses

type pairLine struct {
	delay time.Duration
	loss  float64
	q     chan packet
}

type packet struct {
	due  time.Time
	data []byte
}

type delayLine struct {
	tun   *os.File
	mu    sync.Mutex
	pairs map[pairKey]*pairLine
	rng   *rand.Rand
	pool  sync.Pool
	stop  chan struct{}
	wg    sync.WaitGroup

	forwarded, dropped, overflow atomic.Int64
}

// DelayStats count the delay line's packets since the Net was made.
type DelayStats struct {
	Forwarded int64 `json:"forwarded"` // held and written back
	Dropped   int64 `json:"dropped"`   // dropped by the loss probability
	Overflow  int64 `json:"overflow"`  // dropped because a FIFO was full
}

// Delay adds a one-way delay oneWay (0..10 s) and a loss probability
// (0 ≤ loss < 1) to every packet between hosts a and b, in both
// directions, through the delay line (see its model above). Seed seeds the
// loss's RNG (the first call's seed is kept). Calling it again for the same
// pair changes the pair's delay and loss for packets read from then on.
func (n *Net) Delay(a, b *Host, oneWay time.Duration, loss float64, seed uint64) error {
	switch {
	case a == nil || b == nil || a == b || a.net != n || b.net != n:
		return errors.New("netns: delay: want two different hosts of this net")
	case oneWay < 0 || oneWay > 10*time.Second:
		return fmt.Errorf("netns: delay %v: want 0..10s", oneWay)
	case !(loss >= 0 && loss < 1):
		return fmt.Errorf("netns: loss %v: want 0 ≤ loss < 1", loss)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.delay == nil {
		dl, err := n.startDelayLine(seed)
		if err != nil {
			return err
		}
		n.delay = dl
	}
	for _, d := range [][2]*Host{{a, b}, {b, a}} {
		k := pairKey{byte(d[0].index), byte(d[1].index)}
		n.delay.mu.Lock()
		pl, ok := n.delay.pairs[k]
		if ok {
			pl.delay, pl.loss = oneWay, loss
		} else {
			pl = &pairLine{delay: oneWay, loss: loss, q: make(chan packet, fifoPackets)}
			n.delay.pairs[k] = pl
			n.delay.wg.Add(1)
			go n.delay.writer(pl)
		}
		n.delay.mu.Unlock()
		if ok {
			continue
		}
		if err := ip("-n", n.router, "rule", "add", "pref", "100", "iif", d[0].routerIf,
			"to", fmt.Sprintf("10.%d.%d.0/24", n.id, d[1].index), "lookup", delayTable); err != nil {
			return fmt.Errorf("netns: delay %s→%s: %w", d[0].Name, d[1].Name, err)
		}
	}
	return nil
}

// DelayStats returns the delay line's counts (zero when none runs).
func (n *Net) DelayStats() DelayStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.delay == nil {
		return DelayStats{}
	}
	return DelayStats{Forwarded: n.delay.forwarded.Load(), Dropped: n.delay.dropped.Load(), Overflow: n.delay.overflow.Load()}
}

// startDelayLine makes the tun device in the router, routes table 100 to
// it, and starts reading.
func (n *Net) startDelayLine(seed uint64) (*delayLine, error) {
	var fd int
	err := inNS(n.router, func() (err error) {
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("netns: /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(tunName)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("netns: TUNSETIFF: %w", err)
		}
		if err := unix.IoctlSetInt(fd, tunSetOffload, tunFCsum|tunFTSO4|tunFTSO6); err != nil {
			unix.Close(fd)
			return fmt.Errorf("netns: TUNSETOFFLOAD: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	dl := &delayLine{tun: os.NewFile(uintptr(fd), tunName), pairs: map[pairKey]*pairLine{},
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), stop: make(chan struct{})}
	dl.pool.New = func() any { return make([]byte, maxPacket) }
	for _, s := range [][]string{
		{"-n", n.router, "link", "set", tunName, "mtu", strconv.Itoa(n.mtu), "txqueuelen", "10000", "up"},
		{"-n", n.router, "route", "add", "default", "dev", tunName, "table", delayTable},
	} {
		if err := ip(s...); err != nil {
			dl.close()
			return nil, err
		}
	}
	dl.wg.Add(1)
	go dl.reader()
	return dl, nil
}

// reader reads packets from the tun and queues each in its pair's FIFO.
func (dl *delayLine) reader() {
	defer dl.wg.Done()
	for {
		buf := dl.pool.Get().([]byte)[:maxPacket]
		k, err := dl.tun.Read(buf)
		if err != nil {
			return // closed
		}
		now := time.Now()
		p := buf[:k] // virtio-net header, then the IP packet
		if k < vnetHdrLen+20 || p[vnetHdrLen]>>4 != 4 {
			dl.pool.Put(buf)
			continue // not IPv4: nothing of ours
		}
		dl.mu.Lock()
		pl := dl.pairs[pairKey{p[vnetHdrLen+14], p[vnetHdrLen+18]}]
		drop := pl == nil || (pl.loss > 0 && dl.rng.Float64() < pl.loss)
		var due time.Time
		if pl != nil {
			due = now.Add(pl.delay)
		}
		dl.mu.Unlock()
		if drop {
			dl.dropped.Add(1)
			dl.pool.Put(buf)
			continue
		}
		select {
		case pl.q <- packet{due: due, data: p}:
		default:
			dl.overflow.Add(1)
			dl.pool.Put(buf)
		}
	}
}

// writer writes pl's packets back to the tun when they are due.
func (dl *delayLine) writer(pl *pairLine) {
	defer dl.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		var p packet
		select {
		case p = <-pl.q:
		case <-dl.stop:
			return
		}
		if w := time.Until(p.due); w > 0 {
			t.Reset(w)
			select {
			case <-t.C:
			case <-dl.stop:
				return
			}
		}
		if _, err := dl.tun.Write(p.data); err == nil {
			dl.forwarded.Add(1)
		}
		dl.pool.Put(p.data[:cap(p.data)])
	}
}

func (dl *delayLine) close() {
	close(dl.stop)
	dl.tun.Close()
	dl.wg.Wait()
}
