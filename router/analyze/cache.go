package analyze

import (
	"sync"
	"sync/atomic"
)

// MaxCachedText is the longest query text (in bytes) a Cache keeps: longer
// ones, typically bulk INSERTs whose text never repeats, are parsed on
// every call so they do not hold the cache's memory.
const MaxCachedText = 64 << 10 // 64 KiB

// Cache is a bounded cache of Parse results keyed by the exact query text,
// so that the text of a prepared statement, or a simple query a client
// repeats, is parsed once. It holds at most size texts and evicts by the
// CLOCK (second chance) policy, so a hit takes only a read lock and sets a
// flag. Parse errors are cached too. Two goroutines missing on the same
// text at once may both parse it; one result is kept.
//
// A Cache is safe for concurrent use. The statements it returns are shared
// by every caller: they must not be modified.
type Cache struct {
	schema Schema
	size   int

	mu struct {
		sync.RWMutex
		byText map[string]*cacheEntry
		ring   []*cacheEntry // insertion slots the clock hand sweeps
		hand   int
	}
}

type cacheEntry struct {
	text  string
	stmts []*Statement
	err   error
	used  atomic.Bool // referenced since the hand last passed
}

// NewCache returns a cache of at most size query texts analysed against s.
// A size below 1 disables caching: every call parses.
func NewCache(s Schema, size int) *Cache {
	c := &Cache{schema: s, size: size}
	c.mu.byText = make(map[string]*cacheEntry, max(size, 0))
	return c
}

// Statements returns Parse(sql, s) for the cache's schema, from the cache
// when sql was seen before.
func (c *Cache) Statements(sql string) ([]*Statement, error) {
	c.mu.RLock()
	e, ok := c.mu.byText[sql]
	c.mu.RUnlock()
	if ok {
		if !e.used.Load() {
			e.used.Store(true)
		}
		return e.stmts, e.err
	}
	stmts, err := Parse(sql, c.schema)
	if c.size < 1 || len(sql) > MaxCachedText {
		return stmts, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.mu.byText[sql]; ok {
		return e.stmts, e.err
	}
	c.insertLocked(&cacheEntry{text: sql, stmts: stmts, err: err})
	return stmts, err
}

// Query is Statements for a simple query's text: a text seen before is
// not parsed again, nor is one whose shape (its literals made parameters,
// see shape) was: the statements of the shape come back with the text's
// literals as their parameters' values (text format), for KeyOf. params
// is nil when the statements are the text's own.
func (c *Cache) Query(sql string) (stmts []*Statement, params [][]byte, err error) {
	c.mu.RLock()
	e, ok := c.mu.byText[sql]
	c.mu.RUnlock()
	if ok {
		e.used.Store(true)
		return e.stmts, nil, e.err
	}
	sh, lits, good := shape(sql)
	if !good || len(lits) == 0 || c.size < 1 || len(sh) > MaxCachedText {
		stmts, err := c.Statements(sql)
		return stmts, nil, err
	}
	key := shapeKey + sh
	c.mu.RLock()
	e, ok = c.mu.byText[key]
	c.mu.RUnlock()
	if !ok {
		e = &cacheEntry{text: key}
		e.stmts, e.err = Parse(sh, c.schema)
		c.mu.Lock()
		if old, dup := c.mu.byText[key]; dup {
			e = old
		} else {
			c.insertLocked(e)
		}
		c.mu.Unlock()
	}
	e.used.Store(true)
	if e.err != nil || !plainOnly(e.stmts) { // a shape the grammar refuses, or a SET whose value is a literal: the text as it is
		stmts, err := c.Statements(sql)
		return stmts, nil, err
	}
	return e.stmts, lits, nil
}

// plainOnly reports whether every statement is DML, a query or transaction
// control: what a shape's parameters stand in for faithfully.
func plainOnly(stmts []*Statement) bool {
	for _, st := range stmts {
		switch st.Class {
		case SetKey, Session, Other, TwoPhase:
			return false
		}
	}
	return true
}

// shapeKey prefixes shapes among the cache's texts (no query text starts
// with a NUL byte).
const shapeKey = "\x00"

// insertLocked adds e, evicting the first entry the clock hand finds not
// used since its last pass. REQUIRES: c.mu held for writing.
func (c *Cache) insertLocked(e *cacheEntry) {
	c.mu.byText[e.text] = e
	if len(c.mu.ring) < c.size {
		c.mu.ring = append(c.mu.ring, e)
		return
	}
	for {
		old := c.mu.ring[c.mu.hand]
		if old.used.Swap(false) {
			c.mu.hand = (c.mu.hand + 1) % c.size
			continue
		}
		delete(c.mu.byText, old.text)
		c.mu.ring[c.mu.hand] = e
		c.mu.hand = (c.mu.hand + 1) % c.size
		return
	}
}

// Len returns the number of texts cached.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.mu.byText)
}
