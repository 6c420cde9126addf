package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/internal/mcp"
)

// EnvHostNkey names the host's seed file for `processor mcp`.
const EnvHostNkey = "PORTCULLIS_HOST_NKEY"

// DefaultMCPHTTPListen is where --http serves when given no address.
const DefaultMCPHTTPListen = "127.0.0.1:8765"

const mcpAbout = `Serves an MCP server for agents (PROTOCOL.md §7) that is a host: it logs in to NATS with the host's nkey,
signs every proposal, grant and decline with it, and reads only that host's outcomes. Its tools are the
catalogue of the --config file's mcp block (--dev: a demo catalogue on run --dev's providers, sent unsigned as
host "` + config.DevMCPHost + `"). Clarifications and approvals are asked of the user by MCP elicitation; no tool approves.
By default it speaks MCP on standard input and output (a desktop agent starts it); the log goes to standard
error. --http ADDR serves Streamable HTTP at /mcp instead. Every HTTP request needs "Authorization: Bearer
<token>", on loopback too: the token is --token-file's, else one made at start in a file only you may read
(its path is printed; removed at exit). --dev serves loopback without a token. An address other than loopback
needs --tls-cert, --tls-key and --token-file. Requests from another browser origin than --allow-origin's are
refused. At start it checks that its NATS login may do what host "<mcp.host>" does, and exits at once naming
the role the key belongs to if not.
The URL is --url, else the --config file's, else $` + EnvNATSURL + `, else ` + DefaultAdminURL + `; the host's seed is --nkey, else
$` + EnvHostNkey + `.`

func cmdMCP(c *cmdline, args []string, _ io.Reader) int {
	dev := c.fs.Bool("dev", false, "the demo catalogue against processor run --dev: unsigned, no key")
	cfgPath := c.fs.String("config", "", "configuration `FILE` with an mcp block (and the NATS address)")
	nkey := c.fs.String("nkey", "", "the host's nkey seed `FILE` (processor keygen host); default $"+EnvHostNkey)
	url := c.fs.String("url", "", "`URL` of the processor's NATS server")
	httpAddr := c.fs.String("http", "", "serve Streamable HTTP on `ADDR` (e.g. "+DefaultMCPHTTPListen+") instead of stdio")
	certFile := c.fs.String("tls-cert", "", "with --http: serve HTTPS with this certificate `FILE` (PEM; with --tls-key)")
	keyFile := c.fs.String("tls-key", "", "the certificate's private key `FILE` (PEM)")
	tokenFile := c.fs.String("token-file", "", "with --http: require this `FILE`'s content as the bearer token (at least 32 characters, mode 0600; default: a new token in a new file, printed at start)")
	origins := c.fs.String("allow-origin", "", "with --http: browser `ORIGINS` (comma-separated) allowed besides the server's own")
	var level levelFlag
	level.register(c, "the least severe `LEVEL` logged (JSON on standard error): debug, info, warn or error")
	if _, code, done := c.parse(args); done {
		return code
	}
	if *dev == (*cfgPath != "") {
		return c.usageError("give --dev (the demo catalogue against run --dev) or --config FILE (an mcp block)")
	}
	if *nkey == "" && !*dev {
		*nkey = os.Getenv(EnvHostNkey)
	}
	var m *config.MCP
	var cfg *config.Config
	prefix := ""
	switch {
	case *dev:
		if *nkey != "" {
			return c.usageError("--dev sends unsigned, as host %q; a key would be checked against a host block run --dev does not have", config.DevMCPHost)
		}
		m = config.DevMCP()
	default:
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return c.fail(err)
		}
		if cfg.MCP == nil {
			return c.fail(fmt.Errorf("%s has no mcp block (see config.example.hcl)", *cfgPath))
		}
		m, prefix = cfg.MCP, cfg.Prefix
		if *nkey == "" && !cfg.Admission.AllowUnsigned {
			return c.usageError("give --nkey FILE (the seed of host %q; or $%s)", m.Host, EnvHostNkey)
		}
		if *url == "" {
			cn := &conn{config: *cfgPath}
			if err := cn.fromConfig(c.fs); err != nil {
				return c.fail(err)
			}
			*url = cn.url
		}
		if h, ok := cfg.Host(m.Host); ok && *nkey != "" {
			if err := keyIs(*nkey, h.PublicKey, m.Host, cfg, *cfgPath); err != nil {
				return c.fail(err)
			}
		}
	}
	if *url == "" {
		*url = os.Getenv(EnvNATSURL)
	}
	if *url == "" {
		*url = DefaultAdminURL
	}
	var httpOpts mcp.HTTPOptions
	var tlsCfg *tls.Config
	if *httpAddr != "" {
		if _, _, err := net.SplitHostPort(*httpAddr); err != nil {
			return c.usageError("--http %q: %v", *httpAddr, err)
		}
		switch {
		case (*certFile == "") != (*keyFile == ""):
			return c.usageError("give --tls-cert and --tls-key together")
		case !config.Loopback(*httpAddr) && (*certFile == "" || *tokenFile == ""):
			return c.usageError("--http %s is not a loopback address: it needs --tls-cert, --tls-key and --token-file", *httpAddr)
		}
		if *certFile != "" {
			cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
			if err != nil {
				return c.fail(fmt.Errorf("--tls-cert/--tls-key: %w", err))
			}
			tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		}
		switch {
		case *tokenFile != "":
			tok, err := readToken(*tokenFile)
			if err != nil {
				return c.fail(fmt.Errorf("--token-file: %w", err))
			}
			httpOpts.Token = tok
		case *dev:
			httpOpts.Open = true // loopback only (above), beside a run --dev that admits unsigned input anyway
		default:
			path, tok, remove, err := newTokenFile("mcp")
			if err != nil {
				return c.fail(err)
			}
			defer remove()
			httpOpts.Token, *tokenFile = tok, path
		}
		for _, o := range strings.Split(*origins, ",") {
			if o = strings.TrimSpace(o); o != "" {
				httpOpts.AllowedOrigins = append(httpOpts.AllowedOrigins, o)
			}
		}
	} else if *certFile != "" || *keyFile != "" || *tokenFile != "" || *origins != "" {
		return c.usageError("--tls-cert, --tls-key, --token-file and --allow-origin go with --http")
	}

	log := newLog(c.stderr, &level).With("component", "mcp")
	var seed nkeys.KeyPair
	if *nkey != "" {
		var err error
		if seed, err = client.LoadSeed(*nkey); err != nil {
			return c.fail(err)
		}
		defer seed.Wipe()
	}
	nc, err := client.Connect(*url, seed, nats.Name("portcullis-mcp"))
	if err != nil {
		return c.fail(mcpConnectError(*url, *dev, seed != nil, err))
	}
	defer nc.Close()
	host, err := client.NewHost(nc, client.HostConfig{Name: m.Host, Prefix: prefix})
	if err != nil {
		return c.fail(err)
	}
	if err := probeHost(host, nc.PublicKey(), cfg, *cfgPath, log); err != nil {
		return c.fail(err)
	}
	srv, err := mcp.New(m, host, mcp.Options{Log: log})
	if err != nil {
		return c.fail(err)
	}
	signer := "unsigned (--dev)"
	if nc.PublicKey() != "" {
		signer = "signed by " + nc.PublicKey()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *httpAddr == "" {
		log.Info("mcp: serving on stdio", "host", m.Host, "tools", len(m.Tools), "nats", redactURL(*url), "proposals", signer)
		err := srv.MCP().Run(ctx, &sdk.StdioTransport{})
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
			return c.fail(err)
		}
		return 0
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return c.fail(fmt.Errorf("mcp: %w", err))
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", srv.HTTPHandler(httpOpts))
	hs := &http.Server{Handler: mux, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	endpoint := fmt.Sprintf("%s://%s/mcp", scheme, ln.Addr())
	door := "no token (--dev, loopback)"
	if !httpOpts.Open {
		door = "the token in " + *tokenFile
	}
	log.Info("mcp: serving Streamable HTTP", "endpoint", endpoint, "host", m.Host, "tools", len(m.Tools), "nats", redactURL(*url), "proposals", signer, "requires", door)
	fmt.Fprintf(c.stdout, "Portcullis MCP server on %s — host %s, NATS %s, proposals %s. Ctrl-C stops.\n", endpoint, m.Host, redactURL(*url), signer)
	if httpOpts.Open {
		fmt.Fprintf(c.stdout, "  No token (--dev): any program on this machine may call it.\n")
	} else {
		fmt.Fprintf(c.stdout, "  Clients send \"Authorization: Bearer <token>\"; the token is in %s (readable only by you).\n", *tokenFile)
	}
	served := make(chan error, 1)
	go func() {
		if tlsCfg != nil {
			served <- hs.ServeTLS(ln, "", "")
		} else {
			served <- hs.Serve(ln)
		}
	}()
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return c.fail(err)
	}
	return 0
}

// mcpConnectError says what to pass when NATS refused the login, in the
// command's words (the client package's speak of its Go API).
func mcpConnectError(url string, dev, withKey bool, err error) error {
	var refusal error
	switch {
	case !errors.Is(err, client.ErrLoginRefused):
		return fmt.Errorf("%s: %w", redactURL(url), err)
	case dev:
		refusal = fmt.Errorf("NATS at %s requires a login, and --dev connects without one (it is for processor run --dev): "+
			"run processor mcp --config FILE --nkey FILE, FILE the configuration with an mcp block and the seed of its host (processor keygen host)", redactURL(url))
	case !withKey:
		refusal = fmt.Errorf("NATS at %s requires a login: pass --nkey FILE, the seed of the mcp block's host (or set $%s)", redactURL(url), EnvHostNkey)
	default:
		refusal = fmt.Errorf("NATS at %s refused the login of --nkey's key: is it the public_key of the mcp block's host block in the processor's configuration?", redactURL(url))
	}
	for _, cause := range []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked} {
		if errors.Is(err, cause) {
			return fmt.Errorf("%w (%w)", refusal, cause)
		}
	}
	return refusal
}

// keyIs checks that a seed file holds the key of a host block, so that a
// wrong --nkey is one clear line at start, naming whose key it is, instead
// of proposals without outcomes.
func keyIs(seedFile, publicKey, hostName string, cfg *config.Config, cfgPath string) error {
	kp, err := client.LoadSeed(seedFile)
	if err != nil {
		return err
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil {
		return err
	}
	if pub != publicKey {
		return fmt.Errorf("--nkey %s holds the key %s, %s, not host %q's public_key %s", seedFile, pub, whose(cfg, cfgPath, pub), hostName, publicKey)
	}
	return nil
}

// whose says which configured role a key belongs to, for a one-line
// refusal.
func whose(cfg *config.Config, cfgPath, pub string) string {
	if cfg == nil {
		return "which the processor's configuration (--config FILE) would name the role of"
	}
	if r := cfg.RoleOf(pub); r != "" {
		return "the key of " + r + " in " + cfgPath
	}
	return "the key of no role in " + cfgPath
}

// probeHost checks at start that the login may do what the host role
// does — read its outcomes (a direct get of an outcome that does not
// exist) — so that a key of another role is one line at once, not tool
// calls that time out. A processor not reachable yet is only logged: an
// agent may start before it.
func probeHost(host *client.Host, pub string, cfg *config.Config, cfgPath string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := host.Last(ctx, "mcp-probe-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	switch {
	case err == nil, errors.Is(err, client.ErrNoOutcome):
		return nil
	case errors.Is(err, client.ErrPublishRefused):
		who := "an anonymous login"
		if pub != "" {
			who = "the key " + pub + ", " + whose(cfg, cfgPath, pub) + ","
		}
		return fmt.Errorf("NATS refused %s what host %q may do (read its own outcomes): expected the key of host %q (its public_key), given with --nkey", who, host.Name(), host.Name())
	}
	log.Warn("mcp: the processor's outcome stream does not answer yet; tool calls will fail until it does", "error", err)
	return nil
}
