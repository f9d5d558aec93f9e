package table

import "testing"

// TestServerTimeTTLCountsFromTheTimestamp: a server-timestamped write with
// a TTL takes its time again under the row lock, and its expiry must count
// from that time, not from the moment it was checked (the CLI's read
// showed a 999ms TTL when the two fell in different milliseconds).
func TestServerTimeTTLCountsFromTheTimestamp(t *testing.T) {
	p := prepared{Mutation: Mutation{Kind: SetCell, TTLMicros: 1_000_000}, serverTime: true}
	p.Timestamp, p.ExpireAt = 5_000, 1_005_000 // as prepare resolved them
	got := p.at(7_000)
	if got.Timestamp != 7_000 || got.ExpireAt != 1_007_000 {
		t.Fatalf("at(7000): timestamp %d, expiry %d; want 7000 and 1007000", got.Timestamp, got.ExpireAt)
	}
	client := prepared{Mutation: Mutation{Kind: SetCell, Timestamp: 3_000, TTLMicros: 1_000_000, ExpireAt: 1_005_000}}
	if got := client.at(7_000); got.Timestamp != 3_000 || got.ExpireAt != 1_005_000 {
		t.Fatalf("a client timestamp changed under the lock: %+v", got)
	}
}
