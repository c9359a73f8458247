package workers

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
)

// Awaited work goes first (package budget): work an owner's finalizer
// waits for — an orphaning owner's patches and finalizer removal, the
// deletion of the dependents that block an owner in Foreground deletion
// and its finalizer removal — before the deletion of garbage nobody waits
// for. Three places order it: the attempt-to-delete queue (awaitedFirst),
// the write slots and the workers' rate limiter (budget.Slots,
// budget.Limiter, told by runWorker). The attempt-to-orphan queue holds
// awaited work only.

// always classes every item of a queue as awaited (the attempt-to-orphan
// queue's).
func always(types.UID) bool { return true }

// awaitedFirst is the attempt-to-delete queue's order (client-go's
// workqueue.Queue: the storage of a work queue, called under its lock):
// the items awaited reports first, the others after, each in the order
// they came. An item is classed when it is queued; one queued again while
// it waits keeps its place, as in client-go's own queue.
type awaitedFirst struct {
	awaited func(types.UID) bool
	lines   [2]uidLine // 0: awaited
}

var _ workqueue.Queue[types.UID] = (*awaitedFirst)(nil)

func newAwaitedFirst(awaited func(types.UID) bool) *awaitedFirst {
	return &awaitedFirst{awaited: awaited}
}

func (q *awaitedFirst) Touch(types.UID) {}

func (q *awaitedFirst) Push(uid types.UID) {
	line := 1
	if q.awaited(uid) {
		line = 0
	}
	q.lines[line].push(uid)
}

func (q *awaitedFirst) Len() int { return q.lines[0].len() + q.lines[1].len() }

func (q *awaitedFirst) Pop() types.UID {
	if q.lines[0].len() > 0 {
		return q.lines[0].pop()
	}
	return q.lines[1].pop()
}

// uidLine is a FIFO of UIDs.
type uidLine struct {
	items []types.UID
	head  int
}

func (l *uidLine) len() int { return len(l.items) - l.head }

func (l *uidLine) push(uid types.UID) { l.items = append(l.items, uid) }

func (l *uidLine) pop() types.UID {
	uid := l.items[l.head]
	l.items[l.head] = ""
	l.head++
	switch {
	case l.head == len(l.items):
		l.items, l.head = l.items[:0], 0
	case l.head > 1024 && 2*l.head > len(l.items):
		// Drop what was popped so that the array does not grow forever.
		n := copy(l.items, l.items[l.head:])
		clear(l.items[n:])
		l.items, l.head = l.items[:n], 0
	}
	return uid
}
