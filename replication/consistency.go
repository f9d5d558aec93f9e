package replication

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ebbtable/ebbtable/clock"
)

// Consistency tokens (GenerateConsistencyToken, CheckConsistency). A token
// lists, for this cluster and every peer that answered, the cluster's
// closed commit timestamp when the token was made: every write acknowledged
// there before the token is at or below it. A table is consistent once
// every cluster of the instance has applied every other listed cluster's
// records of it through that cluster's mark.

// Marks are a token's contents: cluster → closed commit timestamp.
type Marks map[string]int64

const tokenPrefix = "ebb1."

// Token encodes the marks.
func (m Marks) Token() (string, error) {
	b, err := json.Marshal(map[string]int64(m))
	if err != nil {
		return "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// BadTokenError is a consistency token that is not this instance's or does
// not decode.
type BadTokenError struct {
	Token   string
	Foreign bool // it lacks the prefix: another system's token
}

func (e *BadTokenError) Error() string {
	if e.Foreign {
		return fmt.Sprintf("%q is not a consistency token from this instance", e.Token)
	}
	return fmt.Sprintf("consistency token %q does not decode", e.Token)
}

// ParseToken decodes a token made by Marks.Token; its error is a
// *BadTokenError.
func ParseToken(tok string) (Marks, error) {
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return nil, &BadTokenError{Token: tok, Foreign: true}
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	var marks Marks
	if err == nil {
		err = json.Unmarshal(b, &marks)
	}
	if err != nil || len(marks) == 0 {
		return nil, &BadTokenError{Token: tok}
	}
	return marks, nil
}

// Applied tells how far a peer applied each origin's records of a table,
// and the peer's closed timestamp (the server's EbbAdmin/ReplicationStatus).
type Applied interface {
	Applied(ctx context.Context, peer, instance, table string) (closed int64, applied map[string]int64, err error)
}

// TableState is what a consistency check needs of one table here and at
// the peers.
type TableState struct {
	Self            string // this cluster
	Instance, Table string
	// Checkpoint is how far this cluster applied origin's records of the
	// table (ok false: nothing yet).
	Checkpoint func(origin string) (commit int64, ok bool, err error)
	Peers      []string
	Status     Applied
}

// MakeMarks is a new token's marks: this cluster's closed timestamp and
// every peer's that answers.
func (ts TableState) MakeMarks(ctx context.Context, closed int64) Marks {
	marks := Marks{ts.Self: closed}
	for _, p := range ts.Peers {
		if c, _, err := ts.Status.Applied(ctx, p, ts.Instance, ts.Table); err == nil {
			marks[p] = c
		}
	}
	return marks
}

// Consistent says whether every cluster applied every other listed
// cluster's records through its mark. A peer that cannot be asked is not
// consistent.
func (ts TableState) Consistent(ctx context.Context, marks Marks) (bool, error) {
	// Here: each other cluster's records applied through its mark.
	for origin, mark := range marks {
		if origin == ts.Self {
			continue
		}
		commit, ok, err := ts.Checkpoint(origin)
		if err != nil {
			return false, err
		}
		if !ok || commit < mark {
			return false, nil
		}
	}
	// At each peer: the same.
	for _, p := range ts.Peers {
		_, applied, err := ts.Status.Applied(ctx, p, ts.Instance, ts.Table)
		if err != nil {
			return false, nil
		}
		for origin, mark := range marks {
			if origin != p && applied[origin] < mark {
				return false, nil
			}
		}
	}
	return true, nil
}

// WaitConsistent checks the marks until they are consistent or wait has
// passed on pace (asking every poll), or stop closes (false). Replication
// usually catches up within moments and clients poll slowly (the official
// client every 10 s), so a check waits a little before answering no.
func (ts TableState) WaitConsistent(ctx context.Context, marks Marks, pace clock.Clock, wait, poll time.Duration, stop <-chan struct{}) (bool, error) {
	deadline := pace.Now().Add(wait)
	for {
		ok, err := ts.Consistent(ctx, marks)
		if err != nil || ok || pace.Now().After(deadline) {
			return ok, err
		}
		timer, stopTimer := clock.Timer(pace, poll)
		select {
		case <-ctx.Done():
			stopTimer()
			return false, ctx.Err()
		case <-stop:
			stopTimer()
			return false, nil
		case <-timer:
		}
	}
}
