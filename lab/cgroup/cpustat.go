package cgroup

import "github.com/sluicedb/sluice/monitor"

// CPUStat returns the group's CFS bandwidth counters (cpu/<name>/cpu.stat).
func (g *Group) CPUStat() (monitor.CPUStat, error) {
	return monitor.ReadCPUStat(g.path("cpu", "cpu.stat"))
}
