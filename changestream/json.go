package changestream

import (
	"encoding/base64"
	"encoding/json"
	"time"
	"unicode/utf8"
)

// JSON is a record as ebbtable's own tools print it, one object a line.
// Byte strings (row key, qualifier, value) are written as strings when they
// are valid UTF-8, else base64 (standard alphabet) with the matching
// *_base64 field set to true.
type JSON struct {
	CommitTimestamp string    `json:"commit_timestamp"` // RFC 3339, microseconds, UTC
	CommitMicros    int64     `json:"commit_micros"`
	Tiebreaker      int32     `json:"tiebreaker"`
	Index           uint32    `json:"index"`
	Token           string    `json:"token"`
	RowKey          string    `json:"row_key"`
	RowKeyBase64    bool      `json:"row_key_base64,omitempty"`
	Type            string    `json:"type"`
	Reason          string    `json:"reason"`
	TransactionTag  string    `json:"transaction_tag"`
	IsSystem        bool      `json:"is_system_transaction"`
	SourceCluster   string    `json:"source_cluster_id"`
	Mods            []JSONMod `json:"mods"`
}

// JSONMod is one mod of a JSON record.
type JSONMod struct {
	Kind            string `json:"kind"`
	Family          string `json:"family,omitempty"`
	Qualifier       string `json:"qualifier,omitempty"`
	QualifierBase64 bool   `json:"qualifier_base64,omitempty"`
	TimestampMicros *int64 `json:"timestamp_micros,omitempty"`
	Value           string `json:"value,omitempty"`
	ValueBase64     bool   `json:"value_base64,omitempty"`
	StartMicros     *int64 `json:"start_micros,omitempty"`
	EndMicros       *int64 `json:"end_micros,omitempty"`
}

func text(b []byte) (string, bool) {
	if utf8.Valid(b) {
		return string(b), false
	}
	return base64.StdEncoding.EncodeToString(b), true
}

// ToJSON renders a record for printing.
func (r *Record) ToJSON() JSON {
	j := JSON{
		CommitTimestamp: time.UnixMicro(r.Commit).UTC().Format("2006-01-02T15:04:05.000000Z07:00"),
		CommitMicros:    r.Commit,
		Tiebreaker:      r.Tiebreaker,
		Index:           r.Index,
		Token:           r.Position.Token(),
		Type:            r.Type.String(),
		Reason:          r.Reason,
		TransactionTag:  r.TransactionTag,
		IsSystem:        r.IsSystem,
		SourceCluster:   r.SourceCluster,
		Mods:            []JSONMod{},
	}
	j.RowKey, j.RowKeyBase64 = text(r.RowKey)
	for _, m := range r.Mods {
		jm := JSONMod{Kind: m.Kind.String(), Family: m.Family}
		jm.Qualifier, jm.QualifierBase64 = text(m.Qualifier)
		switch m.Kind {
		case SetCell:
			ts := m.Timestamp
			jm.TimestampMicros = &ts
			jm.Value, jm.ValueBase64 = text(m.Value)
		case DeleteFromColumn:
			s, e := m.StartTS, m.EndTS
			jm.StartMicros, jm.EndMicros = &s, &e
		}
		j.Mods = append(j.Mods, jm)
	}
	return j
}

// MarshalLine renders a record as one line of JSON (without the newline).
func (r *Record) MarshalLine() ([]byte, error) { return json.Marshal(r.ToJSON()) }
