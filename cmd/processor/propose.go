package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/portcullis/portcullis/client"
	"github.com/portcullis/portcullis/internal/config"
	"github.com/portcullis/portcullis/schema"
)

const proposeAbout = `Acts as a host from the command line: reads a proposal (FILE, or standard input), gives it a fresh
proposal_id and delivery_id (--id keeps an id of your own), checks it offline as ` + "`processor check`" + ` does, signs it
with the host key of --nkey (the host block is the one with that public_key in --config), publishes it and
prints each outcome until a terminal one. On NEEDS_APPROVAL it grants (--approve, as --as, by default the
proposal's actor) or declines (--decline) — only an approval of the fingerprint it computed itself — and
otherwise waits for a grant from elsewhere. Exit 0 on a terminal outcome; 1 refused, failed or timed out.
The URL is --url, else the --config file's, else $` + EnvNATSURL + `; the seed is --nkey, else $` + EnvHostNkey + `.`

// cmdPropose publishes one signed proposal as a host and follows it.
func cmdPropose(c *cmdline, args []string, stdin io.Reader) int {
	cfgPath := c.fs.String("config", "", "configuration `FILE`: the host blocks, the prefix and the NATS address")
	nkey := c.fs.String("nkey", "", "the host's nkey seed `FILE` (processor keygen host); default $"+EnvHostNkey)
	url := c.fs.String("url", "", "`URL` of the processor's NATS server")
	id := c.fs.String("id", "", "send with this proposal `ID` (and the file's delivery_id) instead of fresh ones")
	approve := c.fs.Bool("approve", false, "grant the approval it asks for (the fingerprint this command computed)")
	decline := c.fs.Bool("decline", false, "decline the approval it asks for")
	as := c.fs.String("as", "", "who approves or declines: an `ACTOR` ref (default: the proposal's context.actor.actor_ref)")
	assurance := c.fs.String("assurance", schema.AssuranceSession, "the grant's authentication_assurance: `none`, session, biometric or managed")
	timeout := c.fs.Duration("timeout", 60*time.Second, "how long to wait for each outcome")
	files, code, done := c.parse(args)
	if done {
		return code
	}
	switch {
	case *cfgPath == "":
		return c.usageError("give --config FILE (the processor's configuration: its host blocks)")
	case *approve && *decline:
		return c.usageError("--approve and --decline exclude each other")
	case *timeout <= 0:
		return c.usageError("--timeout must be positive")
	}
	if *nkey == "" {
		*nkey = os.Getenv(EnvHostNkey)
	}
	if *nkey == "" {
		return c.usageError("give --nkey FILE (the seed of a host block's key; or $%s)", EnvHostNkey)
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return c.fail(err)
	}
	seed, err := client.LoadSeed(*nkey)
	if err != nil {
		return c.fail(fmt.Errorf("--nkey: %w", err))
	}
	defer seed.Wipe()
	pub, err := seed.PublicKey()
	if err != nil {
		return c.fail(err)
	}
	host, ok := cfg.HostForKey(pub)
	if !ok {
		return c.fail(fmt.Errorf("--nkey %s holds the key %s, which no host block of %s has as its public_key", *nkey, pub, *cfgPath))
	}
	body, name, err := readBody(files, stdin)
	if err != nil {
		return c.fail(err)
	}
	p, err := schema.DecodeProposal(body, cfg.Admission.MaxPayloadBytes)
	if err != nil {
		return c.fail(fmt.Errorf("%s: %w (processor check %s names every problem)", name, err, name))
	}
	if *id != "" {
		p.ProposalID = *id
	} else {
		fresh := randomID()
		p.ProposalID, p.Context.Delivery.DeliveryID = "prop-"+fresh, "delivery:"+fresh
	}
	// The checks admission and grounding would make, offline: a proposal
	// they refuse is not sent, and the fingerprint this host approves is
	// its own computation, never the processor's word.
	o, code, ok := c.judgeOptions(c.fs, "", *cfgPath, false, host.Name)
	if !ok {
		return code
	}
	sent := schema.MustMarshal(*p)
	j := judge(sent, o)
	switch {
	case j.Err != nil:
		return c.fail(j.Err)
	case j.Incident != nil:
		explain(c.stderr, "processor propose: ", sent, j.Problems)
		return c.fail(fmt.Errorf("not sent: the processor would refuse it (%s)", j.Incident.Code))
	case (*approve || *decline) && j.SourceWithoutReferent:
		return c.usageError("it names a candidate_source: this command cannot compute the fingerprint to approve; approve from your host")
	}
	if *as == "" {
		*as = p.Context.Actor.ActorRef
	}
	cn := &conn{config: *cfgPath, url: *url}
	if err := cn.fromConfig(c.fs); err != nil {
		return c.fail(err)
	}
	if cn.url == "" {
		cn.url = os.Getenv(EnvNATSURL)
	}
	nc, err := client.Connect(cn.url, seed, nats.Name("portcullis-propose"))
	if err != nil {
		return c.fail(connectError(cn.url, err))
	}
	defer nc.Close()
	h, err := client.NewHost(nc, client.HostConfig{Name: host.Name, Prefix: cfg.Prefix})
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	tr, err := h.Propose(ctx, p)
	if err != nil {
		return c.fail(err)
	}
	defer tr.Stop()
	fmt.Fprintf(c.stdout, "proposed %s/%s (referent %s, fingerprint %s), signed by %s\n", host.Name, p.ProposalID, j.Referent, j.Result.Fingerprint, pub)
	answered := false
	for {
		wctx, cancel := context.WithTimeout(ctx, *timeout)
		out, err := tr.Next(wctx)
		cancel()
		if err != nil {
			return c.fail(fmt.Errorf("%s/%s: %w", host.Name, p.ProposalID, err))
		}
		fmt.Fprintf(c.stdout, "outcome: %s\n", describe(out))
		if out.Terminal {
			return 0
		}
		if out.Kind != schema.KindNeedsApproval || answered {
			continue
		}
		switch {
		case *approve:
			_, err = h.Grant(ctx, out, client.GrantOptions{AuthorizedBy: *as, Assurance: *assurance, ExpectFingerprint: j.Result.Fingerprint})
			fmt.Fprintf(c.stdout, "granted as %s (%s)\n", *as, *assurance)
		case *decline:
			_, err = h.Decline(ctx, out, *as)
			fmt.Fprintf(c.stdout, "declined as %s\n", *as)
		default:
			fmt.Fprintf(c.stdout, "waiting for a grant (this command grants with --approve)\n")
		}
		if err != nil {
			return c.fail(err)
		}
		answered = true
	}
}

// describe is an outcome in one line, for people.
func describe(o schema.Outcome) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s", o.Kind, o.EffectTruth)
	if o.Terminal {
		b.WriteString(", terminal")
	}
	b.WriteString(")")
	for _, i := range o.Incidents {
		fmt.Fprintf(&b, " %s/%s", i.Phase, i.Code)
	}
	if r := o.Receipt; r != nil {
		fmt.Fprintf(&b, "; receipt %s status=%s", r.ReceiptID, r.Status)
		if r.ProviderActionID != "" {
			fmt.Fprintf(&b, " provider_action_id=%s", r.ProviderActionID)
		}
	}
	if o.RecordedEarlier {
		b.WriteString("; recorded earlier: an earlier proposal of the same intent did it")
	}
	if a := o.Approval; a != nil {
		fmt.Fprintf(&b, "; approval of %s: %q", a.Fingerprint, a.Summary)
	}
	return b.String()
}

func randomID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// connectError says what to pass when NATS refused the host's login, in
// the command's words.
func connectError(url string, err error) error {
	if !errors.Is(err, client.ErrLoginRefused) {
		return fmt.Errorf("%s: %w", redactURL(url), err)
	}
	return fmt.Errorf("NATS at %s refused the login of --nkey's key: is it the public_key of a host block of the running processor's configuration (and is that processor's configuration --config)?", redactURL(url))
}
