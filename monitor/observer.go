package monitor

import (
	"context"
	"time"

	"github.com/sluicedb/sluice/control"
)

// Observer assembles one control step's Observation from its sources. Either
// source may be nil: no latency signals, or no host I/O (Host nil in the
// Observation).
type Observer struct {
	Latency *ProxyLatency
	Host    *Host
}

// Observe reads every source now; at is the step's time on the caller's clock.
func (o *Observer) Observe(ctx context.Context, at time.Time) control.Observation {
	obs := control.Observation{At: at}
	if o.Latency != nil {
		obs.Signals = o.Latency.Signals(ctx)
	}
	if o.Host != nil {
		h := o.Host.Sample(at)
		obs.Host = &h
	}
	return obs
}
