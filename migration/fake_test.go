package migration

import (
	"context"
	"io"
)

// fakeSource and fakeTarget answer every method with ErrUnsupported (or
// nothing); a test's fake embeds one and overrides what the test drives, so
// that a call it did not expect fails plainly instead of panicking.
type (
	fakeSource struct{}
	fakeTarget struct{}
)

var (
	_ Source = fakeSource{}
	_ Target = fakeTarget{}
)

func (fakeSource) Info(context.Context) (SourceInfo, error)        { return SourceInfo{}, ErrUnsupported }
func (fakeSource) Addr() string                                    { return "" }
func (fakeSource) PrimaryConnInfo() string                         { return "" }
func (fakeSource) CreateSlot(context.Context, string) (LSN, error) { return 0, ErrUnsupported }
func (fakeSource) DropSlot(context.Context, string) error          { return ErrUnsupported }
func (fakeSource) SlotStatus(context.Context, string) (string, error) {
	return "", ErrUnsupported
}
func (fakeSource) SlotRestartLSN(context.Context, string) (LSN, error) { return 0, ErrUnsupported }
func (fakeSource) SendSnapshot(context.Context, io.Writer, Limiter, func(int64)) (SnapshotInfo, error) {
	return SnapshotInfo{}, ErrUnsupported
}
func (fakeSource) SendCold(context.Context, io.Writer, Limiter, func(int64)) (int64, error) {
	return 0, ErrUnsupported
}
func (fakeSource) BufferBlocks(context.Context) ([]Block, error)        { return nil, ErrUnsupported }
func (fakeSource) FlushLSN(context.Context) (LSN, error)                { return 0, ErrUnsupported }
func (fakeSource) FenceEarly(context.Context, []int) error              { return ErrUnsupported }
func (fakeSource) Fence(context.Context, FenceMode, []int) (LSN, error) { return 0, ErrUnsupported }
func (fakeSource) Unfence(context.Context) error                        { return ErrUnsupported }
func (fakeSource) Retire(context.Context) error                         { return ErrUnsupported }
func (fakeSource) Close() error                                         { return nil }
func (fakeSource) UnpaceWAL(bool) error                                 { return ErrUnsupported }
func (fakeSource) WALRelayed() (int64, error)                           { return 0, ErrUnsupported }
func (fakeTarget) Info(context.Context, string) (TargetInfo, error) {
	return TargetInfo{}, ErrUnsupported
}
func (fakeTarget) Reserve(context.Context, Record) (string, int, error) { return "", 0, ErrUnsupported }
func (fakeTarget) OpenSnapshot(context.Context, Record) (io.WriteCloser, error) {
	return nil, ErrUnsupported
}
func (fakeTarget) StartStandby(context.Context, Record, string, string) error { return ErrUnsupported }
func (fakeTarget) Position(context.Context, Record) (Position, error) {
	return Position{}, ErrUnsupported
}
func (fakeTarget) WaitReplay(context.Context, Record, LSN) (LSN, error) { return 0, ErrUnsupported }
func (fakeTarget) Prewarm(context.Context, Record, []Block) error       { return ErrUnsupported }
func (fakeTarget) PreparePromotion(context.Context, Record) error       { return ErrUnsupported }
func (fakeTarget) Promote(context.Context, Record) error                { return ErrUnsupported }
func (fakeTarget) Addr(Record) string                                   { return "" }
func (fakeTarget) Abort(context.Context, Record) error                  { return ErrUnsupported }
func (fakeTarget) Commit(context.Context, Record) error                 { return ErrUnsupported }
func (fakeTarget) UnpaceWAL(bool) error                                 { return ErrUnsupported }
func (fakeTarget) WALRelayed() (int64, error)                           { return 0, ErrUnsupported }
