package rules

import (
	"reflect"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
)

// expr-lang calls a method of a value through reflection: `now().UnixMicro()` fetches a method
// value and boxes it, five allocations in all, a third of the time of a rule that stamps a
// record with it. The patcher turns a call of one of these time.Time methods, without
// arguments, into a call of a function of the same result type, which expr calls directly.
// Rules behave the same; only the way the call is made changes. Other methods (and these on a
// value whose type the checker does not know) keep the reflective call.
var timeMethods = map[string]struct {
	fn  func(time.Time) any
	typ any // the function's type, for the checker: new(func(time.Time) R)
}{
	"Unix":       {func(t time.Time) any { return t.Unix() }, new(func(time.Time) int64)},
	"UnixMilli":  {func(t time.Time) any { return t.UnixMilli() }, new(func(time.Time) int64)},
	"UnixMicro":  {func(t time.Time) any { return t.UnixMicro() }, new(func(time.Time) int64)},
	"UnixNano":   {func(t time.Time) any { return t.UnixNano() }, new(func(time.Time) int64)},
	"Year":       {func(t time.Time) any { return t.Year() }, new(func(time.Time) int)},
	"Month":      {func(t time.Time) any { return t.Month() }, new(func(time.Time) time.Month)},
	"Day":        {func(t time.Time) any { return t.Day() }, new(func(time.Time) int)},
	"Hour":       {func(t time.Time) any { return t.Hour() }, new(func(time.Time) int)},
	"Minute":     {func(t time.Time) any { return t.Minute() }, new(func(time.Time) int)},
	"Second":     {func(t time.Time) any { return t.Second() }, new(func(time.Time) int)},
	"Nanosecond": {func(t time.Time) any { return t.Nanosecond() }, new(func(time.Time) int)},
	"YearDay":    {func(t time.Time) any { return t.YearDay() }, new(func(time.Time) int)},
	"Weekday":    {func(t time.Time) any { return t.Weekday() }, new(func(time.Time) time.Weekday)},
	"IsZero":     {func(t time.Time) any { return t.IsZero() }, new(func(time.Time) bool)},
	"UTC":        {func(t time.Time) any { return t.UTC() }, new(func(time.Time) time.Time)},
	"Local":      {func(t time.Time) any { return t.Local() }, new(func(time.Time) time.Time)},
	"String":     {func(t time.Time) any { return t.String() }, new(func(time.Time) string)},
}

// timeFuncPrefix names the functions: `$` keeps them apart from anything a user can define.
const timeFuncPrefix = "$time."

var timeType = reflect.TypeOf(time.Time{})

// timeMethodOpts register the functions the patcher calls instead of the methods; made once,
// used by every compile.
var timeMethodOpts = timeMethodOptions()

func timeMethodOptions() []expr.Option {
	opts := make([]expr.Option, 0, len(timeMethods))
	for name, m := range timeMethods {
		fn := m.fn
		opts = append(opts, expr.Function(timeFuncPrefix+name, func(args ...any) (any, error) {
			return fn(args[0].(time.Time)), nil
		}, m.typ))
	}
	return opts
}

// patchTimeMethod turns `t.M()` into `$time.M(t)` where t is a time.Time and M one of
// timeMethods; it reports whether it did.
func patchTimeMethod(node *ast.Node, call *ast.CallNode) bool {
	m, ok := call.Callee.(*ast.MemberNode)
	if !ok || m.Optional || len(call.Arguments) != 0 || m.Node.Type() != timeType {
		return false
	}
	prop, ok := m.Property.(*ast.StringNode)
	if !ok {
		return false
	}
	if _, ok := timeMethods[prop.Value]; !ok {
		return false
	}
	callee := &ast.IdentifierNode{Value: timeFuncPrefix + prop.Value}
	callee.SetLocation(m.Location())
	fast := &ast.CallNode{Callee: callee, Arguments: []ast.Node{m.Node}}
	fast.SetLocation(call.Location())
	ast.Patch(node, fast)
	return true
}
