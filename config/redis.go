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
		{Name: "url", Type: "string", Doc: "A standalone Redis: `redis://[USER:PASSWORD@]HOST:PORT[/DB]`, `rediss://…` for TLS, or `unix:///PATH/redis.sock[?db=N]`. Exactly one of `url`, `cluster` or a `sentinel` block."},
		{Name: "cluster", Type: "list of strings", Doc: "A Redis Cluster: `HOST:PORT` seed nodes (`[\"10.0.0.1:7000\", \"10.0.0.2:7000\"]`); the rest of the cluster is discovered from them."},
		{Name: "username", Type: "string", Doc: "The ACL user (`AUTH username password`), for every form; it overrides a user written in `url`."},
		{Name: "password", Type: "string", Doc: "The password, for every form; it overrides one written in `url`. Never logged or printed: write `env(\"REDIS_PASSWORD\")` rather than the password itself."},
	},
	Blocks: []schema.Block{
		{Type: "sentinel", Occurs: "optional", Body: sentinelBody, Doc: "A Redis behind Sentinel, instead of `url` or `cluster`: flowrun asks the sentinels for the master's address whenever it connects and follows their `+switch-master` announcements."},
		{Type: "tls", Occurs: "optional", Body: tlsBody, Doc: "Its presence turns TLS on for every connection of the block, also for a `redis://` url, a cluster's nodes and the sentinels (a `rediss://` url turns it on by itself); not with `unix://`. A handshake failure at start exits 2 naming it; flowrun never falls back to plaintext."},
	},
}

var sentinelBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "master", Type: "string", Required: true, Doc: "The master's name, as the sentinels know it (`mymaster`)."},
	{Name: "addrs", Type: "list of strings", Required: true, Doc: "The sentinels, `HOST:PORT` (`[\"10.0.0.1:26379\"]`)."},
	{Name: "username", Type: "string", Doc: "The ACL user for the sentinels themselves; the redis block's `username` is for the data nodes."},
	{Name: "password", Type: "string", Doc: "The password for the sentinels themselves; never logged."},
}}

var tlsBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "ca_file", Type: "path", Default: "the system's roots", Doc: "PEM file of the certificate authorities that sign the server's certificate, relative to the HCL file."},
	{Name: "cert_file", Type: "path", Doc: "PEM client certificate, for servers that require one (`tls-auth-clients yes`); needs `key_file`."},
	{Name: "key_file", Type: "path", Doc: "PEM private key of `cert_file`; needs `cert_file`."},
	{Name: "server_name", Type: "string", Default: "the host of the address", Doc: "The name the server's certificate must carry, when it differs from the host dialled."},
	{Name: "insecure_skip_verify", Type: "bool", Default: schema.Value(false), Doc: "Accept any server certificate. For tests only: it gives up the protection TLS is for."},
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

	// The address forms, in the order written, to name the first one on a conflict.
	var forms []namedRange
	if a, ok := content.Attributes["url"]; ok {
		forms = append(forms, namedRange{"url", a.NameRange})
		s, ds := d.nonEmpty(a)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			if u, err := url.Parse(s); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
				// The URL is not echoed: it may carry a password.
				diags = append(diags, invalidValue(a, `"url" must be a redis://, rediss:// or unix:// URL.`))
			}
		}
		r.URL = s
	}
	if a, ok := content.Attributes["cluster"]; ok {
		forms = append(forms, namedRange{"cluster", a.NameRange})
		l, ds := d.strList(a)
		diags = append(diags, ds...)
		r.Cluster = l
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

	opt(content.Attributes, "username", d.str, &r.Username, &diags)
	opt(content.Attributes, "password", d.str, &r.Password, &diags)
	return r, diags
}

func (d *fileDecoder) decodeSentinelBlock(block *hcl.Block) (*Sentinel, hcl.Diagnostics) {
	s := &Sentinel{}
	content, diags := block.Body.Content(sentinelSchema)
	if !opt(content.Attributes, "master", d.nonEmpty, &s.Master, &diags) {
		diags = append(diags, missingArg(block, "master", "in a sentinel block"))
	}
	if !opt(content.Attributes, "addrs", d.strList, &s.Addrs, &diags) {
		diags = append(diags, missingArg(block, "addrs", "in a sentinel block"))
	}
	opt(content.Attributes, "username", d.str, &s.Username, &diags)
	opt(content.Attributes, "password", d.str, &s.Password, &diags)
	return s, diags
}

func (d *fileDecoder) decodeTLSBlock(block *hcl.Block) (*TLS, hcl.Diagnostics) {
	t := &TLS{}
	content, diags := block.Body.Content(tlsSchema)
	path := func(name string, dst *string) {
		if a, ok := content.Attributes[name]; ok {
			v, ds := d.nonEmpty(a)
			diags = append(diags, ds...)
			if !ds.HasErrors() {
				*dst = resolvePath(d.dir, v)
			}
		}
	}
	path("ca_file", &t.CAFile)
	path("cert_file", &t.CertFile)
	path("key_file", &t.KeyFile)
	opt(content.Attributes, "server_name", d.str, &t.ServerName, &diags)
	opt(content.Attributes, "insecure_skip_verify", d.boolean, &t.InsecureSkipVerify, &diags)
	_, hasCert := content.Attributes["cert_file"]
	_, hasKey := content.Attributes["key_file"]
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
