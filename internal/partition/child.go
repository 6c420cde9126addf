package partition

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// envChild names what a re-executed test binary runs instead of its
// tests (RunChild); envProxies lists a proxy child's listen=upstream
// pairs.
const (
	envChild   = "PORTCULLIS_PARTITION_CHILD"
	envProxies = "PORTCULLIS_PARTITION_PROXIES"
	childProxy = "toxiproxy"
)

// RunChild runs the part of the harness that lives in a child process when
// the test binary was re-executed for it (StartProxy), and exits; it
// returns at once otherwise. Call it first in TestMain.
func RunChild() {
	if os.Getenv(envChild) != childProxy {
		return
	}
	os.Exit(runProxy(os.Getenv(envProxies), os.Stdin, os.Stdout))
}

// runProxy is the proxy child: a Toxiproxy proxy for each
// "listen=upstream" pair, then one command per line of in ("add <toxic
// JSON>", "remove <name>"), applied to every proxy and answered "ok" or
// "error: …" on out, until in closes.
func runProxy(pairs string, in io.Reader, out io.Writer) int {
	log := zerolog.New(os.Stderr).Level(zerolog.WarnLevel)
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), log)
	var proxies []*toxiproxy.Proxy
	for i, pair := range strings.Split(pairs, ",") {
		listen, upstream, ok := strings.Cut(pair, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "proxy: bad pair %q\n", pair)
			return 2
		}
		p := toxiproxy.NewProxy(srv, fmt.Sprintf("server%d", i), listen, upstream)
		if err := p.Start(); err != nil {
			fmt.Fprintf(os.Stderr, "proxy: %s: %v\n", listen, err)
			return 1
		}
		proxies = append(proxies, p)
	}
	fmt.Fprintln(out, "ready")
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		var err error
		for _, p := range proxies {
			switch cmd {
			case "add":
				_, err = p.Toxics.AddToxicJson(strings.NewReader(arg))
			case "remove":
				err = removeBoth(p, arg)
			default:
				err = fmt.Errorf("unknown command %q", cmd)
			}
			if err != nil {
				break
			}
		}
		if err != nil {
			fmt.Fprintf(out, "error: %v\n", err)
			continue
		}
		fmt.Fprintln(out, "ok")
	}
	for _, p := range proxies {
		p.Stop()
	}
	return 0
}

// removeBoth removes the toxic name, or the pair name_upstream and
// name_downstream that Proxy.Add made of it.
func removeBoth(p *toxiproxy.Proxy, name string) error {
	removed := false
	for _, n := range []string{name, name + "_upstream", name + "_downstream"} {
		if p.Toxics.GetToxic(n) == nil {
			continue
		}
		if err := p.Toxics.RemoveToxic(context.Background(), n); err != nil {
			return err
		}
		removed = true
	}
	if !removed {
		return fmt.Errorf("no toxic %q", name)
	}
	return nil
}
