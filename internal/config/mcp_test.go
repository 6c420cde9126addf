package config_test

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/internal/config"
)

func TestExampleMCP(t *testing.T) {
	c, err := config.Load("../../config.example.hcl")
	if err != nil {
		t.Fatal(err)
	}
	m := c.MCP
	if m == nil || m.Host != "frontdesk" || len(m.Tools) != 1 || m.Tools[0].Approval != config.MCPApproveUser || len(m.Tools[0].Candidates) != 2 ||
		!strings.Contains(m.Tools[0].PayloadSchema, `"quantity"`) || m.Wait != config.DefaultMCPWait {
		t.Errorf("mcp = %+v", m)
	}
}

func TestDevMCPFitsDev(t *testing.T) {
	c := config.Dev(t.TempDir())
	c.MCP = config.DevMCP()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

const mcpBase = `
host "agents" {
  public_key = "UC4NNP2HJXGCFDPHCNA3GXL2ZAGKEXMMYXZLZ5GIRNOQUYGNFGIT3W7A"
  tenants    = ["tenant:a"]
}
tenant "tenant:a" {
  security_domains = ["security-domain:a"]
}
provider "demo" {
  adapter = "fake"
}
`

func mcpBlock(tool string) string {
	return mcpBase + `
mcp {
  host                = "agents"
  tenant_ref          = "tenant:a"
  security_domain_ref = "security-domain:a"
  actor_ref           = "actor:a"
  tool "t" {
    description    = "d"
    provider       = "demo"
    capability     = "c"
    operation      = "o"
    environment    = "test"
    account_ref    = "acct:a"
    payload_schema = "{\"type\": \"object\"}"
    summary        = "S"
` + tool + `
  }
}
`
}

// Every problem of an mcp block is reported at its file:line.
func TestMCPErrorsHaveLines(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"ok", mcpBlock(`referent = "svc:x"`), ""},
		{"no grounding", mcpBlock(``), "mcp.hcl:18,3-11: Invalid tool; ground the target in exactly one way"},
		{"two groundings", mcpBlock("referent = \"svc:x\"\ncandidate_source = \"cat\""), "ground the target in exactly one way"},
		{"bad approval", mcpBlock("referent = \"svc:x\"\napproval = \"model\""), `mcp.hcl:28,12-19: Invalid value for approval`},
		{"bad schema", strings.Replace(mcpBlock(`referent = "svc:x"`), `{\"type\": \"object\"}`, `{\"type\": \"array\"}`, 1), "mcp.hcl:25,22-45: Invalid value for payload_schema"},
		{"not json", strings.Replace(mcpBlock(`referent = "svc:x"`), `{\"type\": \"object\"}`, `{`, 1), "payload_schema; not JSON"},
		{"unknown provider", strings.Replace(mcpBlock(`referent = "svc:x"`), `provider       = "demo"`, `provider       = "nope"`, 1), `mcp.hcl:20,22-28: Invalid value for provider; no provider block "nope"`},
		{"unknown host", strings.Replace(mcpBlock(`referent = "svc:x"`), `host                = "agents"`, `host                = "other"`, 1), `Invalid value for host; no host block "other"`},
		{"foreign tenant", strings.Replace(mcpBlock(`referent = "svc:x"`), `tenant_ref          = "tenant:a"`, `tenant_ref          = "tenant:b"`, 1), `Invalid value for tenant_ref; host "agents" may not speak for this tenant`},
		{"foreign domain", strings.Replace(mcpBlock(`referent = "svc:x"`), `security_domain_ref = "security-domain:a"`, `security_domain_ref = "security-domain:b"`, 1), `Invalid value for security_domain_ref`},
		{"duplicate summaries", mcpBlock("candidate \"a\" {\nresource = \"x\"\nsummary = \"same\"\n}\ncandidate \"b\" {\nresource = \"x\"\nsummary = \"same\"\n}"), "mcp.hcl:33,11-17: Invalid value for summary"},
		{"unknown key", mcpBlock("referent = \"svc:x\"\ncolour = \"red\""), `Unsupported argument; An argument named "colour" is not expected here`},
		{"status tool name", strings.Replace(mcpBlock(`referent = "svc:x"`), `tool "t"`, `tool "portcullis_status"`, 1), "Invalid tool"},
	}
	for _, c := range cases {
		_, err := config.Parse([]byte(c.src), "mcp.hcl")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
