package config

import (
	"fmt"
	"net/url"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/flowrun/flowrun/schema"
)

// Telemetry is the top-level `telemetry {}` block (SPEC §14): where OTLP/HTTP traces go.
type Telemetry struct {
	// OTLPEndpoint is the collector's base URL (traces go to its /v1/traces), or "" to take
	// the standard OTEL_EXPORTER_OTLP_* variables.
	OTLPEndpoint string
	SampleRatio  float64 // root spans sampled; default 1
	DeclRange    hcl.Range
}

// telemetryBody is `telemetry {}`, documented; telemetrySchema decodes it.
var telemetryBody = &schema.Body{Attrs: []schema.Attr{
	{Name: "otlp_endpoint", Type: "string", Default: "the `OTEL_EXPORTER_OTLP_*` variables",
		Doc: "The `http://` or `https://` base URL of an OTLP/HTTP collector (`\"http://127.0.0.1:4318\"`); `/v1/traces` is appended to its path, as for `OTEL_EXPORTER_OTLP_ENDPOINT`. The other standard variables (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_CERTIFICATE`) are honoured."},
	{Name: "sample_ratio", Type: "number", Default: schema.Value(1),
		Doc: "The share of root spans (messages that arrive without a `traceparent`) that are sampled, 0 to 1; a message that carries one follows its sampled flag."},
}}

var telemetrySchema = telemetryBody.HCL()

// decodeTelemetryBlock decodes `telemetry {}`.
func (d *fileDecoder) decodeTelemetryBlock(block *hcl.Block) (*Telemetry, hcl.Diagnostics) {
	t := &Telemetry{SampleRatio: 1, DeclRange: block.DefRange}
	content, diags := block.Body.Content(telemetrySchema)
	if a, ok := content.Attributes["otlp_endpoint"]; ok {
		s, ds := d.nonEmpty(a)
		diags = append(diags, ds...)
		if !ds.HasErrors() {
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				diags = append(diags, invalidValue(a, `"otlp_endpoint" must be an http:// or https:// URL, such as "http://127.0.0.1:4318".`))
			}
		}
		t.OTLPEndpoint = s
	}
	if a, ok := content.Attributes["sample_ratio"]; ok {
		v, ds := d.value(a, cty.Number, "a number")
		diags = append(diags, ds...)
		if !ds.HasErrors() && v.IsKnown() && !v.IsNull() {
			f, _ := v.AsBigFloat().Float64()
			if f < 0 || f > 1 {
				diags = append(diags, invalidValue(a, fmt.Sprintf(`"sample_ratio" must be between 0 and 1; got %g.`, f)))
			} else {
				t.SampleRatio = f
			}
		}
	}
	return t, diags
}
