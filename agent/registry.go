package agent

import "sync"

// registry holds the running drivers of one kind (plans by ID,
// reconfigurations by keyspace) by name; safe for concurrent use. The zero
// value is empty and ready.
type registry[T any] struct {
	mu sync.Mutex
	m  map[string]*T
}

// get returns name's driver, or nil.
func (r *registry[T]) get(name string) *T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[name]
}

// put registers v under name; nil forgets name.
func (r *registry[T]) put(name string, v *T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v == nil {
		delete(r.m, name)
		return
	}
	if r.m == nil {
		r.m = map[string]*T{}
	}
	r.m[name] = v
}

// all returns every registered driver, in no order.
func (r *registry[T]) all() []*T {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*T, 0, len(r.m))
	for _, v := range r.m {
		out = append(out, v)
	}
	return out
}
