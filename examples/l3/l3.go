// Package l3 embeds the L3 example manifests: the SandboxTemplate rt and
// the SandboxWarmPool rt that the embedded default (sandbox-dev
// --default-pool) applies at startup. The Sandbox example under sandbox/
// is for users to create; it is not applied.
package l3

import _ "embed"

var (
	//go:embed template.yaml
	Template []byte
	//go:embed warmpool.yaml
	WarmPool []byte
	//go:embed sandbox/sandbox.yaml
	Sandbox []byte
)

// DefaultPool is what --default-pool applies, in order.
func DefaultPool() [][]byte { return [][]byte{Template, WarmPool} }
