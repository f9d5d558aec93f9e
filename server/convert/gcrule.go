package convert

import (
	"fmt"
	"math"
	"time"

	adminpb "cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"github.com/ebbtable/ebbtable/gcrule"
	"google.golang.org/protobuf/types/known/durationpb"
)

// GCRuleFromProto converts a family's GcRule. nil and an empty GcRule are no
// rule (gcrule.None); the shape is kept exactly (a union of one child stays a
// union of one child; an empty GcRule inside a union becomes a None child), so
// GCRuleToProto gives back an equal proto. It does not validate: call
// Validate on the result. Errors (a max age that is not a valid
// google.protobuf.Duration or does not fit in a time.Duration, about 292
// years) wrap gcrule.ErrInvalid.
func GCRuleFromProto(p *adminpb.GcRule) (gcrule.Rule, error) {
	return gcRuleFromProto(p, "")
}

func gcRuleFromProto(p *adminpb.GcRule, where string) (gcrule.Rule, error) {
	switch x := p.GetRule().(type) {
	case nil:
		return gcrule.None(), nil
	case *adminpb.GcRule_MaxNumVersions:
		return gcrule.MaxVersions(int(x.MaxNumVersions)), nil
	case *adminpb.GcRule_MaxAge:
		d, err := durationFromProto(x.MaxAge)
		if err != nil {
			return gcrule.Rule{}, fmt.Errorf("%w: %smax age %w", gcrule.ErrInvalid, where, err)
		}
		return gcrule.MaxAge(d), nil
	case *adminpb.GcRule_Union_:
		kids, err := gcRulesFromProto(x.Union.GetRules(), where+"union")
		if err != nil {
			return gcrule.Rule{}, err
		}
		return gcrule.Union(kids...), nil
	case *adminpb.GcRule_Intersection_:
		kids, err := gcRulesFromProto(x.Intersection.GetRules(), where+"intersection")
		if err != nil {
			return gcrule.Rule{}, err
		}
		return gcrule.Intersection(kids...), nil
	default:
		return gcrule.Rule{}, fmt.Errorf("%w: %sunknown rule type %T", gcrule.ErrInvalid, where, x)
	}
}

func gcRulesFromProto(ps []*adminpb.GcRule, kind string) ([]gcrule.Rule, error) {
	kids := make([]gcrule.Rule, len(ps))
	for i, c := range ps {
		var err error
		if kids[i], err = gcRuleFromProto(c, fmt.Sprintf("%s rule %d: ", kind, i+1)); err != nil {
			return nil, err
		}
	}
	return kids, nil
}

// durationFromProto converts exactly; a nil duration is zero.
func durationFromProto(p *durationpb.Duration) (time.Duration, error) {
	if p == nil {
		return 0, nil
	}
	if err := p.CheckValid(); err != nil {
		return 0, fmt.Errorf("is not a valid duration (%d s, %d ns)", p.GetSeconds(), p.GetNanos())
	}
	s, n := p.GetSeconds(), int64(p.GetNanos())
	const maxSeconds = math.MaxInt64 / 1_000_000_000
	if s > maxSeconds || s < -maxSeconds ||
		(n > 0 && s*1e9 > math.MaxInt64-n) || (n < 0 && s*1e9 < math.MinInt64-n) {
		return 0, fmt.Errorf("of %d s is too long (the limit is about 292 years)", s)
	}
	return time.Duration(s*1e9 + n), nil
}

// GCRuleToProto converts a rule for the Table Admin API: None is nil (no
// rule), and a None inside a union or intersection is an empty GcRule. Max
// ages keep their nanoseconds. A max versions beyond int32 (refused by
// Validate) is clamped to the int32 range rather than wrapped.
func GCRuleToProto(r gcrule.Rule) *adminpb.GcRule {
	if r.IsNone() {
		return nil
	}
	return gcRuleToProto(r)
}

func gcRuleToProto(r gcrule.Rule) *adminpb.GcRule {
	switch r.Kind() {
	case gcrule.KindMaxAge:
		ns := r.Age().Nanoseconds()
		return &adminpb.GcRule{Rule: &adminpb.GcRule_MaxAge{MaxAge: &durationpb.Duration{
			Seconds: ns / 1e9,
			Nanos:   int32(ns % 1e9),
		}}}
	case gcrule.KindMaxVersions:
		n := min(max(r.Versions(), math.MinInt32), math.MaxInt32)
		return &adminpb.GcRule{Rule: &adminpb.GcRule_MaxNumVersions{MaxNumVersions: int32(n)}}
	case gcrule.KindUnion:
		return &adminpb.GcRule{Rule: &adminpb.GcRule_Union_{Union: &adminpb.GcRule_Union{Rules: gcRulesToProto(r.Children())}}}
	case gcrule.KindIntersection:
		return &adminpb.GcRule{Rule: &adminpb.GcRule_Intersection_{Intersection: &adminpb.GcRule_Intersection{Rules: gcRulesToProto(r.Children())}}}
	}
	return &adminpb.GcRule{}
}

func gcRulesToProto(rs []gcrule.Rule) []*adminpb.GcRule {
	ps := make([]*adminpb.GcRule, len(rs))
	for i, r := range rs {
		ps[i] = gcRuleToProto(r)
	}
	return ps
}
