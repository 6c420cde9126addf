package schema

import (
	"slices"
)

// Protected-disclosure field classes (SPEC §2.6).
const (
	ClassLegalIdentity      = "legal_identity"
	ClassBirthDate          = "birth_date"
	ClassContactDetails     = "contact_details"
	ClassAccessibilityNeeds = "accessibility_needs"
	ClassLoyaltyAccounts    = "loyalty_accounts"
	ClassTravelDocuments    = "travel_documents"
)

// FieldClasses lists the closed set of disclosure classes.
func FieldClasses() []string {
	return []string{ClassLegalIdentity, ClassBirthDate, ClassContactDetails, ClassAccessibilityNeeds, ClassLoyaltyAccounts, ClassTravelDocuments}
}

// Disclosure sources.
const (
	SourceUserProfile          = "user_profile"
	SourceFictionalTestFixture = "fictional_test_fixture"
)

// Authentication assurances, weakest first (SPEC §2.2).
const (
	AssuranceNone      = "none"
	AssuranceSession   = "session"
	AssuranceBiometric = "biometric"
	AssuranceManaged   = "managed"
)

// AssuranceRank orders assurances; -1 for an unknown one.
func AssuranceRank(a string) int {
	switch a {
	case AssuranceNone:
		return 0
	case AssuranceSession:
		return 1
	case AssuranceBiometric:
		return 2
	case AssuranceManaged:
		return 3
	}
	return -1
}

// DisclosurePlan is the value-free plan inside an intent: which classes of
// protected values the provider needs, for whom and why.
type DisclosurePlan struct {
	FieldClasses            []string `json:"field_classes"`
	Recipient               string   `json:"recipient"`
	Purpose                 string   `json:"purpose"`
	Source                  string   `json:"source"`
	RequireReauthentication bool     `json:"require_reauthentication"`
}

// Plan limits (SPEC §2.6).
const (
	MaxRecipientLen = 300
	MaxPurposeLen   = 500
)

// Normalize trims recipient and purpose and sorts the classes.
func (p *DisclosurePlan) Normalize() {
	p.Recipient = TrimASCII(p.Recipient)
	p.Purpose = TrimASCII(p.Purpose)
	p.FieldClasses = slices.Clone(p.FieldClasses)
	slices.Sort(p.FieldClasses)
}

// Valid checks a normalized plan: 1–6 unique known classes, a single-line
// recipient and purpose within their limits, and a known source.
func (p *DisclosurePlan) Valid() bool { return len(p.problems()) == 0 }

// problems lists the rules a normalized plan breaks, paths relative to it.
// The classes are sorted by then, so a class is named by the array, not by
// its index.
func (p *DisclosurePlan) problems() []Problem {
	var out []Problem
	bad := func(path string, rule Rule) { out = append(out, Problem{Path: path, Rule: rule, Offset: -1}) }
	if len(p.FieldClasses) < 1 || len(p.FieldClasses) > len(FieldClasses()) {
		bad("/field_classes", RuleClassCount)
	}
	seen := map[string]bool{}
	unknown, repeated := false, false
	for _, c := range p.FieldClasses {
		unknown = unknown || !slices.Contains(FieldClasses(), c)
		repeated = repeated || seen[c]
		seen[c] = true
	}
	if unknown {
		bad("/field_classes", RuleClassKnown)
	}
	if repeated {
		bad("/field_classes", RuleClassRepeated)
	}
	if !singleLine(p.Recipient, MaxRecipientLen) {
		bad("/recipient", RuleRecipient)
	}
	if !singleLine(p.Purpose, MaxPurposeLen) {
		bad("/purpose", RulePurpose)
	}
	if p.Source != SourceUserProfile && p.Source != SourceFictionalTestFixture {
		bad("/source", RuleDisclosureFrom)
	}
	return out
}

// DisclosureRecord is the value-free record of a disclosure that a receipt
// and the activity record keep.
type DisclosureRecord struct {
	Recipient               string   `json:"recipient"`
	Purpose                 string   `json:"purpose"`
	FieldClasses            []string `json:"field_classes"`
	Source                  string   `json:"source"`
	AuthenticationAssurance string   `json:"authentication_assurance"`
}
