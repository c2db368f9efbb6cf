package e2e

import (
	"fmt"
	"strings"
)

// purge runs flowrun dlq purge --yes as flowrun-admin, granted exactly the lines of docs/acl.md
// "every connection" and label, and checks it deleted want letters with ACL LOG empty.
func (e *aclEnv) purge(cfg, label string, want int) {
	e.t.Helper()
	e.grant(aclAdmin, []string{label})
	r := flowrun(e.t, "", "dlq", "purge", "jobs", "--yes", cfg)
	if r.code != 0 {
		e.t.Fatalf("flowrun dlq purge as %s exited %d:\n%s%s", aclAdmin, r.code, r.stdout, r.stderr)
	}
	if prefix := fmt.Sprintf("deleted %d dead letters from jobs.dlq", want); !strings.HasPrefix(r.stdout, prefix) {
		e.t.Errorf("flowrun dlq purge printed %q, want %q…", r.stdout, prefix)
	}
	e.checkClean(r.stderr)
}
