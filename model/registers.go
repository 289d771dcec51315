package model

// Registers is what a sampled workload's debug registers serve: the one
// name the flags, the pod annotation, the collector and the decoder share.
type Registers uint8

const (
	RegistersNone  Registers = iota // nothing: sampling alone
	RegistersComm                   // ComDetective's trap path ("watchpoints")
	RegistersReuse                  // ReuseTracker ("reuse")
)

// String is the name the flags and the pod annotation give it.
func (r Registers) String() string {
	switch r {
	case RegistersComm:
		return "watchpoints"
	case RegistersReuse:
		return "reuse"
	}
	return "none"
}
