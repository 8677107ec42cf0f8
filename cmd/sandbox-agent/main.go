// Command sandbox-agent is the in-guest agent every microVM runs (see package agent).
package main

import (
	"fmt"
	"os"

	"github.com/hearthvm/hearth/agent"
	"github.com/hearthvm/hearth/vmm/sim/seccomp"
)

func main() {
	// Under the sim backend the agent is the first guest process: it puts
	// itself (and so every process it starts) under the syscall filter and
	// the capability bound (package seccomp).
	if err := seccomp.InstallIfAsked(); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-agent:", err)
		os.Exit(1)
	}
	os.Exit(agent.Main(os.Args[1:]))
}
