package e2e

// TestGCRuleStringMatchesClient lives here rather than in server/convert
// because it needs the official client, which this package links anyway:
// in server/convert it made that package's race test binary 72 MB instead
// of 41 MB, two CPU-seconds of linking on every run of the suite.

import (
	"testing"
	"time"

	"cloud.google.com/go/bigtable"
	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/gcrule"
	"github.com/ebbtable/ebbtable/server/convert"
	"google.golang.org/protobuf/types/known/durationpb"
)

const day = 24 * time.Hour

func pbAge(s int64, n int32) *adminpb.GcRule {
	return &adminpb.GcRule{Rule: &adminpb.GcRule_MaxAge{MaxAge: &durationpb.Duration{Seconds: s, Nanos: n}}}
}

func pbVers(n int32) *adminpb.GcRule {
	return &adminpb.GcRule{Rule: &adminpb.GcRule_MaxNumVersions{MaxNumVersions: n}}
}

func pbUnion(rs ...*adminpb.GcRule) *adminpb.GcRule {
	return &adminpb.GcRule{Rule: &adminpb.GcRule_Union_{Union: &adminpb.GcRule_Union{Rules: rs}}}
}

func pbInter(rs ...*adminpb.GcRule) *adminpb.GcRule {
	return &adminpb.GcRule{Rule: &adminpb.GcRule_Intersection_{Intersection: &adminpb.GcRule_Intersection{Rules: rs}}}
}

// TestGCRuleStringMatchesClient: String is what the official client prints,
// both for a family read from the server (GCRuleToString of the proto, which
// keeps whole seconds) and for a policy built with the client.
func TestGCRuleStringMatchesClient(t *testing.T) {
	for _, s := range []string{
		"never", "maxage=30d", "maxversions=5", "maxage=1s", "maxage=90m", "maxage=36h", "maxage=61s",
		"maxage=10d || maxversions=2", "maxage=30d && maxversions=1",
		"(maxage=30d && maxversions=1) || maxversions=10",
		"maxage=30d || (maxage=3d && maxversions=100)",
		"maxversions=1 || maxversions=2 || maxversions=3",
		"(maxversions=1 || maxversions=2) || maxversions=3",
	} {
		r := gcrule.MustParse(s)
		if want := bigtable.GCRuleToString(convert.GCRuleToProto(r)); r.String() != want {
			t.Errorf("%q: String() = %q, client GCRuleToString = %q", s, r.String(), want)
		}
	}
	for _, tc := range []struct {
		pb *adminpb.GcRule
	}{
		{pbUnion(pbVers(1))},
		{pbInter()},
		{pbUnion(&adminpb.GcRule{}, pbVers(1))},
		{pbAge(0, 0)},
	} {
		r, err := convert.GCRuleFromProto(tc.pb)
		if err != nil {
			t.Fatal(err)
		}
		if want := bigtable.GCRuleToString(tc.pb); r.String() != want {
			t.Errorf("%v: String() = %q, client GCRuleToString = %q", tc.pb, r.String(), want)
		}
	}
	// Policies built with the client, including sub-second ages (the
	// client's proto reader drops those, its policies do not).
	for _, tc := range []struct {
		rule   string
		policy bigtable.GCPolicy
	}{
		{"maxage=500ms", bigtable.MaxAgePolicy(500 * time.Millisecond)},
		{"maxage=1500ms", bigtable.MaxAgePolicy(1500 * time.Millisecond)},
		{"maxage=1s", bigtable.MaxAgePolicy(time.Second)},
		{"maxage=90m", bigtable.MaxAgePolicy(time.Hour + 30*time.Minute)},
		{"maxversions=3", bigtable.MaxVersionsPolicy(3)},
		{"maxage=10d || maxversions=2", bigtable.UnionPolicy(bigtable.MaxAgePolicy(10*day), bigtable.MaxVersionsPolicy(2))},
		{"maxage=30d && maxversions=1", bigtable.IntersectionPolicy(bigtable.MaxAgePolicy(30*day), bigtable.MaxVersionsPolicy(1))},
		{"maxage=1h || (maxage=1m && maxversions=2)", bigtable.UnionPolicy(bigtable.MaxAgePolicy(time.Hour),
			bigtable.IntersectionPolicy(bigtable.MaxAgePolicy(time.Minute), bigtable.MaxVersionsPolicy(2)))},
	} {
		if got, want := gcrule.MustParse(tc.rule).String(), tc.policy.String(); got != want {
			t.Errorf("%q: String() = %q, client policy prints %q", tc.rule, got, want)
		}
	}
}
