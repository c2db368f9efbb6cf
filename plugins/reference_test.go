package plugins

import (
	"reflect"
	"strings"
	"testing"

	"github.com/flowrun/flowrun/schema"
)

func TestCheckBodyCatchesDrift(t *testing.T) {
	if err := checkBody(httpBody, reflect.TypeFor[httpConfig]()); err != nil {
		t.Errorf("http: %v", err)
	}
	if err := checkBody(execBody, reflect.TypeFor[execConfig]()); err != nil {
		t.Errorf("exec: %v", err)
	}
	short := &schema.Body{Attrs: execBody.Attrs[:2]}
	if err := checkBody(short, reflect.TypeFor[execConfig]()); err == nil || !strings.Contains(err.Error(), "dir") {
		t.Errorf("an undocumented attribute: %v", err)
	}
	tls := &schema.Body{Attrs: httpBody.Attrs, Blocks: []schema.Block{{Type: "tls", Body: &schema.Body{}}}}
	if err := checkBody(tls, reflect.TypeFor[httpConfig]()); err == nil || !strings.Contains(err.Error(), "block tls") {
		t.Errorf("an undocumented nested attribute: %v", err)
	}
}
