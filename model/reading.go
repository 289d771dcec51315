package model

// Reading is one counter's reading over a window: its raw count and the
// times it was enabled and running, which scale a multiplexed count
// (count × enabled / running). kernel/selftest reads them; the analysis
// judges what multiplexing cost.
type Reading struct {
	Count, Enabled, Running uint64
}
