package config_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/internal/adapters"
	"github.com/portcullis/portcullis/internal/config"
)

func TestExampleParses(t *testing.T) {
	c, err := config.Load("../../config.example.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(c.Hosts) != 1 || c.Hosts[0].Name != "frontdesk" || !c.Hosts[0].Speaks("tenant:demo") {
		t.Errorf("hosts = %+v", c.Hosts)
	}
	if len(c.Policies) != 1 || c.Policies[0].MaxExternalSpend["USD"] != 50000 || !c.Policies[0].AutomaticApprovalForbidden {
		t.Errorf("policies = %+v", c.Policies)
	}
	p, ok := c.Provider("inventory")
	if !ok || p.Adapter != adapters.KindNATS || p.Timeout != 10*time.Second || p.UnavailableRetry != 30*time.Second {
		t.Errorf("inventory = %+v", p)
	}
	if d, _ := c.Provider("demo"); d.Adapter != adapters.KindFake || d.Settings.(adapters.FakeScript).Dispatch[0] != "confirmed" {
		t.Errorf("demo = %+v", d)
	}
	if len(c.Tenants) != 1 || len(c.Connectors) != 1 || len(c.Resolvers) != 1 || len(c.Sources) != 1 || len(c.Operators) != 1 || !c.NATS.Auth {
		t.Errorf("roles = %+v %+v %+v %+v %+v auth=%v", c.Tenants, c.Connectors, c.Resolvers, c.Sources, c.Operators, c.NATS.Auth)
	}
	if c.Approval.ClockSkew != 30*time.Second || c.Approval.MaxGrantLifetime != 24*time.Hour || c.Streams.IngressMaxBytes != 64<<20 || c.Streams.IngressMaxMsgs != 10_000 || c.Streams.HostHistoryMaxMsgs != 100_000 || c.Streams.MaxAge != 168*time.Hour {
		t.Errorf("approval/streams = %+v %+v", c.Approval, c.Streams)
	}
	if c.InternalKeyFile() != "data/store/internal.key" {
		t.Errorf("internal key file = %q", c.InternalKeyFile())
	}
	if c.Approval.TTL != 10*time.Minute || c.Reconciliation.MaxAttempts != 10 || c.Grounding.MaxCandidates != 32 {
		t.Errorf("defaults differ from the example: %+v", c)
	}
}

func TestEmptyIsDefaults(t *testing.T) {
	c, err := config.Parse(nil, "empty.hcl")
	if err != nil {
		t.Fatal(err)
	}
	d := config.Defaults()
	if c.NATS != d.NATS || c.Store != d.Store || c.Metrics != d.Metrics || c.Prefix != "actions" || c.Admission != d.Admission {
		t.Errorf("got %+v want %+v", c, d)
	}
	if err := config.Dev(t.TempDir()).Validate(); err != nil {
		t.Errorf("dev config invalid: %v", err)
	}
}

func TestErrorsCarryFileLine(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"unknown key", "nats {\n  embeded = true\n}\n", "bad.hcl:2,"},
		{"unknown block", "\n\nfrobnicate {}\n", "bad.hcl:3,"},
		{"bad duration", "approval {\n  ttl = \"soon\"\n}\n", "bad.hcl:2,"},
		{"negative duration", "approval {\n  ttl = \"-1s\"\n}\n", "bad.hcl:2,"},
		{"wrong type", "admission {\n  max_payload_bytes = \"big\"\n}\n", "bad.hcl:2,"},
		{"out of range", "grounding {\n max_candidates = 0\n}\n", "bad.hcl:2,"},
		{"bad host key", "host \"h\" {\n  public_key = \"nope\"\n  tenants = [\"t\"]\n}\n", "bad.hcl:2,"},
		{"host without tenants", "host \"h\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n  tenants = []\n}\n", "bad.hcl:3,"},
		{"bad adapter", "provider \"p\" {\n adapter = \"smoke\"\n}\n", "bad.hcl:2,"},
		{"http without url", "provider \"p\" {\n adapter = \"http\"\n}\n", "bad.hcl:1,"},
		{"bad provider name", "provider \"P.Q\" {}\n", "bad.hcl:1,"},
		{"duplicate provider", "provider \"p\" {}\nprovider \"p\" {}\n", "bad.hcl:2,"},
		{"bad assurance", "managed_policy \"m\" {\n  minimum_authentication_assurance = \"retina\"\n}\n", "bad.hcl:2,"},
		{"bad currency", "managed_policy \"m\" {\n  max_external_spend = { usd = 5 }\n}\n", "bad.hcl:2,"},
		{"bad environment", "managed_policy \"m\" {\n  allowed_environments = [\"prod\"]\n}\n", "bad.hcl:2,"},
		{"unknown policy key", "managed_policy \"m\" {\n  disabled = false\n  max_spend = 5\n}\n", "bad.hcl:3,"},
		{"policy for no domain", "managed_policy \"m\" {\n  security_domains = []\n}\n", "bad.hcl:2,"},
		{"policy for an empty domain", "managed_policy \"m\" {\n  security_domains = [\"\"]\n}\n", "bad.hcl:2,"},
		{"duplicate policy", "managed_policy \"m\" {}\nmanaged_policy \"m\" {}\n", "bad.hcl:2,"},
		{"embedded replicas", "nats {\n  replicas = 3\n}\n", "bad.hcl:2,"},
		{"url and embedded", "nats {\n  embedded = true\n  url = \"nats://x:4222\"\n}\n", "bad.hcl:3,"},
		{"script on nats", "provider \"p\" {\n  script {\n  dispatch = [\"confirmed\"]\n  }\n}\n", "bad.hcl:2,"},
		{"bad script outcome", "provider \"p\" {\n  adapter = \"fake\"\n  script {\n    reconcile = [\"acknowledged\"]\n  }\n}\n", "bad.hcl:4,"},
		{"bad prefix", "subjects {\n  prefix = \"a.>\"\n}\n", "bad.hcl:2,"},
		{"syntax", "nats {\n", "bad.hcl:"},
		{"tenant without block", "host \"h\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n  tenants = [\"t\"]\n}\n", "bad.hcl:3,"},
		{"tenant without domains", "tenant \"t\" {\n  security_domains = []\n}\n", "bad.hcl:2,"},
		{"host name not a token", "tenant \"t\" {\n  security_domains = [\"d\"]\n}\nhost \"a.b\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n  tenants = [\"t\"]\n}\n", "bad.hcl:4,"},
		{"name shared across kinds", "resolver \"x\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n}\noperator \"x\" {\n  public_key = \"UAVZZYXS64PVNLBL243J5AN56G3KKUL37W7NZWCSNI6QKZ5W6UHMICKU\"\n}\n", "bad.hcl:4,"},
		{"key shared across kinds", "resolver \"x\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n}\noperator \"y\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n}\n", "bad.hcl:5,"},
		{"bad operator key", "operator \"x\" {\n  public_key = \"SUAB\"\n}\n", "bad.hcl:2,"},
		{"connector for no provider", "connector \"c\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n  providers = [\"nope\"]\n}\n", "bad.hcl:3,"},
		{"provider served by two connectors", "provider \"p\" {}\nprovider \"q\" {}\nconnector \"c1\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n  providers = [\"p\"]\n}\nconnector \"c2\" {\n  public_key = \"UAVZZYXS64PVNLBL243J5AN56G3KKUL37W7NZWCSNI6QKZ5W6UHMICKU\"\n  providers = [\"q\", \"p\"]\n}\n", `bad.hcl:9,15-25: Invalid value for providers; provider "p" is served by connector "c1" already`},
		{"provider listed twice", "provider \"p\" {}\nconnector \"c\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n  providers = [\"p\", \"p\"]\n}\n", `bad.hcl:4,15-25: Invalid value for providers; provider "p" is listed twice`},
		{"two resolvers", "resolver \"r1\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n}\n\nresolver \"r2\" {\n  public_key = \"UAVZZYXS64PVNLBL243J5AN56G3KKUL37W7NZWCSNI6QKZ5W6UHMICKU\"\n}\n", `bad.hcl:5,1-14: Invalid resolver; resolver "r1" is configured already`},
		{"source name", "source \"Cat\" {\n  public_key = \"UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A\"\n}\n", "bad.hcl:1,"},
		{"open listener without auth", "nats {\n  listen = \"0.0.0.0:4222\"\n  auth = false\n}\n", "bad.hcl:3,"},
		// Unsigned input on a server others can reach: anyone who can
		// publish would speak for any host's tenants (issue 20).
		{"unsigned on an open listener", "nats {\n  listen = \"0.0.0.0:4222\"\n}\nadmission {\n  allow_unsigned = true\n}\n", "bad.hcl:5,"},
		{"unsigned on a remote server", "nats {\n  url = \"nats://10.0.0.7:4222\"\n}\nadmission {\n  allow_unsigned = true\n}\n", "bad.hcl:5,"},
		{"unsigned on a cluster with one remote server", "nats {\n  url = \"nats://127.0.0.1:4222,nats://10.0.0.7:4222\"\n}\nadmission {\n  allow_unsigned = true\n}\n", "bad.hcl:5,"},
		{"bad listen", "nats {\n  listen = \"4222\"\n}\n", "bad.hcl:2,"},
		{"bad metrics listen", "metrics {\n  listen = \"localhost:http-ish\"\n}\n", "bad.hcl:2,"},
		{"tls half", "nats {\n  tls {\n    cert_file = \"a.pem\"\n  }\n}\n", "bad.hcl:2,"},
		{"negative skew", "approval {\n  clock_skew = \"-1s\"\n}\n", "bad.hcl:2,"},
		{"zero lifetime", "approval {\n  max_grant_lifetime = \"0s\"\n}\n", "bad.hcl:2,"},
		{"bad size", "streams {\n  ingress_max_bytes = \"lots\"\n}\n", "bad.hcl:2,"},
		{"tiny stream", "streams {\n  history_max_bytes = \"1KiB\"\n}\n", "bad.hcl:1,"},
		{"short max_age", "streams {\n  max_age = \"15m\"\n}\n", "bad.hcl:1,"},
		{"max_in_flight", "provider \"p\" {\n  max_in_flight = 0\n}\n", "bad.hcl:2,"},
		{"source_max_in_flight", "grounding {\n  source_max_in_flight = 5000\n}\n", "bad.hcl:2,"},
		{"short proposals horizon", "retention {\n  receipts = \"800h\"\n  proposals = \"24h\"\n}\n", "bad.hcl:3,"},
		{"short receipts horizon", "approval {\n  max_grant_lifetime = \"240h\"\n}\nretention {\n  receipts = \"200h\"\n}\n", "bad.hcl:5,"},
		{"bad sweep interval", "retention {\n  sweep_interval = \"0s\"\n}\n", "bad.hcl:2,"},
		{"empty key_file", "internal {\n  key_file = \"\"\n}\n", "bad.hcl:2,"},
		{"unknown journal", "store {\n  journal = \"raft\"\n}\n", `bad.hcl:2,13-19: Invalid value for journal; must be "auto", "local" or "replicated"`},
		{"replicated journal on the embedded server", "store {\n  journal = \"replicated\"\n}\n", "bad.hcl:2,"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse([]byte(tc.src), "bad.hcl")
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, config.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

func TestURLTurnsOffEmbedded(t *testing.T) {
	c, err := config.Parse([]byte("nats {\n url = \"nats://a:4222\"\n replicas = 3\n}\n"), "x.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.NATS.Embedded || c.NATS.Replicas != 3 {
		t.Errorf("nats = %+v", c.NATS)
	}
}

func TestFormatRoundTrips(t *testing.T) {
	for _, path := range []string{"../../config.example.hcl"} {
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		c.Policies[0].SecurityDomains = append(c.Policies[0].SecurityDomains, "quote\"d ${x} %{y}\n")
		back, err := config.Parse(config.Format(c), "formatted.hcl")
		if err != nil {
			t.Fatalf("%v\n%s", err, config.Format(c))
		}
		if !reflect.DeepEqual(c, back) {
			t.Errorf("round trip differs:\n%+v\n%+v", c, back)
		}
	}
	dev := config.Dev("/tmp/x")
	back, err := config.Parse(config.Format(dev), "dev.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dev, back) {
		t.Errorf("dev round trip differs:\n%+v\n%+v", dev, back)
	}
	remote := config.Defaults()
	remote.NATS.Embedded, remote.NATS.URL, remote.NATS.Credentials, remote.NATS.Replicas = false, "nats://a:4222", "/x.creds", 3
	back, err = config.Parse(config.Format(remote), "remote.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(remote, back) {
		t.Errorf("remote round trip differs:\n%+v\n%+v", remote, back)
	}
}

// An absent managed-policy key restricts nothing (nil); a present one, even
// empty, restricts (the policy package relies on the difference).
func TestManagedPolicyAbsentAndEmpty(t *testing.T) {
	c, err := config.Parse([]byte("managed_policy \"open\" {}\nmanaged_policy \"shut\" {\n  allowed_providers = []\n  max_external_spend = {}\n}\n"), "p.hcl")
	if err != nil {
		t.Fatal(err)
	}
	open, shut := c.Policies[0], c.Policies[1]
	if open.SecurityDomains != nil || open.AllowedProviders != nil || open.AllowedCapabilities != nil || open.AllowedEnvironments != nil || open.MaxExternalSpend != nil {
		t.Errorf("absent keys = %+v", open)
	}
	if shut.AllowedProviders == nil || len(shut.AllowedProviders) != 0 || shut.MaxExternalSpend == nil || len(shut.MaxExternalSpend) != 0 {
		t.Errorf("empty keys = %+v", shut)
	}
}

// TestEveryDiagnosticSorted: a file with many mistakes reports each of
// them, sorted by position: values of the wrong type and unknown keys do
// not hide the checks of everything else, and a key that failed to decode
// is not reported twice.
func TestEveryDiagnosticSorted(t *testing.T) {
	src := `nats {
  listen = 4222
  frob = 1
}
admission {
  max_payload_bytes = "big"
}
approval {
  ttl = "soon"
}
provider "p" {
  adapter = "smoke"
  max_in_flight = "x"
}
grounding {
  max_candidates = 0
}
host "h" {
  tenants = ["t"]
}
tenant "u" {
  security_domains = "d"
}
`
	_, err := config.Parse([]byte(src), "many.hcl")
	if err == nil || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		`many.hcl:2,12-16: Invalid value for listen`,
		`many.hcl:3,3-7: Unsupported argument; An argument named "frob"`,
		`many.hcl:6,24-27: Unsuitable value type`,
		`many.hcl:9,9-15: Invalid value for ttl`,
		`many.hcl:12,13-20: Invalid value for adapter`,
		`many.hcl:13,20-21: Unsuitable value type`,
		`many.hcl:16,20-21: Invalid value for max_candidates`,
		`many.hcl:18,10-10: Missing required argument; The argument "public_key" is required`,
		`many.hcl:19,13-18: Invalid value for tenants; tenant "t" has no tenant block`,
		`many.hcl:22,23-24: Unsuitable value type; Unsuitable value: list of string required`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d diagnostics, want %d:\n%s", len(lines), len(want), err)
	}
	for i := range min(len(lines), len(want)) {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("diagnostic %d: %q, want it to begin %q", i+1, lines[i], want[i])
		}
	}
	var cerr *config.Error
	if !errors.As(err, &cerr) || len(cerr.Diags) != len(lines) {
		t.Errorf("Diags hold %d, the message %d", len(cerr.Diags), len(lines))
	}
}

// store.journal: auto picks the replicated journal with an external server
// (possibly shared by several processors) and the local one with the
// embedded server; an explicit choice wins.
func TestJournalChoice(t *testing.T) {
	cases := []struct {
		src        string
		replicated bool
	}{
		{"", false},
		{"store {\n  journal = \"local\"\n}\n", false},
		{"nats {\n  url = \"nats://a:4222,nats://b:4222\"\n  replicas = 3\n}\n", true},
		{"nats {\n  url = \"nats://a:4222\"\n}\nstore {\n  journal = \"auto\"\n}\n", true},
		{"nats {\n  url = \"nats://a:4222\"\n}\nstore {\n  journal = \"local\"\n}\n", false},
		{"nats {\n  url = \"nats://a:4222\"\n}\nstore {\n  journal = \"replicated\"\n}\n", true},
	}
	for _, tc := range cases {
		c, err := config.Parse([]byte(tc.src), "j.hcl")
		if err != nil {
			t.Fatalf("%q: %v", tc.src, err)
		}
		if c.ReplicatedJournal() != tc.replicated {
			t.Errorf("%q: replicated journal %v, want %v", tc.src, c.ReplicatedJournal(), tc.replicated)
		}
		back, err := config.Parse(config.Format(c), "formatted.hcl")
		if err != nil || back.Store != c.Store {
			t.Errorf("%q: formatted and parsed again: %+v %v", tc.src, back.Store, err)
		}
	}
	c := config.Defaults()
	c.Store.Journal = config.JournalReplicated
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "store.journal") {
		t.Errorf("a replicated journal on the embedded server validated: %v", err)
	}
}

// Unset retention horizons follow the streams and approval settings.
func TestRetentionHorizons(t *testing.T) {
	c := config.Defaults()
	if p, r := c.RetentionHorizons(); p != 192*time.Hour || r != 720*time.Hour {
		t.Errorf("defaults: proposals %s, receipts %s", p, r)
	}
	c.Streams.MaxAge = 1000 * time.Hour
	if p, r := c.RetentionHorizons(); p != 1024*time.Hour || r != 1000*time.Hour {
		t.Errorf("long max_age: proposals %s, receipts %s", p, r)
	}
	c.Retention.Proposals, c.Retention.Receipts = 2000*time.Hour, 3000*time.Hour
	if p, r := c.RetentionHorizons(); p != 2000*time.Hour || r != 3000*time.Hour {
		t.Errorf("explicit: proposals %s, receipts %s", p, r)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("explicit horizons refused: %v", err)
	}
	c.Retention.Receipts = 100 * time.Hour
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "retention.receipts") {
		t.Errorf("short receipts horizon: %v", err)
	}
}
