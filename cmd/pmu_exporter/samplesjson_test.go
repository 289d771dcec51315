package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// sampleJSON is one line of `samples --format jsonl` as the tests read it;
// lines are written by lineWriter from perfrecord's field table
// (Sample.Printed) and appendDumps. Fields the event did not record are
// left out, as perf script refuses to print them;
// addresses are hex strings, as JSON numbers lose 64-bit precision.
type sampleJSON struct {
	Event    string       `json:"event"`
	PID      *uint32      `json:"pid,omitempty"`
	TID      *uint32      `json:"tid,omitempty"`
	CPU      *uint32      `json:"cpu,omitempty"`
	Time     *uint64      `json:"time,omitempty"`
	IP       string       `json:"ip,omitempty"`
	Addr     string       `json:"addr,omitempty"`
	Period   *uint64      `json:"period,omitempty"`
	Weight   *uint64      `json:"weight,omitempty"`
	PhysAddr string       `json:"phys_addr,omitempty"`
	DataSrc  *dataSrcJSON `json:"data_src,omitempty"`
	// The variable fields (appendDumps).
	Brstack        []branchJSON `json:"brstack,omitempty"`
	BrstackHWIndex *uint64      `json:"brstack_hw_index,omitempty"`
	UserRegs       *regsJSON    `json:"user_regs,omitempty"`
	IntrRegs       *regsJSON    `json:"intr_regs,omitempty"`
	StackUserSize  *uint64      `json:"stack_user_size,omitempty"`
	AuxSize        *uint64      `json:"aux_size,omitempty"`
}

// branchJSON is a branch stack entry: its addresses, its flags as perf
// script -F brstack prints them (perf 6.1: M, P or -/X or -/A or
// -/cycles/type), and each flag.
type branchJSON struct {
	From      string `json:"from"`
	To        string `json:"to"`
	Perf      string `json:"perf"`
	Cycles    uint16 `json:"cycles"`
	Type      uint8  `json:"type"`
	NewType   uint8  `json:"new_type"`
	Spec      uint8  `json:"spec"`
	Priv      uint8  `json:"priv"`
	Mispred   bool   `json:"mispred"`
	Predicted bool   `json:"predicted"`
	InTx      bool   `json:"in_tx"`
	Abort     bool   `json:"abort"`
}

// regsJSON is a register dump: the abi (0: none, a kernel thread), the
// mask, and a value per bit of it in register number order.
type regsJSON struct {
	ABI    uint64   `json:"abi"`
	Mask   string   `json:"mask"`
	Values []string `json:"values"`
}

// samplesJSON runs `pmu_exporter samples` with args and decodes its lines;
// said is what it wrote on stderr.
func samplesJSON(t *testing.T, args ...string) (samples []sampleJSON, said string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(append([]string{"samples"}, args...), &stdout, &stderr); code != 0 {
		t.Fatalf("samples exited %d: %s", code, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	for dec.More() {
		var s sampleJSON
		if err := dec.Decode(&s); err != nil {
			t.Fatal(err)
		}
		samples = append(samples, s)
	}
	return samples, stderr.String()
}
