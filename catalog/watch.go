package catalog

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// WatchOptions configure WatchPlacements.
type WatchOptions struct {
	// Endpoints and Prefix name the etcd catalog (Spec). Required.
	Endpoints []string
	Prefix    string
	// TLS, if set, is the client's TLS configuration (https endpoints).
	TLS *tls.Config
	// Logf, if set, receives one line per lost or resumed watch.
	Logf func(format string, args ...any)
}

// PlacementChange is what WatchPlacements passes on: either every
// placement (Full: a first read, or a re-read after the watched revision
// was compacted away — a tenant absent from it has none any more), or the
// placements written and the tenants whose placement was deleted since
// the last change.
type PlacementChange struct {
	Full     bool
	Put      []Placement
	Deleted  []int64
	Revision int64 // the etcd revision the change brings the watcher to
}

// watchRetry is how long WatchPlacements waits before reading again after
// a failed read (etcd unreachable).
const watchRetry = time.Second

// WatchPlacements follows the placement bucket of the etcd catalog o
// names, without opening it as an agent (it writes nothing): it reads
// every placement, then watches the bucket's keys from the revision after
// that read, calling apply with each change in revision order, until ctx
// ends (it returns nil then). A watch the client loses (a member
// restarted, no leader) resumes from the revision after the last change
// applied, so no change is missed or applied twice; a watch whose
// revision was compacted reads everything again (Full). apply runs on
// WatchPlacements' goroutine; a slow apply delays the next change only.
func WatchPlacements(ctx context.Context, o WatchOptions, apply func(PlacementChange)) error {
	if len(o.Endpoints) == 0 {
		return errors.New("catalog: watch: no endpoints")
	}
	if err := checkPrefix(o.Prefix); err != nil {
		return fmt.Errorf("catalog: watch: %w", err)
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: o.Endpoints, DialTimeout: 5 * time.Second, TLS: o.TLS, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("catalog: watch: %w", err)
	}
	defer cli.Close()
	pfx := o.Prefix + "/shared/" + string(bucketPlacement) + "/"
	rev := int64(0) // last revision applied; 0: read everything
	for ctx.Err() == nil {
		if rev == 0 {
			if rev, err = readPlacements(ctx, cli, pfx, apply); err != nil {
				logf("catalog: watch %s: %v (reading again in %s)", o.Prefix, err, watchRetry)
				sleepCtx(ctx, watchRetry)
				continue
			}
		}
		rev = watchFrom(ctx, cli, pfx, rev, apply, logf)
	}
	return nil
}

// readPlacements reads every placement under pfx and applies them as one
// Full change; it returns the read's revision.
func readPlacements(ctx context.Context, cli *clientv3.Client, pfx string, apply func(PlacementChange)) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, etcdOpTimeout)
	defer cancel()
	resp, err := cli.Get(rctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	ch := PlacementChange{Full: true, Put: []Placement{}, Revision: resp.Header.Revision}
	for _, kv := range resp.Kvs {
		if p, err := decodePlacement(kv.Value); err == nil {
			ch.Put = append(ch.Put, p)
		}
	}
	apply(ch)
	return resp.Header.Revision, nil
}

// watchFrom watches pfx from revision rev+1 and applies every change
// until the watch ends; it returns the last revision applied, or 0 when
// that revision was compacted (read everything again).
func watchFrom(ctx context.Context, cli *clientv3.Client, pfx string, rev int64, apply func(PlacementChange), logf func(string, ...any)) int64 {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if wr.CompactRevision != 0 {
			logf("catalog: watch %s: revision %d compacted (now %d): reading every placement again", pfx, rev+1, wr.CompactRevision)
			return 0
		}
		if err := wr.Err(); err != nil {
			logf("catalog: watch %s: %v (resuming from revision %d)", pfx, err, rev+1)
			sleepCtx(ctx, watchRetry)
			return rev
		}
		if len(wr.Events) == 0 {
			continue
		}
		last := wr.Events[len(wr.Events)-1].Kv.ModRevision
		ch := PlacementChange{Revision: last}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				if id, err := strconv.ParseInt(strings.TrimPrefix(string(ev.Kv.Key), pfx), 10, 64); err == nil {
					ch.Deleted = append(ch.Deleted, id)
				}
				continue
			}
			if p, err := decodePlacement(ev.Kv.Value); err == nil {
				ch.Put = append(ch.Put, p)
			}
		}
		apply(ch)
		rev = last
	}
	return rev
}

func decodePlacement(v []byte) (Placement, error) {
	var p Placement
	err := json.Unmarshal(v, &p)
	return p, err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
