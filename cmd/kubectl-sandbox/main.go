// Command kubectl-sandbox is the kubectl plugin for Hearth's sandboxes
// (package kubectlsandbox; docs/OPERATIONS.md#kubectl-sandbox): on PATH,
// `kubectl sandbox exec|cp|port-forward|pause|resume|fork|snapshot ...`.
package main

import (
	"os"

	"github.com/hearthvm/hearth/kubectlsandbox"
)

func main() { os.Exit(kubectlsandbox.Run()) }
