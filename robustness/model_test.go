//go:build unix

package robustness

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// opKind is what one recorded operation did.
type opKind uint8

const (
	opSet    opKind = iota // MutateRow: SetCell f:r = Value (server timestamp)
	opRead                 // ReadRow, latest cell of each column
	opCAS                  // CheckAndMutateRow: if latest f:r == Expect then SetCell f:r = Value
	opIncr                 // ReadModifyWriteRow: f:n += Delta
	opAppend               // ReadModifyWriteRow: f:a += Value
)

// linInput is an operation's call: what a worker asked for.
type linInput struct {
	Kind   opKind
	Row    int
	Value  string // Set and CAS: the new register value; Append: the token
	Expect string // CAS: the value the predicate matches
	Delta  int64  // Incr
}

// linOutput is what the operation returned. Unknown marks a write that
// failed or timed out: it may or may not have taken effect, and its result
// fields mean nothing.
type linOutput struct {
	Unknown bool
	Matched bool   // CAS: whether the predicate matched
	Reg     string // Read: the register ("" when the column is empty)
	N       int64  // Read and Incr: the counter (0 when empty)
	Log     string // Read and Append: the append log ("" when empty)
	Err     string // for the visualization only
}

// rowState is the model's state of one row. It is a comparable value, so
// porcupine's default equality (==) applies.
type rowState struct {
	Reg string
	N   int64
	Log string
}

// step applies in to s and reports whether out is a result the row could
// have given. Unknown outputs are accepted whatever they say (rowModel adds
// the choice that such a write did not happen).
func step(s rowState, in linInput, out linOutput) (bool, rowState) {
	switch in.Kind {
	case opSet:
		s.Reg = in.Value
		return true, s
	case opRead:
		return out.Reg == s.Reg && out.N == s.N && out.Log == s.Log, s
	case opCAS:
		matched := s.Reg == in.Expect
		if matched {
			s.Reg = in.Value
		}
		return out.Unknown || out.Matched == matched, s
	case opIncr:
		s.N += in.Delta
		return out.Unknown || out.N == s.N, s
	case opAppend:
		s.Log += in.Value
		return out.Unknown || out.Log == s.Log, s
	}
	panic(fmt.Sprintf("unknown op kind %d", in.Kind))
}

// rowModel is the sequential specification of the table as porcupine sees
// it: rows are independent, so the history is checked one row at a time. A
// write whose outcome is unknown either took effect or did not, so the model
// is nondeterministic: porcupine tracks the set of states a row can be in,
// and the next read narrows it.
var rowModel = (&porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byRow := map[int][]porcupine.Operation{}
		var rows []int
		for _, op := range history {
			r := op.Input.(linInput).Row
			if _, ok := byRow[r]; !ok {
				rows = append(rows, r)
			}
			byRow[r] = append(byRow[r], op)
		}
		out := make([][]porcupine.Operation, 0, len(rows))
		for _, r := range rows {
			out = append(out, byRow[r])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{rowState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		s, out := state.(rowState), output.(linOutput)
		ok, next := step(s, input.(linInput), out)
		switch {
		case !ok:
			return nil
		case out.Unknown && next != s:
			return []interface{}{s, next}
		default:
			return []interface{}{next}
		}
	},
	Hash: func(state interface{}) uint64 {
		s := state.(rowState)
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%d\x00%d", s.Reg, s.N, len(s.Log))
		return h.Sum64()
	},
	DescribeOperation: func(input, output interface{}) string {
		return describeOp(input.(linInput), output.(linOutput))
	},
	DescribeState: func(state interface{}) string {
		s := state.(rowState)
		return fmt.Sprintf("r=%q n=%d a=%s", s.Reg, s.N, shortLog(s.Log))
	},
	DescribeOperationMetadata: func(info interface{}) string {
		if info == nil {
			return ""
		}
		return fmt.Sprint(info)
	},
}).ToModel()

func describeOp(in linInput, out linOutput) string {
	var call, ret string
	switch in.Kind {
	case opSet:
		call, ret = fmt.Sprintf("set(%s)", in.Value), "ok"
	case opRead:
		call, ret = "read()", fmt.Sprintf("r=%q n=%d a=%s", out.Reg, out.N, shortLog(out.Log))
	case opCAS:
		call, ret = fmt.Sprintf("cas(%s→%s)", in.Expect, in.Value), fmt.Sprint(out.Matched)
	case opIncr:
		call, ret = fmt.Sprintf("incr(%d)", in.Delta), fmt.Sprint(out.N)
	case opAppend:
		call, ret = fmt.Sprintf("append(%s)", in.Value), shortLog(out.Log)
	}
	if out.Unknown {
		ret = "unknown (" + out.Err + ")"
	}
	return call + " → " + ret
}

// shortLog shows an append log by its length and last tokens.
func shortLog(log string) string {
	tokens := strings.Split(strings.TrimSuffix(log, ";"), ";")
	if log == "" {
		tokens = nil
	}
	if len(tokens) <= 3 {
		return fmt.Sprintf("[%s]", strings.Join(tokens, " "))
	}
	return fmt.Sprintf("[%d tokens … %s]", len(tokens), strings.Join(tokens[len(tokens)-3:], " "))
}

// TestRowModel shows the checker the hand-made histories it must tell
// apart: what a crash may legally do to a failed write, and the anomalies
// the campaign hunts for.
func TestRowModel(t *testing.T) {
	const unknown = 1 << 40 // a failed write's return: after everything
	op := func(client int, call, ret int64, in linInput, out linOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out}
	}
	set := func(v string) linInput { return linInput{Kind: opSet, Value: v} }
	read := linInput{Kind: opRead}
	lost := linOutput{Unknown: true, Err: "Unavailable"}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{{
		name: "a failed write that took effect",
		ops: []porcupine.Operation{
			op(0, 0, 10, set("a"), linOutput{}),
			op(1, 20, unknown, set("b"), lost),
			op(0, 100, 110, read, linOutput{Reg: "b"}),
		},
		want: porcupine.Ok,
	}, {
		name: "a failed write that did not",
		ops: []porcupine.Operation{
			op(0, 0, 10, set("a"), linOutput{}),
			op(1, 20, unknown, set("b"), lost),
			op(0, 100, 110, read, linOutput{Reg: "a"}),
		},
		want: porcupine.Ok,
	}, {
		name: "a failed write seen, then gone (phantom read)",
		ops: []porcupine.Operation{
			op(0, 0, 10, set("a"), linOutput{}),
			op(1, 20, unknown, set("b"), lost),
			op(0, 30, 40, read, linOutput{Reg: "b"}),
			op(0, 100, 110, read, linOutput{Reg: "a"}),
		},
		want: porcupine.Illegal,
	}, {
		name: "an acknowledged write lost",
		ops: []porcupine.Operation{
			op(0, 0, 10, set("a"), linOutput{}),
			op(0, 20, 30, set("b"), linOutput{}),
			op(1, 100, 110, read, linOutput{Reg: "a"}),
		},
		want: porcupine.Illegal,
	}, {
		name: "compare-and-set against the current value",
		ops: []porcupine.Operation{
			op(0, 0, 10, set("a"), linOutput{}),
			op(1, 20, 30, linInput{Kind: opCAS, Expect: "a", Value: "c"}, linOutput{Matched: true}),
			op(0, 40, 50, linInput{Kind: opCAS, Expect: "a", Value: "d"}, linOutput{Matched: false}),
			op(1, 60, 70, read, linOutput{Reg: "c"}),
		},
		want: porcupine.Ok,
	}, {
		name: "two compare-and-sets from one value both win",
		ops: []porcupine.Operation{
			op(0, 0, 10, set("a"), linOutput{}),
			op(1, 20, 30, linInput{Kind: opCAS, Expect: "a", Value: "c"}, linOutput{Matched: true}),
			op(0, 40, 50, linInput{Kind: opCAS, Expect: "a", Value: "d"}, linOutput{Matched: true}),
		},
		want: porcupine.Illegal,
	}, {
		name: "concurrent increments, one failed",
		ops: []porcupine.Operation{
			op(0, 0, 10, linInput{Kind: opIncr, Delta: 5}, linOutput{N: 5}),
			op(1, 5, unknown, linInput{Kind: opIncr, Delta: 7}, lost),
			op(2, 6, 20, linInput{Kind: opIncr, Delta: 1}, linOutput{N: 13}),
			op(0, 30, 40, read, linOutput{N: 13}),
		},
		want: porcupine.Ok,
	}, {
		name: "an increment counted twice",
		ops: []porcupine.Operation{
			op(0, 0, 10, linInput{Kind: opIncr, Delta: 5}, linOutput{N: 5}),
			op(0, 30, 40, read, linOutput{N: 10}),
		},
		want: porcupine.Illegal,
	}, {
		name: "appends in order, a failed one absent",
		ops: []porcupine.Operation{
			op(0, 0, 10, linInput{Kind: opAppend, Value: "x;"}, linOutput{Log: "x;"}),
			op(1, 15, unknown, linInput{Kind: opAppend, Value: "y;"}, lost),
			op(0, 20, 30, linInput{Kind: opAppend, Value: "z;"}, linOutput{Log: "x;z;"}),
			op(1, 40, 50, read, linOutput{Log: "x;z;"}),
		},
		want: porcupine.Ok,
	}, {
		name: "a read that goes back in the log",
		ops: []porcupine.Operation{
			op(0, 0, 10, linInput{Kind: opAppend, Value: "x;"}, linOutput{Log: "x;"}),
			op(1, 15, 18, read, linOutput{Log: "x;"}),
			op(1, 20, 25, read, linOutput{Log: ""}),
		},
		want: porcupine.Illegal,
	}, {
		name: "rows are independent",
		ops: []porcupine.Operation{
			op(0, 0, 10, linInput{Kind: opSet, Row: 1, Value: "a"}, linOutput{}),
			op(1, 20, 30, linInput{Kind: opRead, Row: 2}, linOutput{}),
			op(1, 40, 50, linInput{Kind: opRead, Row: 1}, linOutput{Reg: "a"}),
		},
		want: porcupine.Ok,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperationsTimeout(rowModel, tc.ops, 0); got != tc.want {
				t.Errorf("checker says %s, want %s", got, tc.want)
			}
		})
	}
}

// TestBoundUnknown shows what bounding a failed write by the next kill buys:
// a write that surfaces only after the process that received it was killed
// is caught, where an unbounded one would be taken as late but legal.
func TestBoundUnknown(t *testing.T) {
	history := func() []porcupine.Operation {
		return []porcupine.Operation{
			{ClientId: 0, Call: 0, Return: 10, Input: linInput{Kind: opSet, Value: "a"}, Output: linOutput{}},
			// Fails at 30; the server is killed and reaped at 40.
			{ClientId: 1, Call: 20, Return: 30, Input: linInput{Kind: opSet, Value: "b"}, Output: linOutput{Unknown: true}},
			{ClientId: 0, Call: 50, Return: 60, Input: linInput{Kind: opRead}, Output: linOutput{Reg: "a"}},
			{ClientId: 0, Call: 70, Return: 80, Input: linInput{Kind: opRead}, Output: linOutput{Reg: "b"}},
		}
	}
	bounded := history()
	if open := boundUnknown(bounded, []int64{5, 40, 90}); open != 0 {
		t.Fatalf("boundUnknown left %d writes open, want 0", open)
	}
	if got := bounded[1].Return; got != 40 {
		t.Fatalf("failed write returns at %d, want 40 (the next kill)", got)
	}
	if got := porcupine.CheckOperationsTimeout(rowModel, bounded, 0); got != porcupine.Illegal {
		t.Errorf("bounded by the kill: checker says %s, want Illegal", got)
	}
	// Bounded, the failed write may still not have happened at all.
	lost := history()[:3]
	boundUnknown(lost, []int64{40})
	if got := porcupine.CheckOperationsTimeout(rowModel, lost, 0); got != porcupine.Ok {
		t.Errorf("bounded, never happened: checker says %s, want Ok", got)
	}
	open := history()
	if n := boundUnknown(open, []int64{5}); n != 1 {
		t.Fatalf("boundUnknown left %d writes open, want 1", n)
	}
	if got := open[1].Return; got <= 80 {
		t.Fatalf("open failed write returns at %d, want after every other operation", got)
	}
	if got := porcupine.CheckOperationsTimeout(rowModel, open, 0); got != porcupine.Ok {
		t.Errorf("no kill after the failure: checker says %s, want Ok", got)
	}
}

// TestExplainRow checks the description a violation report starts with: it
// names the read the checker could not place.
func TestExplainRow(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Call: 0, Return: 10, Input: linInput{Kind: opSet, Value: "a"}, Output: linOutput{}},
		{ClientId: 1, Call: 20, Return: 1 << 40, Input: linInput{Kind: opSet, Value: "b"}, Output: linOutput{Unknown: true, Err: "Unavailable"}},
		{ClientId: 0, Call: 30, Return: 40, Input: linInput{Kind: opRead}, Output: linOutput{Reg: "b"}},
		{ClientId: 0, Call: 100, Return: 110, Input: linInput{Kind: opRead}, Output: linOutput{Reg: "a"}},
	}
	got := explainRow(ops)
	for _, want := range []string{"placed 3 of 4", `read() → r="a"`, `set(b) → unknown (Unavailable)`} {
		if !strings.Contains(got, want) {
			t.Errorf("explanation lacks %q:\n%s", want, got)
		}
	}
}
