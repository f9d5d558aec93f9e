package convert

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/gcrule"
	"google.golang.org/protobuf/proto"
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

// TestGCRuleProto: proto ⇄ rule, exactly, both ways.
func TestGCRuleProto(t *testing.T) {
	for _, tc := range []struct {
		name string
		pb   *adminpb.GcRule
		rule gcrule.Rule
	}{
		{"no rule", nil, gcrule.None()},
		{"max age", pbAge(30*86400, 0), gcrule.MaxAge(30 * day)},
		{"max age 1s", pbAge(1, 0), gcrule.MaxAge(time.Second)},
		{"max age 500ms", pbAge(0, 500_000_000), gcrule.MaxAge(500 * time.Millisecond)},
		{"max age 1.5s", pbAge(1, 500_000_000), gcrule.MaxAge(1500 * time.Millisecond)},
		{"max age negative (invalid)", pbAge(-1, -500_000_000), gcrule.MaxAge(-1500 * time.Millisecond)},
		{"max age longest", pbAge(9223372036, 854775807), gcrule.MaxAge(math.MaxInt64)},
		{"max versions", pbVers(5), gcrule.MaxVersions(5)},
		{"max versions zero (invalid)", pbVers(0), gcrule.MaxVersions(0)},
		{"union", pbUnion(pbAge(10*86400, 0), pbVers(2)), gcrule.Union(gcrule.MaxAge(10*day), gcrule.MaxVersions(2))},
		{"union of one stays", pbUnion(pbVers(1)), gcrule.Union(gcrule.MaxVersions(1))},
		{"intersection of one stays", pbInter(pbVers(1)), gcrule.Intersection(gcrule.MaxVersions(1))},
		{"empty union (invalid)", pbUnion(), gcrule.Union()},
		{"empty intersection (invalid)", pbInter(), gcrule.Intersection()},
		{"empty rule inside a union", pbUnion(&adminpb.GcRule{}, pbVers(1)), gcrule.Union(gcrule.None(), gcrule.MaxVersions(1))},
		{"nested", pbUnion(pbInter(pbAge(30*86400, 0), pbVers(1)), pbVers(10)),
			gcrule.MustParse("(maxage=30d && maxversions=1) || maxversions=10")},
		{"deep", pbInter(pbUnion(pbInter(pbUnion(pbVers(1), pbAge(3600, 0)), pbVers(3)), pbAge(60, 0)), pbVers(7)),
			gcrule.Intersection(gcrule.Union(gcrule.Intersection(gcrule.Union(gcrule.MaxVersions(1), gcrule.MaxAge(time.Hour)), gcrule.MaxVersions(3)), gcrule.MaxAge(time.Minute)), gcrule.MaxVersions(7))},
	} {
		got, err := GCRuleFromProto(tc.pb)
		if err != nil {
			t.Errorf("%s: GCRuleFromProto: %v", tc.name, err)
			continue
		}
		if !got.Equal(tc.rule) {
			t.Errorf("%s: GCRuleFromProto = %s, want %s", tc.name, got, tc.rule)
		}
		if back := GCRuleToProto(tc.rule); !proto.Equal(back, tc.pb) {
			t.Errorf("%s: GCRuleToProto = %v, want %v", tc.name, back, tc.pb)
		}
	}
	// An empty GcRule is no rule too, and goes back as nil.
	if r, err := GCRuleFromProto(&adminpb.GcRule{}); err != nil || !r.IsNone() || GCRuleToProto(r) != nil {
		t.Errorf("empty GcRule: %v, %v", r, err)
	}
	// A max age without its duration is a zero age, which Validate refuses.
	r, err := GCRuleFromProto(&adminpb.GcRule{Rule: &adminpb.GcRule_MaxAge{}})
	if err != nil || !r.Equal(gcrule.MaxAge(0)) || r.Validate() == nil {
		t.Errorf("max age without duration: %v, %v", r, err)
	}
	// Out-of-range versions clamp instead of wrapping.
	if p := GCRuleToProto(gcrule.MaxVersions(math.MaxInt32 + 1)); p.GetMaxNumVersions() != math.MaxInt32 {
		t.Errorf("clamp: %v", p)
	}
}

func TestGCRuleFromProtoErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		pb   *adminpb.GcRule
		want string
	}{
		{"nanos out of range", pbAge(1, 1_000_000_000), "max age is not a valid duration"},
		{"mixed signs", pbAge(1, -1), "max age is not a valid duration"},
		{"beyond 10000 years", pbAge(315_576_000_001, 0), "max age is not a valid duration"},
		{"beyond time.Duration", pbAge(9223372037, 0), "too long"},
		{"just beyond time.Duration", pbAge(9223372036, 854775808), "too long"},
		{"negative beyond time.Duration", pbAge(-9223372036, -854775809), "too long"},
		{"nested", pbUnion(pbVers(1), pbInter(pbAge(1, 2_000_000_000))), "union rule 2: intersection rule 1: max age"},
	} {
		_, err := GCRuleFromProto(tc.pb)
		if err == nil || !errors.Is(err, gcrule.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: GCRuleFromProto = %v, want ErrInvalid containing %q", tc.name, err, tc.want)
		}
	}
	if r, err := GCRuleFromProto(pbAge(-9223372036, -854775808)); err != nil || r.Age() != math.MinInt64 {
		t.Errorf("most negative duration: %v, %v", r, err)
	}
}

// TestGCRuleProtoRandom: random rules survive the proto exactly.
func TestGCRuleProtoRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var gen func(depth int) gcrule.Rule
	gen = func(depth int) gcrule.Rule {
		k := rng.IntN(5)
		if depth == 0 {
			k = rng.IntN(3)
		}
		switch k {
		case 0:
			return gcrule.MaxAge(time.Duration(rng.Int64()))
		case 1:
			return gcrule.MaxVersions(int(rng.Int32()))
		case 2:
			if depth < 3 {
				return gcrule.None()
			}
			return gcrule.MaxVersions(1)
		}
		kids := make([]gcrule.Rule, rng.IntN(4))
		for i := range kids {
			kids[i] = gen(depth - 1)
		}
		if k == 3 {
			return gcrule.Union(kids...)
		}
		return gcrule.Intersection(kids...)
	}
	for range 2000 {
		r := gen(4)
		p := GCRuleToProto(r)
		b, err := proto.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var wire adminpb.GcRule
		if err := proto.Unmarshal(b, &wire); err != nil {
			t.Fatal(err)
		}
		back, err := GCRuleFromProto(&wire)
		if err != nil || !back.Equal(r) {
			t.Fatalf("%s: through the wire = %s, %v", r, back, err)
		}
	}
}
