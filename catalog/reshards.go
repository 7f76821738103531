package catalog

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/sluicedb/sluice/keyspace"
	"github.com/sluicedb/sluice/reshard"
)

// The reshards bucket maps a keyspace's name to its latest live
// reconfiguration (package reshard): the one in progress, or the last one
// finished. Chunk completion is not stored here: each destination
// partition records it itself (its incoming fence rows are gone exactly
// when the chunk's pull committed there), so the record changes only at
// phase boundaries.
type Reshard struct {
	ID       string `json:"id"`
	Keyspace string `json:"keyspace"`
	// Phase: preparing and switching roll back when the driver restarts
	// (nothing was switched); moving resumes; done and failed are final.
	Phase     string            `json:"phase"`
	Method    string            `json:"method"`
	Request   json.RawMessage   `json:"request"` // as posted (agent/client.ReshardRequest)
	FromPlan  keyspace.PlanSpec `json:"from_plan"`
	ToPlan    keyspace.PlanSpec `json:"to_plan"`
	FromEpoch uint64            `json:"from_epoch"`
	ToEpoch   uint64            `json:"to_epoch"`
	Chunks    []reshard.Chunk   `json:"chunks"`
	Started   time.Time         `json:"started"`
	Switched  time.Time         `json:"switched,omitzero"`
	Finished  time.Time         `json:"finished,omitzero"`
	SwitchMs  float64           `json:"switch_ms,omitempty"`
	Error     string            `json:"error,omitempty"`
	// Totals, written when the reconfiguration ends.
	ReactivePulls int64 `json:"reactive_pulls,omitempty"`
	AsyncPulls    int64 `json:"async_pulls,omitempty"`
	BytesCopied   int64 `json:"bytes_copied,omitempty"`
}

// Reshard returns keyspace name's latest reconfiguration, or ErrNotFound.
func (t *Tx) Reshard(name string) (Reshard, error) {
	var r Reshard
	v := t.tx.Bucket(bucketReshards).Get([]byte(name))
	if v == nil {
		return r, fmt.Errorf("catalog: reshard of keyspace %q: %w", name, ErrNotFound)
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("catalog: reshard of keyspace %q: %w", name, err)
	}
	return r, nil
}

// PutReshard writes r as its keyspace's latest reconfiguration.
func (t *Tx) PutReshard(r Reshard) error {
	v, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("catalog: put reshard of keyspace %q: %w", r.Keyspace, err)
	}
	return t.tx.Bucket(bucketReshards).Put([]byte(r.Keyspace), v)
}

// DeleteReshard forgets keyspace name's reconfigurations (the keyspace is
// deleted).
func (t *Tx) DeleteReshard(name string) error {
	return t.tx.Bucket(bucketReshards).Delete([]byte(name))
}

// Reshards returns the latest reconfiguration of every keyspace.
func (t *Tx) Reshards() ([]Reshard, error) {
	var out []Reshard
	err := t.tx.Bucket(bucketReshards).ForEach(func(k, v []byte) error {
		var r Reshard
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("catalog: reshard of keyspace %q: %w", k, err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// Reshard is View + Tx.Reshard.
func (c *Catalog) Reshard(name string) (r Reshard, err error) {
	err = c.View(func(tx *Tx) error { r, err = tx.Reshard(name); return err })
	return r, err
}

// PutReshard is Update + Tx.PutReshard.
func (c *Catalog) PutReshard(r Reshard) error {
	return c.Update(func(tx *Tx) error { return tx.PutReshard(r) })
}
