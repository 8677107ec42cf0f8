// Package osthread keeps spare OS threads in a Go process that shares a
// task budget with processes it does not control: the in-guest agent and
// sim's guest init share their VM's pids.max (sim) or the guest kernel's
// (qemu) with whatever the tenant runs.
//
// The Go runtime starts an OS thread whenever it needs one more than it
// has (a goroutine in a blocking system call, an idle P to wake) and
// treats a refused clone as fatal ("runtime: failed to create new OS
// thread ... fatal error: newosproc"). A tenant that fills the budget
// (a fork storm) would so kill the agent at its next busy moment: seen in
// the attack suite, on a loaded machine, with 8 threads.
//
// Reserve makes the runtime start its threads up front. The runtime never
// ends an idle thread (only one a goroutine exits while locked to), so a
// thread it started once is reused, never asked of the kernel again; the
// process then needs a new one only past n at once. The package uses
// only the standard library (the agent links nothing else).
package osthread

import (
	"runtime"
	"sync"
)

// Reserve returns once the process has started at least n OS threads
// beyond the one running it, all idle again: it locks n goroutines to
// threads of their own at once, then lets them go and waits until each
// has unlocked its thread. A thread it cannot start is the runtime's
// fatal error, as any other: call it at start, before the budget is
// shared.
func Reserve(n int) {
	var locked, release, unlocked sync.WaitGroup
	locked.Add(n)
	unlocked.Add(n)
	release.Add(1)
	for range n {
		go func() {
			defer unlocked.Done()
			runtime.LockOSThread()
			locked.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	release.Done()
	unlocked.Wait()
}
