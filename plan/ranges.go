package plan

import (
	"fmt"
	"strings"

	"github.com/sluicedb/sluice/keyspace"
)

// rangeMove validates move i, a key-range move, against the keyspace as
// the plan's earlier moves leave it (kss, updated) and resolves its
// partitions to their tenants and agents.
func rangeMove(i int, m MoveSpec, inv Inventory, kss map[string]*keyspace.Keyspace) (Move, error) {
	fail := func(format string, args ...any) (Move, error) {
		return Move{}, fmt.Errorf("plan: move %d: "+format, append([]any{i + 1}, args...)...)
	}
	if m.Tenant != "" {
		return fail("tenant and keyspace: a move moves a tenant or a key range, not both")
	}
	holder, ks, ok := inv.keyspace(m.Keyspace)
	if !ok {
		return fail("unknown keyspace %q", m.Keyspace)
	}
	if cur, ok := kss[m.Keyspace]; ok {
		ks = cur
	}
	if m.Range == "" || m.To == "" {
		return fail("a key-range move needs range and to (a partition of keyspace %s)", ks.Name)
	}
	table := m.Table
	if table == "" {
		roots := ks.Roots()
		if len(roots) != 1 {
			return fail("keyspace %s has several sharded tables (%s): give table", ks.Name, strings.Join(roots, ", "))
		}
		table = roots[0]
	}
	r, err := ks.ParseRange(table, m.Range)
	if err != nil {
		return fail("%v", unwrapInvalid(err))
	}
	spec, from, err := keyspace.Assign(ks, table, r, m.To)
	if err != nil {
		return fail("%v", unwrapInvalid(err))
	}
	switch {
	case len(from) == 0:
		return fail("keys %s of %s.%s are partition %s's already", r, ks.Name, table, m.To)
	case len(from) > 1:
		return fail("keys %s of %s.%s lie in partitions %s: one move per source partition", r, ks.Name, table, strings.Join(from, ", "))
	case m.From != "" && m.From != from[0]:
		return fail("keys %s of %s.%s are partition %s's, not %s", r, ks.Name, table, from[0], m.From)
	}
	next, err := ks.WithPlan(spec)
	if err != nil {
		return fail("%v", unwrapInvalid(err))
	}
	kss[ks.Name] = next
	mv := Move{Keyspace: ks.Name, Table: table, Range: r.String(), Holder: holder, Source: from[0], Dest: m.To, Status: Pending}
	for _, side := range []struct {
		part   string
		tenant *string
		agent  *string
	}{{from[0], &mv.SourceTenant, &mv.From}, {m.To, &mv.DestTenant, &mv.To}} {
		p, _ := ks.Partition(side.part)
		agent, tn, ok := inv.find(p.Tenant)
		if !ok {
			return fail("partition %s's tenant %s is on none of the agents", side.part, p.Tenant)
		}
		if tn.Busy != "" {
			return fail("partition %s's tenant %s %s", side.part, tn.Name, tn.Busy)
		}
		*side.tenant, *side.agent = tn.Name, agent
	}
	return mv, nil
}

// unwrapInvalid drops keyspace's "keyspace: invalid: " prefix: the plan's
// message names the move.
func unwrapInvalid(err error) string {
	return strings.TrimPrefix(err.Error(), keyspace.ErrInvalid.Error()+": ")
}

// partitionsStay refuses a plan that moves the tenant of a partition of a
// keyspace whose keys it also moves: a reconfiguration fences and pulls
// on every partition of its keyspace, each where the keyspace says it is.
func partitionsStay(moves []Move, inv Inventory) error {
	owner := map[string]int{} // partition tenant → a key-range move of its keyspace
	for j, m := range moves {
		if !m.IsRange() {
			continue
		}
		_, ks, _ := inv.keyspace(m.Keyspace)
		for _, p := range ks.Partitions {
			if _, ok := owner[p.Tenant]; !ok {
				owner[p.Tenant] = j
			}
		}
	}
	for i, m := range moves {
		if j, ok := owner[m.Tenant]; ok && !m.IsRange() {
			return fmt.Errorf("plan: move %d moves tenant %s, a partition of keyspace %s, whose keys move %d moves: put them in separate plans",
				i+1, m.Tenant, moves[j].Keyspace, j+1)
		}
	}
	return nil
}
