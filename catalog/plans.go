package catalog

import (
	"encoding/json"
	"fmt"

	"github.com/sluicedb/sluice/plan"
)

// The plans bucket maps a migration plan's ID to its state (package plan's
// Plan): the driving agent writes it after every change of a move or of
// the plan, so a restarted driver resumes from it.

// Plan returns plan id, or ErrNotFound.
func (c *Catalog) Plan(id string) (plan.Plan, error) {
	var p plan.Plan
	err := c.View(func(tx *Tx) error {
		v := tx.tx.Bucket(bucketPlans).Get([]byte(id))
		if v == nil {
			return fmt.Errorf("catalog: plan %q: %w", id, ErrNotFound)
		}
		return json.Unmarshal(v, &p)
	})
	return p, err
}

// PutPlan writes p under its ID.
func (t *Tx) PutPlan(p plan.Plan) error {
	v, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("catalog: put plan %q: %w", p.ID, err)
	}
	return t.tx.Bucket(bucketPlans).Put([]byte(p.ID), v)
}

// PutPlan is Update + Tx.PutPlan.
func (c *Catalog) PutPlan(p plan.Plan) error {
	return c.Update(func(tx *Tx) error { return tx.PutPlan(p) })
}

// Plans returns every plan, in ID order (IDs start with their creation
// time, so oldest first).
func (c *Catalog) Plans() ([]plan.Plan, error) {
	var out []plan.Plan
	err := c.View(func(tx *Tx) error {
		return tx.tx.Bucket(bucketPlans).ForEach(func(k, v []byte) error {
			var p plan.Plan
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("catalog: plan %q: %w", k, err)
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err
}
