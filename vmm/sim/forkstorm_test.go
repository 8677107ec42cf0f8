package sim_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hearthvm/hearth/vmm"
)

// threadsOf is the thread count of host process pid (0 once it is gone).
func threadsOf(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// TestConfinement_AForkStormLeavesTheAgentServing: a guest that fills its
// VM's pid budget (pids.max) with processes it keeps does not take the
// agent or the VM's init down with it. Both started their threads before
// the guest ran anything (osthread.Reserve: the Go runtime dies when the
// kernel refuses it a thread, which the attack suite saw on a loaded
// machine); while the budget stays full the agent answers many requests at
// once, and once the guest's processes are gone it runs processes again.
func TestConfinement_AForkStormLeavesTheAgentServing(t *testing.T) {
	root := t.TempDir()
	d := newDriver(t, root)
	h := boot(t, d, vmm.Spec{ID: "vm", Net: "none", Token: "storm-token"})
	var init, agent int
	for _, pid := range cgroupProcs(t, h) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		switch arg0 := filepath.Base(strings.SplitN(string(cmdline), "\x00", 2)[0]); arg0 {
		case "hearth-sim-init":
			init = pid
		case "sandbox-agent":
			agent = pid
		}
	}
	if init == 0 || agent == 0 {
		t.Fatalf("the VM's init (%d) or agent (%d) not found in its cgroup", init, agent)
	}
	if n := threadsOf(agent); n < 32 {
		t.Fatalf("the agent runs %d threads: it did not start its reserve", n)
	}
	if n := threadsOf(init); n < 8 {
		t.Fatalf("the VM's init runs %d threads: it did not start its reserve", n)
	}

	r := run(t, h, `n=0; for i in $(seq 1 6000); do sleep 300 & [ $? -eq 0 ] || break; n=$((n+1)); done 2>/dev/null; echo $n`)
	if procs := len(cgroupProcs(t, h)); procs < 4000 {
		t.Fatalf("the storm left %d processes in the VM (%v): the budget is not full, the test proves nothing", procs, r)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if code, err := health(h.Addr, h.Token); err != nil || code != http.StatusNoContent {
					errs <- fmt.Sprintf("health: %d %v", code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("during the storm: %s", e)
	}
	if threadsOf(agent) == 0 || threadsOf(init) == 0 {
		b, _ := os.ReadFile(filepath.Join(h.Dir, "agent.log"))
		t.Fatalf("the storm killed the agent or the init:\n%.3000s", b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r := run(t, h, "pkill sleep; echo done"); strings.Contains(r.stdout, "done") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent could not run a process after the storm")
		}
	}
}
