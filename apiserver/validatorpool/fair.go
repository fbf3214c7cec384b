package validatorpool

import (
	"context"
	"slices"
	"sync"
)

// fairSlots are size slots handed out in turns: a request that finds none
// free waits in its queue, and each freed slot goes to the next queue in
// turn (first come, first served within a queue). One queue's stream of
// requests then delays another queue's request by one turn of the queues
// at most, instead of by the whole stream.
type fairSlots struct {
	size int

	mu   sync.Mutex
	free int
	// waiting are the waiters of each queue, in order; turns are the
	// queues with waiters, the next to be served first.
	waiting map[string][]chan struct{}
	turns   []string
}

func newFairSlots(size int) *fairSlots {
	return &fairSlots{size: size, free: size, waiting: map[string][]chan struct{}{}}
}

// acquire takes a slot for queue, waiting for one until ctx ends.
func (s *fairSlots) acquire(ctx context.Context, queue string) error {
	s.mu.Lock()
	if s.free > 0 && len(s.turns) == 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	granted := make(chan struct{})
	if len(s.waiting[queue]) == 0 {
		s.turns = append(s.turns, queue)
	}
	s.waiting[queue] = append(s.waiting[queue], granted)
	s.mu.Unlock()

	select {
	case <-granted:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-granted:
		// Granted as the wait ended: the slot goes to the next waiter.
		s.mu.Unlock()
		s.release()
		return ctx.Err()
	default:
	}
	q := slices.DeleteFunc(s.waiting[queue], func(c chan struct{}) bool { return c == granted })
	if len(q) == 0 {
		delete(s.waiting, queue)
		s.turns = slices.DeleteFunc(s.turns, func(t string) bool { return t == queue })
	} else {
		s.waiting[queue] = q
	}
	s.mu.Unlock()
	return ctx.Err()
}

// release gives the slot to the first waiter of the queue whose turn it
// is, which goes to the end of the turns if it has more.
func (s *fairSlots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.turns) == 0 {
		s.free++
		return
	}
	queue := s.turns[0]
	s.turns = s.turns[1:]
	q := s.waiting[queue]
	next := q[0]
	if len(q) > 1 {
		s.waiting[queue] = q[1:]
		s.turns = append(s.turns, queue)
	} else {
		delete(s.waiting, queue)
	}
	close(next)
}
