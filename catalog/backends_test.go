package catalog

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicedb/sluice/internal/etcdtest"
)

// etcdShared is the one-member etcd every etcd test of the package shares
// (each with its own prefix), started by TestMain.
var etcdShared *etcdtest.Cluster

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "catalog-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	etcdShared, err = etcdtest.StartDir(dir, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	etcdShared.Close()
	os.Exit(code)
}

var prefixes atomic.Int64

// backend opens catalogs on one store: each call of open is another handle
// on the same records (a reopened file; another client of the same etcd
// prefix as the same agent).
type backend struct {
	name string
	open func(t *testing.T) *Catalog
}

// backends returns a fresh, empty store of every kind.
func backends(t *testing.T) []backend {
	path := filepath.Join(t.TempDir(), FileName)
	prefix := fmt.Sprintf("/test%d", prefixes.Add(1))
	return []backend{
		{"bbolt", func(t *testing.T) *Catalog {
			t.Helper()
			c, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			return fakeClock(c)
		}},
		{"etcd", func(t *testing.T) *Catalog {
			t.Helper()
			return fakeClock(openEtcd(t, etcdShared.Endpoints, prefix, "a1"))
		}},
	}
}

func openEtcd(t *testing.T, endpoints []string, prefix, agent string) *Catalog {
	t.Helper()
	c, err := OpenEtcd(EtcdOptions{Endpoints: endpoints, Prefix: prefix, Agent: agent, LeaseTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// eachBackend runs test once per backend, each on an empty store.
func eachBackend(t *testing.T, test func(t *testing.T, open func() *Catalog)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { test(t, func() *Catalog { t.Helper(); return b.open(t) }) })
	}
}

// fakeClock makes c's clock tick one second per transaction from a fixed time.
func fakeClock(c *Catalog) *Catalog {
	t0 := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	var n atomic.Int64
	c.now = func() time.Time { return t0.Add(time.Duration(n.Add(1)) * time.Second) }
	return c
}
