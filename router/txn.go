package router

import (
	"context"
)

// Ending a transaction block: one writing partition commits as usual;
// several commit with two-phase commit through the Coordinator; read-only
// partitions commit after the writers.

// commit answers the client's COMMIT.
func (s *Session) commit(ctx context.Context) error {
	if s.tx.failed {
		s.rollback()
		return writeMsg(s.cw, 'C', commandComplete("ROLLBACK").body)
	}
	if pe := s.commitParts(ctx); pe != nil {
		s.rollback()
		return writeMsg(s.cw, 'E', pe.body())
	}
	s.endTx()
	return writeMsg(s.cw, 'C', commandComplete("COMMIT").body)
}

// commitQuiet commits a transaction the router opened itself (a write on
// several partitions outside a block); the client has had the statement's
// answers and gets only an error, if the commit fails.
func (s *Session) commitQuiet(ctx context.Context) error {
	if pe := s.commitParts(ctx); pe != nil {
		s.rollback()
		return writeMsg(s.cw, 'E', pe.body())
	}
	s.endTx()
	return nil
}

// commitParts commits every participant of the block. On an error the
// caller rolls back what is left (a prepared transaction is rolled back by
// the coordinator itself).
func (s *Session) commitParts(ctx context.Context) *pgError {
	var writers, readers []*backend
	for _, b := range s.tx.parts {
		if b.wrote {
			writers = append(writers, b)
		} else {
			readers = append(readers, b)
		}
	}
	if len(writers) > 1 {
		if pe := s.cfg.Coordinator.Commit(ctx, s.ks.KS.Name, s.cfg.User, writers); pe != nil {
			return pe
		}
		for _, b := range writers {
			b.begun = false
		}
	} else if len(writers) == 1 {
		pe, err := writers[0].simple("COMMIT")
		if err != nil {
			return errorf(codeTxResolutionUnknown, "partition %s: the connection failed during COMMIT; the transaction may or may not have committed: %v", writers[0].part.Name, err)
		}
		writers[0].begun = false
		if pe != nil {
			return pe
		}
	}
	for _, b := range readers {
		if _, err := b.simple("COMMIT"); err != nil {
			s.logf("router: partition %s: commit of a read-only part: %v", b.part.Name, err)
		}
		b.begun = false
	}
	return nil
}

// rollback ends the block on every participant still in it.
func (s *Session) rollback() {
	for _, b := range s.tx.parts {
		if !b.begun || b.broken {
			continue
		}
		if _, err := b.simple("ROLLBACK"); err != nil {
			s.logf("router: partition %s: rollback: %v", b.part.Name, err)
		}
		b.begun = false
	}
	s.endTx()
}
