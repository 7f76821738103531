package analyze

import "github.com/sluicedb/sluice/keyspace"

type Cache struct{}

func NewCache(s Schema, size int) *Cache                        { return &Cache{} }
func (c *Cache) Statements(sql string) ([]*Statement, error) { return nil, nil }
func KeyOf(t keyspace.KeyType, v Value, params [][]byte, formats []int16, oids []uint32) (keyspace.Key, error) {
	return keyspace.Key{}, nil
}
