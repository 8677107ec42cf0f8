// Command etcd is upstream etcd (go.etcd.io/etcd/server/v3, pinned in
// go.mod) built from the Go module proxy for the e2e harness.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
