package mcp

import (
	"crypto/subtle"
	"net/http"
	"net/url"
	"slices"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTPOptions guard the Streamable HTTP transport.
type HTTPOptions struct {
	// Token is required as "Authorization: Bearer <token>" on every
	// request, on every address: a loopback address is reachable by every
	// local program, and the token is what makes a client the user's.
	// Without a token (and without Open) every request is refused.
	Token string
	// Open serves without a token: `processor mcp --dev` on a loopback
	// address only, beside a `run --dev` processor that admits unsigned
	// proposals and grants from any local program anyway.
	Open bool
	// AllowedOrigins are the browser origins ("https://app.example") that
	// may call the server besides its own; a request with any other Origin
	// header is refused (403), so that a web page the user visits cannot
	// drive the agent's tools.
	AllowedOrigins []string
}

// MaxRequestBytes bounds one HTTP request body.
const MaxRequestBytes = 1 << 20

// HTTPHandler serves the server over MCP Streamable HTTP.
func (s *Server) HTTPHandler(o HTTPOptions) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.sdk },
		&sdk.StreamableHTTPOptions{Logger: s.log, MaxRequestBodyBytes: MaxRequestBytes})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !originAllowed(r, o.AllowedOrigins) {
			http.Error(w, "origin not allowed", http.StatusForbidden)
			return
		}
		if !o.Open {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if o.Token == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(o.Token)) != 1 {
				s.log.Debug("mcp: http request without the token refused", "remote", r.RemoteAddr)
				w.Header().Set("WWW-Authenticate", `Bearer realm="portcullis-mcp"`)
				http.Error(w, "unauthorized: send Authorization: Bearer <the token of processor mcp's token file>", http.StatusUnauthorized)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// originAllowed: no Origin header (not a browser), the server's own
// origin (same host), or one of the allowed origins.
func originAllowed(r *http.Request, allowed []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if slices.Contains(allowed, origin) {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}
