package disclosure

import (
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/schema"
)

// List bounds of the value contracts. SPEC §2.6 gives none; these are far
// above any real passenger's needs and keep a reply small. An empty list is
// valid: it is the truthful answer "none" (no accessibility needs, no
// loyalty accounts, no middle names, no travel documents on file).
const (
	MaxMiddleNames        = 10
	MaxAccessibilityNeeds = 20
	MaxLoyaltyAccounts    = 20
	MaxTravelDocuments    = 10
)

// Text limits of the value contracts, in Unicode code points (SPEC §2.6).
const (
	maxName         = 200
	maxTitle        = 40
	maxEmail        = 320
	maxPhone        = 80
	maxAddressLine  = 300
	maxCity         = 200
	maxRegion       = 200
	maxPostalCode   = 40
	maxDetails      = 1000
	maxProgram      = 200
	maxMemberNumber = 200
	maxDocNumber    = 200
)

var (
	countryPattern = regexp.MustCompile(`^[A-Z]{2}$`)
	kindPattern    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
	datePattern    = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}$`)
)

type legalIdentity struct {
	GivenName   string   `json:"given_name"`
	FamilyName  string   `json:"family_name"`
	MiddleNames []string `json:"middle_names"`
	Title       *string  `json:"title"`
	Gender      *string  `json:"gender"`
}

type contactDetails struct {
	Email   string   `json:"email"`
	Phone   string   `json:"phone"`
	Address *address `json:"address"`
}

type address struct {
	Line1       string  `json:"line1"`
	Line2       *string `json:"line2"`
	City        string  `json:"city"`
	Region      *string `json:"region"`
	PostalCode  string  `json:"postal_code"`
	CountryCode string  `json:"country_code"`
}

type accessibilityNeed struct {
	Kind    string  `json:"kind"`
	Details *string `json:"details"`
}

type loyaltyAccount struct {
	Program      string `json:"program"`
	MemberNumber string `json:"member_number"`
}

type travelDocument struct {
	DocumentType   string  `json:"document_type"`
	IssuingCountry string  `json:"issuing_country"`
	Number         string  `json:"number"`
	ExpiryDate     string  `json:"expiry_date"`
	Nationality    *string `json:"nationality"`
}

// ValidValue reports whether raw is a valid value of class (SPEC §2.6):
//
//	legal_identity      {given_name ≤200, family_name ≤200, middle_names?: [≤200], title? ≤40, gender?: "m"|"f"}
//	birth_date          "YYYY-MM-DD", a real Gregorian calendar date (year ≥ 1)
//	contact_details     {email ≤320 containing "@", phone ≤80, address?: {line1 ≤300, line2? ≤300, city ≤200, region? ≤200, postal_code ≤40, country_code ^[A-Z]{2}$}}
//	accessibility_needs [{kind ^[A-Za-z0-9._-]{1,128}$, details? ≤1000}]
//	loyalty_accounts    [{program ≤200, member_number ≤200}]
//	travel_documents    [{document_type "passport"|"national_identity_card", issuing_country ^[A-Z]{2}$, number ≤200, expiry_date "YYYY-MM-DD", nationality? ^[A-Z]{2}$}]
//
// Decoding is strict: no unknown or duplicate members at any depth, no
// null (an optional member is omitted, never null), exact JSON types. Every
// text is non-empty and not only white space, at most its limit in code
// points, and single line: no control characters (which include CR, LF,
// NEL and tab) and no line or paragraph separators. Lists hold at most
// their Max… bound and may be empty. Values are not trimmed or otherwise
// changed: the adapter receives them as sent.
func ValidValue(class string, raw jsontext.Value) bool {
	if hasNull(raw) {
		return false
	}
	switch class {
	case schema.ClassLegalIdentity:
		var v legalIdentity
		if schema.Decode(raw, &v) != nil || !text(v.GivenName, maxName) || !text(v.FamilyName, maxName) || len(v.MiddleNames) > MaxMiddleNames {
			return false
		}
		for _, m := range v.MiddleNames {
			if !text(m, maxName) {
				return false
			}
		}
		return optText(v.Title, maxTitle) && (v.Gender == nil || *v.Gender == "m" || *v.Gender == "f")
	case schema.ClassBirthDate:
		var v string
		return schema.Decode(raw, &v) == nil && date(v)
	case schema.ClassContactDetails:
		var v contactDetails
		if schema.Decode(raw, &v) != nil || !text(v.Email, maxEmail) || !strings.Contains(v.Email, "@") || !text(v.Phone, maxPhone) {
			return false
		}
		a := v.Address
		return a == nil || (text(a.Line1, maxAddressLine) && optText(a.Line2, maxAddressLine) && text(a.City, maxCity) &&
			optText(a.Region, maxRegion) && text(a.PostalCode, maxPostalCode) && countryPattern.MatchString(a.CountryCode))
	case schema.ClassAccessibilityNeeds:
		var v []accessibilityNeed
		if schema.Decode(raw, &v) != nil || len(v) > MaxAccessibilityNeeds {
			return false
		}
		for _, n := range v {
			if !kindPattern.MatchString(n.Kind) || !optText(n.Details, maxDetails) {
				return false
			}
		}
		return true
	case schema.ClassLoyaltyAccounts:
		var v []loyaltyAccount
		if schema.Decode(raw, &v) != nil || len(v) > MaxLoyaltyAccounts {
			return false
		}
		for _, a := range v {
			if !text(a.Program, maxProgram) || !text(a.MemberNumber, maxMemberNumber) {
				return false
			}
		}
		return true
	case schema.ClassTravelDocuments:
		var v []travelDocument
		if schema.Decode(raw, &v) != nil || len(v) > MaxTravelDocuments {
			return false
		}
		for _, d := range v {
			if (d.DocumentType != "passport" && d.DocumentType != "national_identity_card") ||
				!countryPattern.MatchString(d.IssuingCountry) || !text(d.Number, maxDocNumber) || !date(d.ExpiryDate) ||
				(d.Nationality != nil && !countryPattern.MatchString(*d.Nationality)) {
				return false
			}
		}
		return true
	}
	return false
}

// text is the rule for every text of a value contract.
func text(s string, max int) bool {
	if strings.TrimSpace(s) == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return false
		}
	}
	return true
}

func optText(s *string, max int) bool { return s == nil || text(*s, max) }

// date accepts YYYY-MM-DD naming a real date: 2024-02-29 but not
// 2023-02-29, 2024-04-31 or year 0000.
func date(s string) bool {
	if !datePattern.MatchString(s) || s[:4] == "0000" {
		return false
	}
	_, err := time.Parse(time.DateOnly, s)
	return err == nil
}
