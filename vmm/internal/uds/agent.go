package uds

import (
	"context"
	"net/http"
	"time"

	"github.com/hearthvm/hearth/agentapi"
)

// agentHTTP opens a connection per call: a driver speaks to an agent a few
// times per VM start, through a relay whose connections it does not keep.
var agentHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// agentAt is the agent at addr, presenting token (none when empty).
func agentAt(addr, token string) *agentapi.Client {
	return &agentapi.Client{Addr: addr, Token: token, HTTP: agentHTTP}
}

// WaitAgent polls the agent's health (agentapi.HealthPath) at addr until
// it answers 2xx or ctx ends; each probe gets 2 s. exited, when non-nil,
// ends the wait as soon as it closes (the VMM died): the error then wraps
// vmm.ErrVMMExited (PollAlive).
func WaitAgent(ctx context.Context, addr string, exited <-chan struct{}) error {
	c := agentAt(addr, "")
	return PollAlive(ctx, exited, func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return c.Health(rctx)
	})
}

// Rekey asks the agent at addr (currently accepting oldToken) to accept
// newToken from now on (agentapi.Client.SetIdentity). It reports false (and
// no error) when the agent does not implement agentapi.IdentityPath
// (404/405): the guest keeps oldToken.
func Rekey(ctx context.Context, addr, oldToken, newToken string) (bool, error) {
	if oldToken == newToken {
		return true, nil
	}
	err := agentAt(addr, oldToken).SetIdentity(ctx, newToken)
	switch agentapi.StatusOf(err) {
	case http.StatusNotFound, http.StatusMethodNotAllowed:
		return false, nil
	}
	return err == nil, err
}

// InitEnv posts env to the agent's /init (agentapi.Client.Init). An agent
// without /init (404) is tolerated; an empty env sends nothing.
func InitEnv(ctx context.Context, addr, token string, env map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	err := agentAt(addr, token).Init(ctx, env)
	if agentapi.StatusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}
