package pgcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicedb/sluice/internal/pgtest"
	"github.com/sluicedb/sluice/pgcluster"
)

// BenchmarkReloadCPU measures the CPU one configuration reload costs the
// server (the postmaster and all its processes, every thread), with the
// compact postgresql.conf Init writes and with initdb's commented one
// (postgresql.conf.sample appended). Reported as cpu-ms/reload:
//
//	go test -run XXX -bench ReloadCPU -benchtime 15x ./pgcluster
func BenchmarkReloadCPU(b *testing.B) {
	for _, variant := range []string{"compact", "commented"} {
		b.Run(variant, func(b *testing.B) {
			c := pgtest.New(b, pgcluster.Options{})
			if variant == "commented" {
				share, err := c.Run(context.Background(), "pg_config", "--sharedir")
				if err != nil {
					b.Skipf("pg_config: %v", err)
				}
				extra, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(share)), "postgresql.conf.sample"))
				if err != nil {
					b.Skipf("no postgresql.conf.sample: %v", err)
				}
				conf := filepath.Join(c.Dir, "postgresql.conf")
				cur, err := os.ReadFile(conf)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.WriteFile("postgresql.conf", string(extra)+"\n"+string(cur)); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			pm, err := c.PID()
			if err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				before := treeCPU(pm)
				if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
					b.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond) // every process has re-read by then
				// This session re-reads at its next command; count that too.
				if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
					b.Fatal(err)
				}
				cpu += treeCPU(pm) - before
			}
			b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/reload")
		})
	}
}

// treeCPU sums the on-CPU time (/proc/PID/task/TID/schedstat) of pid and
// its children.
func treeCPU(pid int) time.Duration {
	var total time.Duration
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p != pid && parentOf(p) != pid {
			continue
		}
		tasks, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "task"))
		for _, t := range tasks {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "task", t.Name(), "schedstat"))
			if err != nil {
				continue
			}
			f := strings.Fields(string(b))
			if len(f) > 0 {
				ns, _ := strconv.ParseInt(f[0], 10, 64)
				total += time.Duration(ns)
			}
		}
	}
	return total
}

func parentOf(pid int) int {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
