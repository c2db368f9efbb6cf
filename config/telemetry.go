package config

import (
	"fmt"
	"net/url"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Telemetry is the top-level `telemetry {}` block (SPEC §14): where OTLP/HTTP traces go.
type Telemetry struct {
	// OTLPEndpoint is the collector's base URL (traces go to its /v1/traces), or "" to take
	// the standard OTEL_EXPORTER_OTLP_* variables.
	OTLPEndpoint string
	SampleRatio  float64 // root spans sampled; default 1
	DeclRange    hcl.Range
}

var telemetrySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "otlp_endpoint"}, {Name: "sample_ratio"}},
}

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
