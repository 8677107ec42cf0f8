package agentapi

import (
	"context"
	"net/http"

	"github.com/hearthvm/hearth/internal/httpjson"
)

// OOMKillsPath is GET: the guest kernel's OOM kill count (OOMKills), the
// oom_kill counter of the guest's /proc/vmstat — the processes the
// kernel's OOM killer killed since the guest booted. For the node alone
// (under InternalPathPrefix): a VMM driver asks it for vmm.OOMCounter
// (qemu). Under the sim backend the agent runs on the host and the count
// would be the host's: that driver reads its VM's memory cgroup instead.
// A kernel without the counter (before 4.13) answers 501.
const OOMKillsPath = InternalPathPrefix + "oom-kills"

// OOMKills is the body of GET OOMKillsPath.
type OOMKills struct {
	OOMKills uint64 `json:"oom_kills"`
}

// maxOOMKillsAnswer bounds what OOMKills reads of the guest's answer (a
// count: tens of bytes; the guest writes it).
const maxOOMKillsAnswer = 4 << 10

// OOMKills asks GET OOMKillsPath for the guest kernel's OOM kill count. An
// agent without the route answers 404 (an *HTTPError; StatusOf tells); an
// answer past 4 KiB is an error, read no further.
func (c *Client) OOMKills(ctx context.Context) (uint64, error) {
	var out OOMKills
	if err := c.do(ctx, OOMKillsPath, "", httpjson.Call{Method: http.MethodGet, Out: &out, OutLimit: maxOOMKillsAnswer}); err != nil {
		return 0, err
	}
	return out.OOMKills, nil
}
