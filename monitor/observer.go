package monitor

import (
	"context"
	"time"

	"github.com/sluicedb/sluice/control"
)

// Observer assembles one control step's Observation from its sources. Any
// source may be nil: no latency signals, no host I/O (Host nil in the
// Observation), no CPU quota (CPU nil). The clients' own windows (Client)
// are signals next to the proxy's: a controller on the worst signal then
// steers by whichever is higher.
type Observer struct {
	Latency *ProxyLatency
	Client  *ClientLatency
	Host    *Host
	CPU     *CPUQuota
}

// Observe reads every source now; at is the step's time on the caller's clock.
func (o *Observer) Observe(ctx context.Context, at time.Time) control.Observation {
	obs := control.Observation{At: at}
	if o.Latency != nil {
		obs.Signals = o.Latency.Signals(ctx)
	}
	if o.Client != nil {
		obs.Signals = append(obs.Signals, o.Client.Signals(ctx)...)
	}
	if o.Host != nil {
		h := o.Host.Sample(at)
		obs.Host = &h
	}
	if o.CPU != nil {
		c := o.CPU.Sample()
		obs.CPU = &c
	}
	return obs
}
