package config

import (
	"fmt"
	"net/url"

	"github.com/hashicorp/hcl/v2"

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
	schema.String("otlp_endpoint").NonEmpty().DefaultDoc("the `OTEL_EXPORTER_OTLP_*` variables").Describe(
		"The `http://` or `https://` base URL of an OTLP/HTTP collector (`\"http://127.0.0.1:4318\"`); `/v1/traces` is appended to its path, as for `OTEL_EXPORTER_OTLP_ENDPOINT`. The other standard variables (`OTEL_EXPORTER_OTLP_HEADERS`, `…_TIMEOUT`, `…_CERTIFICATE`) are honoured."),
	schema.Number("sample_ratio").WithDefault(1.0).Describe(
		"The share of root spans (messages that arrive without a `traceparent`) that are sampled, 0 to 1; a message that carries one follows its sampled flag."),
}}

var telemetrySchema = telemetryBody.HCL()

// decodeTelemetryBlock decodes `telemetry {}`.
func (d *fileDecoder) decodeTelemetryBlock(block *hcl.Block) (*Telemetry, hcl.Diagnostics) {
	t := &Telemetry{DeclRange: block.DefRange}
	content, diags := block.Body.Content(telemetrySchema)
	v := d.values(content.Attributes, telemetryBody.Attrs, &diags)
	t.OTLPEndpoint = v.String("otlp_endpoint")
	if v.OK("otlp_endpoint") {
		if u, err := url.Parse(t.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			diags = append(diags, invalidValue(v.Attr("otlp_endpoint"), `"otlp_endpoint" must be an http:// or https:// URL, such as "http://127.0.0.1:4318".`))
		}
	}
	t.SampleRatio = v.Number("sample_ratio")
	if f := t.SampleRatio; v.OK("sample_ratio") && (f < 0 || f > 1) {
		diags = append(diags, invalidValue(v.Attr("sample_ratio"), fmt.Sprintf(`"sample_ratio" must be between 0 and 1; got %g.`, f)))
	}
	return t, diags
}
