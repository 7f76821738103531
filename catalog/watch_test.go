package catalog

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// placementView is what a watcher built from WatchPlacements' changes.
type placementView struct {
	mu   sync.Mutex
	byID map[int64]Placement
	full int // Full changes seen
}

func (v *placementView) apply(ch PlacementChange) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if ch.Full {
		v.byID = map[int64]Placement{}
		v.full++
	}
	for _, p := range ch.Put {
		v.byID[p.Tenant] = p
	}
	for _, id := range ch.Deleted {
		delete(v.byID, id)
	}
}

// waitFor waits until the view's placement of id satisfies ok.
func (v *placementView) waitFor(t *testing.T, id int64, what string, ok func(Placement) bool) Placement {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		v.mu.Lock()
		p, found := v.byID[id]
		v.mu.Unlock()
		if found && ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watcher never saw tenant %d %s; last %+v (found %v)", id, what, p, found)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchPlacements: a watcher follows a tenant's placement as two
// agents move it: created on a1 (its address there, epoch 1), switched by
// a1's driver under its lock (a2's address, epoch 2), taken over by a2
// (same address: same epoch). The source's later records keep the switched
// address; a driver that lost its lock cannot move the route back.
func TestWatchPlacements(t *testing.T) {
	a1 := openEtcd(t, etcdShared.Endpoints, "/watch", "a1")
	defer a1.Close()
	a2 := openEtcd(t, etcdShared.Endpoints, "/watch", "a2")
	defer a2.Close()
	a1.SetServing("h1", "app")
	a2.SetServing("h2", "app")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var v placementView
	done := make(chan error, 1)
	go func() {
		done <- WatchPlacements(ctx, WatchOptions{Endpoints: etcdShared.Endpoints, Prefix: "/watch", Logf: t.Logf}, v.apply)
	}()

	if err := a1.Update(func(tx *Tx) error { return tx.CreateTenant(Tenant{ID: 1, Name: "acme", Port: 5001, State: Running}) }); err != nil {
		t.Fatal(err)
	}
	v.waitFor(t, 1, "on a1 at epoch 1", func(p Placement) bool {
		return p.Addr == "h1:5001" && p.Epoch == 1 && p.Name == "acme" && p.Database == "app" && p.Agent == "a1"
	})
	if _, err := a1.SetTenantState(1, MigratingOut); err != nil {
		t.Fatal(err)
	}
	lk, err := a1.TryLock(context.Background(), "tenant/1")
	if err != nil {
		t.Fatal(err)
	}
	var epoch int64
	if err := lk.Update(func(tx *Tx) (err error) { epoch, err = tx.SwitchPlacement(1, "h2:6001"); return err }); err != nil || epoch != 2 {
		t.Fatalf("switch: epoch %d, %v; want 2", epoch, err)
	}
	v.waitFor(t, 1, "switched to a2 at epoch 2", func(p Placement) bool { return p.Addr == "h2:6001" && p.Epoch == 2 && p.Agent == "a1" })
	// a1's own later record of the tenant keeps the switched address.
	if err := a1.Update(func(tx *Tx) error {
		tn, err := tx.Tenant(1)
		if err != nil {
			return err
		}
		tn.Migration = "m1"
		return tx.PutTenant(tn)
	}); err != nil {
		t.Fatal(err)
	}
	if err := a2.PutTenant(Tenant{ID: 1, Name: "acme", Port: 6001, State: MigratingIn}); err != nil {
		t.Fatal(err)
	}
	if _, err := a2.SetTenantState(1, Running); err != nil {
		t.Fatal(err)
	}
	if _, err := a1.SetTenantState(1, Moved); err != nil {
		t.Fatal(err)
	}
	p := v.waitFor(t, 1, "running on a2", func(p Placement) bool { return p.Agent == "a2" && p.State == Running })
	if p.Addr != "h2:6001" || p.Epoch != 2 {
		t.Fatalf("placement after a2 took the tenant = %+v; want h2:6001 at epoch 2", p)
	}
	// A driver that lost its lock cannot move the route.
	if err := lk.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	err = lk.Update(func(tx *Tx) error { _, err := tx.SwitchPlacement(1, "h1:5001"); return err })
	if !errors.Is(err, ErrNotOwner) {
		t.Fatalf("a stale driver's switch: %v; want ErrNotOwner", err)
	}
	if ps, _ := a2.Placements(); len(ps) != 1 || ps[0].Addr != "h2:6001" || ps[0].Epoch != 2 {
		t.Fatalf("placements after the stale switch = %+v; want h2:6001 at epoch 2", ps)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("WatchPlacements: %v", err)
	}
	if v.full != 1 {
		t.Fatalf("full reads = %d; want 1 (no compaction, no lost watch)", v.full)
	}
}

// TestWatchCompacted: a watch resumed from a revision that was compacted
// away applies nothing and asks for a full read (watchFrom returns 0),
// which brings every placement as it is now.
func TestWatchCompacted(t *testing.T) {
	a1 := openEtcd(t, etcdShared.Endpoints, "/compact", "a1")
	defer a1.Close()
	a1.SetServing("h1", "app")
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcdShared.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	pfx := "/compact/shared/placement/"
	var v placementView
	rev, err := readPlacements(ctx, cli, pfx, v.apply)
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 3; id++ {
		if err := a1.Update(func(tx *Tx) error {
			return tx.CreateTenant(Tenant{ID: id, Name: "t", Port: 5000 + int(id), State: Running})
		}); err != nil {
			t.Fatal(err)
		}
	}
	now, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, now.Header.Revision); err != nil {
		t.Fatal(err)
	}
	var none placementView
	none.byID = map[int64]Placement{}
	if got := watchFrom(ctx, cli, pfx, rev, none.apply, t.Logf); got != 0 || len(none.byID) != 0 {
		t.Fatalf("watch from compacted revision %d: returned %d, applied %d placements; want 0 and none", rev+1, got, len(none.byID))
	}
	if _, err := readPlacements(ctx, cli, pfx, v.apply); err != nil {
		t.Fatal(err)
	}
	if len(v.byID) != 3 || v.byID[3].Addr != "h1:5003" || v.full != 2 {
		t.Fatalf("after the full read: %+v (%d full reads); want tenants 1-3, tenant 3 at h1:5003", v.byID, v.full)
	}
}
