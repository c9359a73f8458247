package budget

import "context"

type awaitedKey struct{}

// WithAwaited marks the requests made with ctx as awaited work.
func WithAwaited(ctx context.Context) context.Context {
	return context.WithValue(ctx, awaitedKey{}, true)
}

// Awaited reports whether ctx was marked with WithAwaited.
func Awaited(ctx context.Context) bool {
	v, _ := ctx.Value(awaitedKey{}).(bool)
	return v
}

// class is a waiter's place: awaited work first.
type class int

const (
	classAwaited class = iota
	classOther
	classes
)

func classOf(awaited bool) class {
	if awaited {
		return classAwaited
	}
	return classOther
}
