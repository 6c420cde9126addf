package disclosure_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/schema/disclosure"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// s returns n code points: multi-byte ones, so that limits are shown to
// count code points, not bytes.
func s(n int) string { return strings.Repeat("é", n) }

// q quotes a string as JSON.
func q(v string) string { return fmt.Sprintf("%q", v) }

func list(n int, item string) string {
	items := make([]string, n)
	for i := range items {
		items[i] = item
	}
	return "[" + strings.Join(items, ",") + "]"
}

func TestValidValue(t *testing.T) {
	li := func(extra string) string { return `{"given_name":"Ada","family_name":"Lovelace"` + extra + `}` }
	cd := func(extra string) string { return `{"email":"ada@example.org","phone":"+44 20 0000"` + extra + `}` }
	addr := func(fields string) string { return cd(`,"address":{` + fields + `}`) }
	const a0 = `"line1":"1 St James's Square","city":"London","postal_code":"SW1Y 4JH","country_code":"GB"`
	td := func(fields string) string {
		return `[{"document_type":"passport","issuing_country":"GB","number":"123456789","expiry_date":"2030-12-31"` + fields + `}]`
	}
	cases := []struct {
		class string
		raw   string
		want  bool
	}{
		// legal_identity
		{"legal_identity", li(``), true},
		{"legal_identity", li(`,"middle_names":["Augusta"],"title":"Countess","gender":"f"`), true},
		{"legal_identity", li(`,"gender":"m"`), true},
		{"legal_identity", li(`,"gender":"F"`), false},
		{"legal_identity", li(`,"gender":"x"`), false},
		{"legal_identity", li(`,"gender":""`), false},
		{"legal_identity", li(`,"gender":null`), false},
		{"legal_identity", `{"given_name":` + q(s(200)) + `,"family_name":"L"}`, true},
		{"legal_identity", `{"given_name":` + q(s(201)) + `,"family_name":"L"}`, false},
		{"legal_identity", `{"given_name":"A","family_name":` + q(s(200)) + `}`, true},
		{"legal_identity", `{"given_name":"A","family_name":` + q(s(201)) + `}`, false},
		{"legal_identity", li(`,"middle_names":[]`), true},
		{"legal_identity", li(`,"middle_names":` + list(10, `"M"`)), true},
		{"legal_identity", li(`,"middle_names":` + list(11, `"M"`)), false},
		{"legal_identity", li(`,"middle_names":[` + q(s(200)) + `]`), true},
		{"legal_identity", li(`,"middle_names":[` + q(s(201)) + `]`), false},
		{"legal_identity", li(`,"middle_names":[""]`), false},
		{"legal_identity", li(`,"middle_names":"Augusta"`), false},
		{"legal_identity", li(`,"title":` + q(s(40))), true},
		{"legal_identity", li(`,"title":` + q(s(41))), false},
		{"legal_identity", li(`,"title":""`), false},
		{"legal_identity", `{"given_name":"Ada"}`, false},
		{"legal_identity", `{"family_name":"Lovelace"}`, false},
		{"legal_identity", `{"given_name":"  ","family_name":"L"}`, false},
		{"legal_identity", `{"given_name":"A\nB","family_name":"L"}`, false},
		{"legal_identity", `{"given_name":"A\rB","family_name":"L"}`, false},
		{"legal_identity", `{"given_name":"A\tB","family_name":"L"}`, false},
		{"legal_identity", `{"given_name":"A\u0085B","family_name":"L"}`, false},
		{"legal_identity", `{"given_name":"A\u2028B","family_name":"L"}`, false},
		{"legal_identity", `{"given_name":"A\u0000B","family_name":"L"}`, false},
		{"legal_identity", `{"given_name":" Ada ","family_name":"L"}`, true}, // kept as sent
		{"legal_identity", `{"given_name":1,"family_name":"L"}`, false},
		{"legal_identity", `{"Given_name":"A","family_name":"L"}`, false},
		{"legal_identity", li(`,"nickname":"Ada"`), false},
		{"legal_identity", li(`,"given_name":"Eve"`), false},
		{"legal_identity", `"Ada Lovelace"`, false},
		{"legal_identity", `[` + li(``) + `]`, false},
		{"legal_identity", `null`, false},

		// birth_date
		{"birth_date", `"1990-01-31"`, true},
		{"birth_date", `"2024-02-29"`, true},
		{"birth_date", `"2000-02-29"`, true},
		{"birth_date", `"0001-01-01"`, true},
		{"birth_date", `"2023-02-29"`, false},
		{"birth_date", `"1900-02-29"`, false},
		{"birth_date", `"2024-04-31"`, false},
		{"birth_date", `"2024-13-01"`, false},
		{"birth_date", `"2024-00-10"`, false},
		{"birth_date", `"2024-01-00"`, false},
		{"birth_date", `"0000-01-01"`, false},
		{"birth_date", `"1990-1-31"`, false},
		{"birth_date", `"90-01-31"`, false},
		{"birth_date", `"1990-01-31T00:00:00Z"`, false},
		{"birth_date", `" 1990-01-31"`, false},
		{"birth_date", `"1990/01/31"`, false},
		{"birth_date", `"١٩٩٠-01-31"`, false},
		{"birth_date", `""`, false},
		{"birth_date", `19900131`, false},
		{"birth_date", `{"date":"1990-01-31"}`, false},
		{"birth_date", `null`, false},

		// contact_details
		{"contact_details", cd(``), true},
		{"contact_details", `{"email":` + q(strings.Repeat("x", 318)+"@y") + `,"phone":"1"}`, true},
		{"contact_details", `{"email":` + q(strings.Repeat("x", 319)+"@y") + `,"phone":"1"}`, false},
		{"contact_details", `{"email":"ada.example.org","phone":"1"}`, false},
		{"contact_details", `{"email":"@","phone":"1"}`, true},
		{"contact_details", `{"email":"a@b","phone":` + q(s(80)) + `}`, true},
		{"contact_details", `{"email":"a@b","phone":` + q(s(81)) + `}`, false},
		{"contact_details", `{"email":"a@b"}`, false},
		{"contact_details", `{"phone":"1"}`, false},
		{"contact_details", `{"email":"a@b","phone":"1","fax":"2"}`, false},
		{"contact_details", addr(a0), true},
		{"contact_details", addr(a0 + `,"line2":"Flat 2","region":"Westminster"`), true},
		{"contact_details", addr(`"line1":` + q(s(300)) + `,"city":"L","postal_code":"P","country_code":"GB"`), true},
		{"contact_details", addr(`"line1":` + q(s(301)) + `,"city":"L","postal_code":"P","country_code":"GB"`), false},
		{"contact_details", addr(a0 + `,"line2":` + q(s(300))), true},
		{"contact_details", addr(a0 + `,"line2":` + q(s(301))), false},
		{"contact_details", addr(`"line1":"1","city":` + q(s(200)) + `,"postal_code":"P","country_code":"GB"`), true},
		{"contact_details", addr(`"line1":"1","city":` + q(s(201)) + `,"postal_code":"P","country_code":"GB"`), false},
		{"contact_details", addr(a0 + `,"region":` + q(s(200))), true},
		{"contact_details", addr(a0 + `,"region":` + q(s(201))), false},
		{"contact_details", addr(`"line1":"1","city":"L","postal_code":` + q(s(40)) + `,"country_code":"GB"`), true},
		{"contact_details", addr(`"line1":"1","city":"L","postal_code":` + q(s(41)) + `,"country_code":"GB"`), false},
		{"contact_details", addr(`"line1":"1","city":"L","postal_code":"P","country_code":"gb"`), false},
		{"contact_details", addr(`"line1":"1","city":"L","postal_code":"P","country_code":"GBR"`), false},
		{"contact_details", addr(`"line1":"1","city":"L","postal_code":"P","country_code":"G"`), false},
		{"contact_details", addr(`"line1":"1","city":"L","postal_code":"P"`), false},
		{"contact_details", addr(`"line1":"1","postal_code":"P","country_code":"GB"`), false},
		{"contact_details", addr(a0 + `,"line3":"x"`), false},
		{"contact_details", addr(a0 + `,"line2":""`), false},
		{"contact_details", cd(`,"address":null`), false},
		{"contact_details", cd(`,"address":"1 Main St"`), false},

		// accessibility_needs
		{"accessibility_needs", `[]`, true},
		{"accessibility_needs", `[{"kind":"wheelchair"}]`, true},
		{"accessibility_needs", `[{"kind":"WCHR.assist-1_x","details":"Needs an aisle chair"}]`, true},
		{"accessibility_needs", `[{"kind":` + q(strings.Repeat("k", 128)) + `}]`, true},
		{"accessibility_needs", `[{"kind":` + q(strings.Repeat("k", 129)) + `}]`, false},
		{"accessibility_needs", `[{"kind":"wheel chair"}]`, false},
		{"accessibility_needs", `[{"kind":"a/b"}]`, false},
		{"accessibility_needs", `[{"kind":"é"}]`, false},
		{"accessibility_needs", `[{"kind":""}]`, false},
		{"accessibility_needs", `[{"details":"x"}]`, false},
		{"accessibility_needs", `[{"kind":"k","details":` + q(s(1000)) + `}]`, true},
		{"accessibility_needs", `[{"kind":"k","details":` + q(s(1001)) + `}]`, false},
		{"accessibility_needs", `[{"kind":"k","details":"a\nb"}]`, false},
		{"accessibility_needs", list(20, `{"kind":"k"}`), true},
		{"accessibility_needs", list(21, `{"kind":"k"}`), false},
		{"accessibility_needs", `{"kind":"k"}`, false},
		{"accessibility_needs", `[{"kind":"k","kind":"j"}]`, false},

		// loyalty_accounts
		{"loyalty_accounts", `[]`, true},
		{"loyalty_accounts", `[{"program":"Miles","member_number":"123"}]`, true},
		{"loyalty_accounts", `[{"program":` + q(s(200)) + `,"member_number":` + q(s(200)) + `}]`, true},
		{"loyalty_accounts", `[{"program":` + q(s(201)) + `,"member_number":"1"}]`, false},
		{"loyalty_accounts", `[{"program":"P","member_number":` + q(s(201)) + `}]`, false},
		{"loyalty_accounts", `[{"program":"P"}]`, false},
		{"loyalty_accounts", `[{"program":"P","member_number":123}]`, false},
		{"loyalty_accounts", `[{"program":"P","member_number":"1","tier":"gold"}]`, false},
		{"loyalty_accounts", list(20, `{"program":"P","member_number":"1"}`), true},
		{"loyalty_accounts", list(21, `{"program":"P","member_number":"1"}`), false},

		// travel_documents
		{"travel_documents", `[]`, true},
		{"travel_documents", td(``), true},
		{"travel_documents", td(`,"nationality":"DE"`), true},
		{"travel_documents", `[{"document_type":"national_identity_card","issuing_country":"FR","number":"X1","expiry_date":"2028-02-29"}]`, true},
		{"travel_documents", `[{"document_type":"visa","issuing_country":"FR","number":"X1","expiry_date":"2028-01-01"}]`, false},
		{"travel_documents", `[{"document_type":"Passport","issuing_country":"FR","number":"X1","expiry_date":"2028-01-01"}]`, false},
		{"travel_documents", `[{"document_type":"passport","issuing_country":"fr","number":"X1","expiry_date":"2028-01-01"}]`, false},
		{"travel_documents", `[{"document_type":"passport","issuing_country":"FR","number":` + q(s(200)) + `,"expiry_date":"2028-01-01"}]`, true},
		{"travel_documents", `[{"document_type":"passport","issuing_country":"FR","number":` + q(s(201)) + `,"expiry_date":"2028-01-01"}]`, false},
		{"travel_documents", `[{"document_type":"passport","issuing_country":"FR","number":"X1","expiry_date":"2027-02-29"}]`, false},
		{"travel_documents", `[{"document_type":"passport","issuing_country":"FR","number":"X1"}]`, false},
		{"travel_documents", td(`,"nationality":"DEU"`), false},
		{"travel_documents", td(`,"nationality":""`), false},
		{"travel_documents", list(10, td(``)[1:len(td(``))-1]), true},
		{"travel_documents", list(11, td(``)[1:len(td(``))-1]), false},

		// no other class has a contract
		{"ssn", `"123-45-6789"`, false},
		{"", `{}`, false},
	}
	for i, c := range cases {
		if got := disclosure.ValidValue(c.class, jsontext.Value(c.raw)); got != c.want {
			t.Errorf("%d %s %.80s: got %v, want %v", i, c.class, c.raw, got, c.want)
		}
	}
}
