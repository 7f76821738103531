package router

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/router/txlog"
)

// Coordinator commits transactions that wrote on several partitions with
// two-phase commit (PostgreSQL's PREPARE TRANSACTION; the tenants need
// max_prepared_transactions > 0):
//
//  1. PREPARE TRANSACTION 'sluice_<coordinator>_<n>_<partition>' on every
//     writing partition, all at once; if any fails, ROLLBACK PREPARED the
//     others and the client gets the failure (nothing committed);
//  2. the decision is written to the decision log and fsynced;
//  3. COMMIT PREPARED on every partition; then "done" in the log.
//
// A crash between 1 and 2 leaves prepared transactions without a decision:
// Recover rolls them back (presumed abort). A crash after 2 leaves a
// decision: Recover commits whatever is still prepared. The client hears
// COMMIT only after 3, or after 2 when a COMMIT PREPARED failed (the
// decision stands and Recover finishes it).
type Coordinator struct {
	log   *txlog.Log
	start int64 // this process's start (Unix ns): gids are unique across restarts
	seq   atomic.Uint64
	// Hook, when set, is called at "prepared" (every partition prepared,
	// nothing decided) and "decided" (logged, no COMMIT PREPARED sent):
	// fault-injection points for tests.
	Hook func(point string)
	mu   struct {
		sync.Mutex
		inflight map[string]bool // gids being committed now: Recover leaves them be
	}
}

// NewCoordinator returns a coordinator logging to l.
func NewCoordinator(l *txlog.Log) *Coordinator {
	c := &Coordinator{log: l, start: time.Now().UnixNano()}
	c.mu.inflight = map[string]bool{}
	return c
}

func (c *Coordinator) prefix() string { return "sluice_" + c.log.ID() + "_" }

func (c *Coordinator) hook(point string) {
	if c.Hook != nil {
		c.Hook(point)
	}
}

// Commit commits the transaction open on parts (every one in a block,
// every one wrote). On an error nothing is committed and no partition is
// left in the block.
func (c *Coordinator) Commit(ctx context.Context, ks, user string, parts []*backend) *pgError {
	gid := fmt.Sprintf("%s%x%d", c.prefix(), c.start, c.seq.Add(1))
	c.mu.Lock()
	c.mu.inflight[gid] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.mu.inflight, gid)
		c.mu.Unlock()
	}()
	names := make([]string, len(parts))
	for i, b := range parts {
		names[i] = ks + "/" + b.part.Name
	}
	prepared, pe := c.onAll(parts, func(b *backend) string {
		return fmt.Sprintf("PREPARE TRANSACTION '%s_%s'", gid, b.part.Name)
	})
	if pe != nil {
		c.onAll(prepared, func(b *backend) string {
			return fmt.Sprintf("ROLLBACK PREPARED '%s_%s'", gid, b.part.Name)
		})
		for _, b := range parts {
			b.begun = false // a failed PREPARE ends the transaction too
		}
		return pe
	}
	c.hook("prepared")
	if err := c.log.Commit(txlog.Decision{GID: gid, User: user, Parts: names}); err != nil {
		c.onAll(parts, func(b *backend) string {
			return fmt.Sprintf("ROLLBACK PREPARED '%s_%s'", gid, b.part.Name)
		})
		return errorf("58030", "two-phase commit: logging the decision: %v", err)
	}
	c.hook("decided")
	done, pe := c.onAll(parts, func(b *backend) string {
		return fmt.Sprintf("COMMIT PREPARED '%s_%s'", gid, b.part.Name)
	})
	if pe == nil && len(done) == len(parts) {
		c.log.Done(gid)
	}
	return nil
}

// onAll sends one statement to every backend at once and returns those
// where it succeeded, and the first failure.
func (c *Coordinator) onAll(bs []*backend, sql func(*backend) string) (ok []*backend, first *pgError) {
	xs := make([]*exchange, len(bs))
	for i, b := range bs {
		xs[i] = &exchange{}
		xs[i].add('Q', msg{typ: 'Q', body: append([]byte(sql(b)), 0)}, true)
		if err := b.send(xs[i]); err != nil && first == nil {
			first = errorf(codeConnectionFailure, "partition %s: %v", b.part.Name, err)
		}
	}
	for i, b := range bs {
		if b.broken {
			continue
		}
		res, err := b.recv(xs[i], discard{})
		switch {
		case err != nil:
			if first == nil {
				first = errorf(codeConnectionFailure, "partition %s: %v", b.part.Name, err)
			}
		case res.err != nil:
			if first == nil {
				first = res.err
			}
		default:
			ok = append(ok, b)
		}
	}
	return ok, first
}

// Dialer opens a server session to a partition as user, outside any
// transaction's gate (recovery).
type Dialer func(ctx context.Context, part keyspace.Partition, user string) (*Server, error)

// Recover resolves this coordinator's prepared transactions on every
// partition of ks: decided ones are committed, others rolled back, except
// those being committed now. lister is a user who may read
// pg_prepared_xacts; each transaction is resolved as its owner. It returns
// how many it committed and rolled back.
func (c *Coordinator) Recover(ctx context.Context, ks *keyspace.Keyspace, lister string, dial Dialer) (committed, rolledBack int, err error) {
	for _, part := range ks.Partitions {
		found, err := c.prepared(ctx, part, lister, dial)
		if err != nil {
			return committed, rolledBack, err
		}
		for _, p := range found {
			gid := strings.TrimSuffix(p.gid, "_"+part.Name)
			c.mu.Lock()
			busy := c.mu.inflight[gid]
			c.mu.Unlock()
			if busy {
				continue
			}
			verb := "ROLLBACK"
			if _, ok := c.log.Decided(gid); ok {
				verb = "COMMIT"
			}
			srv, err := dial(ctx, part, p.owner)
			if err != nil {
				return committed, rolledBack, fmt.Errorf("recover %s on %s as %s: %w", p.gid, part.Name, p.owner, err)
			}
			b := &backend{part: part, srv: srv}
			pe, err := b.simple(fmt.Sprintf("%s PREPARED '%s'", verb, p.gid))
			srv.Close()
			if err == nil && pe != nil {
				err = pe
			}
			if err != nil {
				return committed, rolledBack, fmt.Errorf("recover %s on %s: %w", p.gid, part.Name, err)
			}
			if verb == "COMMIT" {
				committed++
			} else {
				rolledBack++
			}
		}
	}
	c.forget(ctx, ks, lister, dial)
	return committed, rolledBack, nil
}

// forget marks done the decisions of ks no partition holds prepared any more.
func (c *Coordinator) forget(ctx context.Context, ks *keyspace.Keyspace, lister string, dial Dialer) {
	left := map[string]bool{}
	for _, part := range ks.Partitions {
		found, err := c.prepared(ctx, part, lister, dial)
		if err != nil {
			return
		}
		for _, p := range found {
			left[strings.TrimSuffix(p.gid, "_"+part.Name)] = true
		}
	}
	for _, d := range c.log.Pending() {
		if len(d.Parts) > 0 && strings.HasPrefix(d.Parts[0], ks.Name+"/") && !left[d.GID] {
			c.mu.Lock()
			busy := c.mu.inflight[d.GID]
			c.mu.Unlock()
			if !busy {
				c.log.Done(d.GID)
			}
		}
	}
}

type preparedXact struct{ gid, owner string }

// prepared lists this coordinator's prepared transactions in part's database.
func (c *Coordinator) prepared(ctx context.Context, part keyspace.Partition, user string, dial Dialer) ([]preparedXact, error) {
	srv, err := dial(ctx, part, user)
	if err != nil {
		return nil, fmt.Errorf("recover: partition %s: %w", part.Name, err)
	}
	defer srv.Close()
	b := &backend{part: part, srv: srv}
	x := &exchange{}
	q := fmt.Sprintf("SELECT gid, owner FROM pg_prepared_xacts WHERE database = current_database() AND starts_with(gid, '%s')", c.prefix())
	x.add('Q', msg{typ: 'Q', body: append([]byte(q), 0)}, false)
	cp := newCapture(1)
	res, err := b.run(x, cp)
	if err == nil && res.err != nil {
		err = res.err
	}
	if err != nil {
		return nil, fmt.Errorf("recover: partition %s: %w", part.Name, err)
	}
	var out []preparedXact
	for _, m := range cp.msgs[0] {
		if m.typ == 'D' {
			out = append(out, preparedXact{gid: string(column(m.body, 0)), owner: string(column(m.body, 1))})
		}
	}
	return out, nil
}
