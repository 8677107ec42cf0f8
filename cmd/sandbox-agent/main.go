// Command sandbox-agent is the in-guest agent every microVM runs (see package e2b/envd).
package main

import (
	"os"

	"github.com/hearthvm/hearth/e2b/envd"
)

func main() { os.Exit(envd.Main(os.Args[1:])) }
