package redisrun

import "strings"

// keys names one workflow's keys, all under flowrun:{<workflow>}: (one Cluster slot).
type keys struct{ prefix string }

func newKeys(workflow string) keys { return keys{prefix: "flowrun:{" + workflow + "}:"} }

func (k keys) run(id string) string  { return k.prefix + "run:" + id }
func (k keys) out(id string) string  { return k.prefix + "out:" + id }
func (k keys) hist(id string) string { return k.prefix + "hist:" + id }
func (k keys) runs() string          { return k.prefix + "runs" }
func (k keys) active() string        { return k.prefix + "active" }
func (k keys) delayed() string       { return k.prefix + "delayed" }
func (k keys) timeouts() string      { return k.prefix + "timeouts" }
func (k keys) dead() string          { return k.prefix + "dead" }
func (k keys) step(name string) string {
	return k.prefix + "s:" + name
}

// Prefix is the prefix of every key of workflow: flowrun:{<workflow>}:.
func Prefix(workflow string) string { return newKeys(workflow).prefix }

// StepStream is the stream of a step's messages (group: the workflow's name).
func StepStream(workflow, step string) string { return newKeys(workflow).step(step) }

// DeadLetterKey is a workflow's default dead letter (SPEC §16): flowrun:{<workflow>}:dead.
func DeadLetterKey(workflow string) string { return newKeys(workflow).dead() }

// DelayedKey is the sorted set of a workflow's step messages entering later.
func DelayedKey(workflow string) string { return newKeys(workflow).delayed() }

// TimeoutsKey is the sorted set of a workflow's step deadlines (member "RUN\nVISIT").
func TimeoutsKey(workflow string) string { return newKeys(workflow).timeouts() }

// timerMember is a timeout's member: the run and the visit whose deadline it is.
func timerMember(run string, visit int) string { return run + "\n" + itoa(visit) }

func parseTimerMember(m string) (run string, visit int, ok bool) {
	i := strings.LastIndexByte(m, '\n')
	if i < 0 {
		return "", 0, false
	}
	v, err := atoi(m[i+1:])
	if err != nil {
		return "", 0, false
	}
	return m[:i], v, true
}
