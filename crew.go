package chainsync

import "sync"

// crew counts a node's goroutines (all but the loop's), each run under
// the panic handler (goSafe), so that Close can wait for them. Once Close
// waits, no new one starts: spawn reports false and the caller does without
// (a connection is closed where it is, a task does not start), so that
// nothing is added to the count while Close waits on it.
type crew struct {
	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
}

// add counts one more goroutine; false once Close waits.
func (c *crew) add() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.wg.Add(1)
	return true
}

// done ends one counted goroutine.
func (c *crew) done() { c.wg.Done() }

// spawn runs f on a goroutine of its own, counted and under the panic
// handler; false (f does not run) once Close waits.
func (c *crew) spawn(f func()) bool {
	if !c.add() {
		return false
	}
	goSafe(func() {
		defer c.done()
		f()
	})
	return true
}

// wait refuses new goroutines and waits until every counted one ended.
func (c *crew) wait() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	c.wg.Wait()
}
