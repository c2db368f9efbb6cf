package engine

// Log field names, fixed across the code base (SPEC §10).
const (
	FieldPipeline = "pipeline"
	FieldSource   = "source"
	FieldKey      = "key"
	FieldID       = "id"
	FieldAttempt  = "attempt"
	FieldOutcome  = "outcome"
)
