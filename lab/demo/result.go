package demo

import (
	"math"
	"time"

	"github.com/sluicedb/sluice/lab/workload"
	"github.com/sluicedb/sluice/loop"
)

// Result is the demo's summary; its JSON keys are `sluice demo --json`'s.
// A latency is −1 when no transaction (or loop step) had one in its span.
//
// "The copy" is the part of the migration the control loop paces: from the
// demo's request to start the migration until the proxy held the tenant's
// new transactions for the handover (migration.Record.HeldAt) — the
// snapshot's start-up and data files, then catch-up and warm. A client
// latency "during the copy" is the mean of the workload's transactions that
// completed in that span, each from its arrival in the workload's queue to
// its commit (the queue wait for a free connection included, as Slacker
// measures); those the handover's freeze delayed complete after it and are
// not counted, so the handover's cost is FreezeMs and
// MigrationMeanLatencyMs.
type Result struct {
	// SetpointMs is the mean latency the loop was asked to hold the
	// clients at during the migration, ms: Options.Setpoint, or
	// SetpointRule of BaselineCalmLatencyMs.
	SetpointMs float64 `json:"setpoint_ms"`
	// BaselineMeanLatencyMs is the clients' mean latency before the
	// migration, ms: the workload alone, over Options.Baseline after its
	// warm-up.
	BaselineMeanLatencyMs float64 `json:"baseline_mean_latency_ms"`
	// BaselineCalmLatencyMs is the lowest of the clients' mean latency over
	// any CalmWindow of the baseline, ms.
	BaselineCalmLatencyMs float64 `json:"baseline_calm_latency_ms"`
	// AchievedMeanLatencyMs is the clients' mean latency during the copy, ms.
	AchievedMeanLatencyMs float64 `json:"achieved_mean_latency_ms"`
	// ProxyMeanLatencyMs is the mean of the control loop's inputs during
	// the copy, ms: the proxy's 3 s latency window read at each step (one a
	// second) that fell in the copy — the measure the loop steers by. It
	// lacks the clients' queue wait (ClientQueueMs) and their own hop to the
	// proxy and back.
	ProxyMeanLatencyMs float64 `json:"proxy_mean_latency_ms"`
	// ClientQueueMs is the part of AchievedMeanLatencyMs the transactions
	// spent in the workload's queue before a connection took them, ms: the
	// generator's hand-off, and in a stall the wait for a free connection.
	ClientQueueMs float64 `json:"client_queue_ms"`
	// CopySeconds is the copy's length, seconds.
	CopySeconds float64 `json:"copy_seconds"`
	// MigrationSeconds is the migration's length, from the demo's request
	// to start it until the demo saw it committed (polled twice a second),
	// seconds.
	MigrationSeconds float64 `json:"migration_seconds"`
	// MigrationMeanLatencyMs is the clients' mean latency over the whole
	// migration, ms: the copy and the handover, with the transactions
	// completed up to MigrationSeconds.
	MigrationMeanLatencyMs float64 `json:"migration_mean_latency_ms"`
	// BytesCopied is what the copy moved, bytes.
	BytesCopied int64 `json:"bytes_copied"`
	// FreezeMs is the handover's freeze: how long the proxy held the
	// tenant's new transactions, ms.
	FreezeMs float64 `json:"freeze_ms"`
	// SourceCPUs is the source server's CPU quota, cores.
	SourceCPUs float64 `json:"source_cpus"`
	// WritesAcknowledged, WritesMissing and WritesDuplicated are the
	// workload's ledger checked row by row on the new owner: writes the
	// clients saw committed, and of those the ones absent or present twice.
	WritesAcknowledged int64 `json:"writes_acknowledged"`
	WritesMissing      int64 `json:"writes_missing"`
	WritesDuplicated   int64 `json:"writes_duplicated"`
}

// txSource is the part of workload.Runner the measures read.
type txSource interface {
	Transactions(from, to time.Duration) []workload.Tx
}

var _ txSource = (*workload.Runner)(nil)

// measure fills the migration's figures from mr and the workload's
// transactions.
func (r *Result) measure(mr migrated, txs txSource) {
	r.CopySeconds = (mr.hold - mr.start).Seconds()
	r.MigrationSeconds = (mr.end - mr.start).Seconds()
	lat, queue := clientMeans(txs.Transactions(mr.start, mr.hold))
	whole, _ := clientMeans(txs.Transactions(mr.start, mr.end))
	r.AchievedMeanLatencyMs, r.ClientQueueMs, r.MigrationMeanLatencyMs = orNone(lat), orNone(queue), orNone(whole)
	r.ProxyMeanLatencyMs = orNone(loopMean(mr.series, 0, (mr.hold - mr.start).Seconds()))
	if s := mr.m.Summary; s != nil {
		r.BytesCopied, r.FreezeMs = s.Bytes, s.FreezeMS
	}
}

// orNone is x, or −1 (no data) for NaN, which JSON cannot carry.
func orNone(x float64) float64 {
	if math.IsNaN(x) {
		return -1
	}
	return x
}

// clientMeans returns the mean latency (arrival to commit) and the mean
// queue wait (arrival to begin) of the transactions in txs that did not
// fail, ms; NaN when there are none.
func clientMeans(txs []workload.Tx) (latency, queue float64) {
	var lat, q time.Duration
	n := 0
	for _, tx := range txs {
		if tx.Failed {
			continue
		}
		lat += tx.End - tx.Arrival
		q += tx.Begin - tx.Arrival
		n++
	}
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	return ms(lat) / float64(n), ms(q) / float64(n)
}

// loopMean is the mean of the loop's latency windows (LatencyMs) of the
// steps at loop seconds in [from, to) that had data; NaN when none had.
func loopMean(series []loop.Point, from, to float64) float64 {
	var sum float64
	n := 0
	for _, p := range series {
		if p.T >= from && p.T < to && p.LatencyMs >= 0 {
			sum += p.LatencyMs
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
