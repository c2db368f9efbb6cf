package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/flowrun/flowrun/engine"
	"github.com/flowrun/flowrun/internal/handlers"
	"github.com/flowrun/flowrun/rules"
	"github.com/flowrun/flowrun/transports"
)

// Defaults (SPEC §2, §5): the engine's, which the pipeline block's schema declares.
const (
	DefaultShutdownTimeout = engine.DefaultShutdownTimeout
	DefaultMaxHeld         = engine.DefaultMaxHeld // runtime delayed copies held at once (SPEC §5)
)

// Options tune a load.
type Options struct {
	// Hostname is the default consumer name of stream and list sources; "" means os.Hostname().
	Hostname string
	// Consumer, when set, overrides every source's consumer name, written or defaulted
	// (`flowrun run --consumer`); a list's default processing key follows it.
	Consumer string
}

// Config is a loaded, validated configuration.
type Config struct {
	Redis     []*Redis
	Pipelines []*Pipeline
	Workflows []*Workflow
	Tests     []*Test
	Telemetry *Telemetry // nil: no telemetry block

	files map[string]*hcl.File
}

// Files returns the sources of the files read, keyed by file name, for snippets.
func (c *Config) Files() map[string]*hcl.File {
	if c == nil {
		return nil
	}
	return c.files
}

// Pipeline returns the pipeline with that name, or nil.
func (c *Config) Pipeline(name string) *Pipeline {
	for _, p := range c.Pipelines {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// RedisBlock returns the redis block with that name, or nil.
func (c *Config) RedisBlock(name string) *Redis {
	for _, r := range c.Redis {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Redis is a `redis "NAME"` block: exactly one of URL, Cluster or Sentinel is set.
type Redis struct {
	Name     string
	URL      string   // redis://, rediss:// or unix://
	Cluster  []string // host:port seeds of a Redis Cluster
	Sentinel *Sentinel
	Username string
	Password string
	TLS      *TLS
	// DeclRange is the block's header (`redis "main"`).
	DeclRange hcl.Range

	fingerprint string // see Fingerprint
}

// Sentinel is a redis block's `sentinel {}`.
type Sentinel struct {
	Master   string
	Addrs    []string
	Username string
	Password string
}

// TLS is a redis block's `tls {}`. File paths are absolute, resolved relative to the HCL file.
type TLS struct {
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string
	InsecureSkipVerify bool
}

// Pipeline is a `pipeline "NAME"` block, with every default applied.
type Pipeline struct {
	Name            string
	File            string // the HCL file that declared it
	Source          *Source
	Concurrency     int           // default runtime.NumCPU()
	MaxAttempts     int           // 0: no cap
	DeadLetter      string        // "": none
	ShutdownTimeout time.Duration // default 30s
	MaxHeld         int           // runtime delayed copies held at once; default 10000
	Rules           *rules.RuleSet
	Handler         *Handler
	Flow            *Flow // concurrency_key, throttle, dedupe (SPEC §13); nil: none
	// CanRetry is true when a rule's outcome or the otherwise expression may produce retry or
	// retry_after (judged from the names the expression uses), and always for a Go handler or
	// a pipeline with flow control (a key expression that fails is a retry).
	CanRetry  bool
	DeclRange hcl.Range

	emitRefs    []emitRef   // emits whose redis block is resolved in the merge pass
	fingerprint string      // see Fingerprint
	redisBlocks []string    // see RedisBlocks
	bareRetries []hcl.Range // outcome expressions that name the bare retry (for lint)
}

// Source is a pipeline's `source "KIND"` block. Its kind, registered with package transports,
// decodes the body (and the pipeline attributes only it takes, such as delayed_retry) into
// Config, with every default applied; the pipeline attributes of SPEC §2 that a source takes
// live there.
type Source struct {
	Kind   string            // the block's label, a registered kind
	Redis  string            // the redis block's name, resolved at load time; "" for a source that reads none (transports.RedisBlockReader)
	Config transports.Config // what the kind decoded

	DeclRange hcl.Range

	kind       transports.Kind
	redisRange hcl.Range // the redis attribute's value, for an unknown name
}

// readsRedis reports whether the source's block takes "redis": its kind's Config is a
// transports.RedisBlockReader that reads one. After a load without errors, Redis is set exactly
// when it does, but for a transports.RedisOptional source where no redis block is declared.
func (s *Source) readsRedis() bool { return s.kind.ReadsRedisBlock() }

// NaturalKey is the key messages of this source usually carry, as its kind says
// (transports.Config.NaturalKey); "" when there is none.
func (s *Source) NaturalKey() string {
	if s.Config == nil {
		return ""
	}
	return s.Config.NaturalKey()
}

// Handler is a pipeline's `handler "NAME"` block: a compiled Go handler and its decoded config.
type Handler struct {
	Name      string
	Plugin    handlers.Plugin
	Config    handlers.Config // what Plugin.Decode returned; nil when it found errors
	DeclRange hcl.Range
}

// Test is a `test "NAME"` block (SPEC §9).
type Test struct {
	Name     string
	Pipeline string
	// Workflow is set instead of Pipeline for a test of a workflow; Run holds what it has.
	Workflow string
	Run      *WorkflowTest
	Message  TestMessage
	// Mock stands in for the server or the process of the pipeline's handler (`mock {}`), made
	// by that handler; nil when the test has none.
	Mock   handlers.Mock
	Expect TestExpect
	// ExpectRange is the expect block's header, where a failure is reported.
	ExpectRange hcl.Range
	DeclRange   hcl.Range

	keySet        bool             // message key written; else it defaults to the source's NaturalKey
	pipelineRange hcl.Range        // the pipeline attribute's value
	mock          *hcl.Block       // decoded by the pipeline's handler in the merge pass
	mockCtx       *hcl.EvalContext // the functions of the file that holds the mock
	wf            *workflowTestSrc // a workflow test's blocks, resolved in the merge pass
}

// TestMessage is a test's `message {}`. Key defaults to the source's NaturalKey.
type TestMessage struct {
	Key     string
	Payload []byte // a string as its bytes, any other value as its JSON text
	Headers map[string]string
	Attempt int // default 1
}

// TestExpect is a test's `expect {}`. Matches compares an outcome with it.
type TestExpect struct {
	// Outcome is the outcome as written: "drop", "retry_after('5s')", "retry_after".
	Outcome string
	// Want is Outcome parsed. A retry_after written without a duration has AnyDelay set and
	// matches any delay from MinDelay (min_delay, default 0) to MaxDelay (max_delay, when
	// HasMaxDelay). A dead_letter matches a reason that contains Reason (`reason`).
	Want        engine.Outcome
	AnyDelay    bool
	MinDelay    time.Duration
	MaxDelay    time.Duration
	HasMaxDelay bool
	Reason      string
	// Emits are the expected emits, in order; HasEmits says whether `emits` was written at all
	// (`emits = []` asserts that nothing is emitted).
	Emits    []TestEmit
	HasEmits bool
	// Keys are the expected flow-control keys (`key`, `concurrency_key`, `throttle_key`,
	// `dedupe_key`); with keys and no outcome, a test checks the keys only.
	Keys []ExpectKey

	outcomeRange hcl.Range // the outcome attribute's value
}

// TestEmit is one expected emit: `{ kind = "stream", key = "done", payload = "..." }`.
type TestEmit struct {
	Kind string
	Key  string
	// Payload is a string as written, or any other value as its JSON text (compact, object keys
	// sorted); the runner should compare JSON payloads as JSON.
	Payload    string
	HasPayload bool
}

type emitRef struct {
	rule, emit int    // indexes into Rules.Rules and their Emits
	name       string // the redis attribute as written; "" when absent
	nameRange  hcl.Range
	declRange  hcl.Range
}
