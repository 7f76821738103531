package control

import (
	"testing"

	"github.com/cockroachdb/datadriven"
)

// interferenceScript is the interference part of a script's state.
type interferenceScript struct{}

// interference runs the interference directives; ok is false for others.
func (s *script) interference(t *testing.T, d *datadriven.TestData) (string, bool) {
	return "", false
}
