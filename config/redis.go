package config

import (
	"fmt"
	"net/url"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/schema"
)

// redisBody is `redis "NAME" {}`, documented; redisSchema decodes it.
var redisBody = &schema.Body{
	Attrs: []schema.Attr{
		schema.String("url").NonEmpty().Describe("A standalone Redis: `redis://[USER:PASSWORD@]HOST:PORT[/DB]`, `rediss://…` for TLS, or `unix:///PATH/redis.sock[?db=N]`. Exactly one of `url`, `cluster` or a `sentinel` block."),
		schema.Strings("cluster").Describe("A Redis Cluster: `HOST:PORT` seed nodes (`[\"10.0.0.1:7000\", \"10.0.0.2:7000\"]`); the rest of the cluster is discovered from them."),
		schema.String("username").Describe("The ACL user (`AUTH username password`), for every form; it overrides a user written in `url`."),
		schema.String("password").Describe("The password, for every form; it overrides one written in `url`. Never logged or printed: write `env(\"REDIS_PASSWORD\")` rather than the password itself."),
	},
	Blocks: []schema.Block{
		{Type: "sentinel", Occurs: "optional", Body: sentinelBody, Doc: "A Redis behind Sentinel, instead of `url` or `cluster`: flowrun asks the sentinels for the master's address whenever it connects and follows their `+switch-master` announcements."},
		{Type: "tls", Occurs: "optional", Body: tlsBody, Doc: "Its presence turns TLS on for every connection of the block, also for a `redis://` url, a cluster's nodes and the sentinels (a `rediss://` url turns it on by itself); not with `unix://`. A handshake failure at start exits 2 naming it; flowrun never falls back to plaintext."},
	},
}

var sentinelBody = &schema.Body{Attrs: []schema.Attr{
	schema.String("master").NonEmpty().Require().Describe("The master's name, as the sentinels know it (`mymaster`)."),
	schema.Strings("addrs").Require().Describe("The sentinels, `HOST:PORT` (`[\"10.0.0.1:26379\"]`)."),
	schema.String("username").Describe("The ACL user for the sentinels themselves; the redis block's `username` is for the data nodes."),
	schema.String("password").Describe("The password for the sentinels themselves; never logged."),
}}

var tlsBody = &schema.Body{Attrs: []schema.Attr{
	schema.Path("ca_file").DefaultDoc("the system's roots").Describe("PEM file of the certificate authorities that sign the server's certificate, relative to the HCL file."),
	schema.Path("cert_file").Describe("PEM client certificate, for servers that require one (`tls-auth-clients yes`); needs `key_file`."),
	schema.Path("key_file").Describe("PEM private key of `cert_file`; needs `cert_file`."),
	schema.String("server_name").DefaultDoc("the host of the address").Describe("The name the server's certificate must carry, when it differs from the host dialled."),
	schema.Bool("insecure_skip_verify").WithDefault(false).Describe("Accept any server certificate. For tests only: it gives up the protection TLS is for."),
}}

var (
	redisSchema    = redisBody.HCL()
	sentinelSchema = sentinelBody.HCL()
	tlsSchema      = tlsBody.HCL()
)

// decodeRedisBlock decodes `redis "NAME" {}`: exactly one of url, cluster or sentinel.
func (d *fileDecoder) decodeRedisBlock(block *hcl.Block) (*Redis, hcl.Diagnostics) {
	r := &Redis{Name: block.Labels[0], DeclRange: block.DefRange}
	content, diags := block.Body.Content(redisSchema)
	v := d.values(content.Attributes, redisBody.Attrs, &diags)

	// The address forms, in the order written, to name the first one on a conflict.
	var forms []namedRange
	if a := v.Attr("url"); a != nil {
		forms = append(forms, namedRange{"url", a.NameRange})
		r.URL = v.String("url")
		if v.OK("url") {
			if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
				// The URL is not echoed: it may carry a password.
				diags = append(diags, invalidValue(a, `"url" must be a redis://, rediss:// or unix:// URL.`))
			}
		}
	}
	if a := v.Attr("cluster"); a != nil {
		forms = append(forms, namedRange{"cluster", a.NameRange})
		r.Cluster = v.Strings("cluster")
	}
	for _, b := range content.Blocks {
		switch b.Type {
		case "sentinel":
			forms = append(forms, namedRange{"sentinel", b.DefRange})
			if r.Sentinel != nil {
				diags = append(diags, duplicateInner(b, "sentinel"))
				continue
			}
			s, ds := d.decodeSentinelBlock(b)
			diags = append(diags, ds...)
			r.Sentinel = s
		case "tls":
			if r.TLS != nil {
				diags = append(diags, duplicateInner(b, "tls"))
				continue
			}
			t, ds := d.decodeTLSBlock(b)
			diags = append(diags, ds...)
			r.TLS = t
		}
	}
	switch {
	case len(forms) == 0:
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing required argument",
			Detail:   `A redis block needs exactly one of "url", "cluster" or a "sentinel" block.`,
			Subject:  block.DefRange.Ptr(),
		})
	case len(forms) > 1:
		// Attributes come before blocks in forms; order by position to blame the later one.
		first, second := forms[0], forms[1]
		if second.rng.Start.Byte < first.rng.Start.Byte {
			first, second = second, first
		}
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Conflicting arguments",
			Detail:   fmt.Sprintf("A redis block takes exactly one of \"url\", \"cluster\" or \"sentinel\"; %q is already set.", first.name),
			Subject:  second.rng.Ptr(),
		})
	}

	r.Username, r.Password = v.String("username"), v.String("password")
	return r, diags
}

func (d *fileDecoder) decodeSentinelBlock(block *hcl.Block) (*Sentinel, hcl.Diagnostics) {
	s := &Sentinel{}
	content, diags := block.Body.Content(sentinelSchema)
	v := d.values(content.Attributes, sentinelBody.Attrs, &diags)
	s.Master = v.String("master")
	if !v.Written("master") {
		diags = append(diags, missingArg(block, "master", "in a sentinel block"))
	}
	s.Addrs = v.Strings("addrs")
	if !v.Written("addrs") {
		diags = append(diags, missingArg(block, "addrs", "in a sentinel block"))
	}
	s.Username, s.Password = v.String("username"), v.String("password")
	return s, diags
}

func (d *fileDecoder) decodeTLSBlock(block *hcl.Block) (*TLS, hcl.Diagnostics) {
	content, diags := block.Body.Content(tlsSchema)
	v := d.values(content.Attributes, tlsBody.Attrs, &diags)
	t := &TLS{
		CAFile:             v.String("ca_file"),
		CertFile:           v.String("cert_file"),
		KeyFile:            v.String("key_file"),
		ServerName:         v.String("server_name"),
		InsecureSkipVerify: v.Bool("insecure_skip_verify"),
	}
	hasCert, hasKey := v.Written("cert_file"), v.Written("key_file")
	if hasCert && !hasKey {
		diags = append(diags, missingArg(block, "key_file", "in a tls block with a cert_file"))
	}
	if hasKey && !hasCert {
		diags = append(diags, missingArg(block, "cert_file", "in a tls block with a key_file"))
	}
	return t, diags
}

func duplicateInner(b *hcl.Block, kind string) *hcl.Diagnostic {
	return &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  fmt.Sprintf("Duplicate %s block", kind),
		Detail:   fmt.Sprintf("Only one %s block is allowed here.", kind),
		Subject:  b.DefRange.Ptr(),
	}
}

// namedRange is an attribute or block name with its range.
type namedRange struct {
	name string
	rng  hcl.Range
}
