package uds

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

var agentHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// WaitAgent polls GET http://addr/health until it answers 2xx or ctx ends.
// exited, when non-nil, aborts the wait early (the VMM died).
func WaitAgent(ctx context.Context, addr string, exited <-chan struct{}) error {
	return Poll(ctx, func() error {
		if exited != nil {
			select {
			case <-exited:
				return fmt.Errorf("vmm exited")
			default:
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/health", nil)
		resp, err := agentHTTP.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("agent health: HTTP %d", resp.StatusCode)
		}
		return nil
	})
}

// IdentityPath is the agent endpoint that re-keys a guest restored from a
// checkpoint: the guest's memory still holds the checkpoint's token, so the
// driver presents that token and installs the clone's own.
const IdentityPath = "/hearth/identity"

// Rekey asks the agent at addr (currently accepting oldToken) to accept
// newToken from now on. It reports false (and no error) when the agent does
// not implement IdentityPath (404/405): the guest keeps oldToken.
func Rekey(ctx context.Context, addr, oldToken, newToken string) (bool, error) {
	if oldToken == newToken {
		return true, nil
	}
	st, body, err := agentPost(ctx, addr, IdentityPath, oldToken, map[string]string{"token": newToken})
	if err != nil {
		return false, err
	}
	switch {
	case st/100 == 2:
		return true, nil
	case st == http.StatusNotFound || st == http.StatusMethodNotAllowed:
		return false, nil
	default:
		return false, fmt.Errorf("agent %s: HTTP %d: %s", IdentityPath, st, body)
	}
}

// InitEnv posts env to the agent's /init ({"envVars":{...}}). An agent
// without /init (404) is tolerated.
func InitEnv(ctx context.Context, addr, token string, env map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	st, body, err := agentPost(ctx, addr, "/init", token, map[string]any{"envVars": env})
	if err != nil {
		return err
	}
	if st/100 != 2 && st != http.StatusNotFound {
		return fmt.Errorf("agent /init: HTTP %d: %s", st, body)
	}
	return nil
}

func agentPost(ctx context.Context, addr, path, token string, v any) (int, string, error) {
	b, _ := json.Marshal(v)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, bytes.NewReader(b))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	resp, err := agentHTTP.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(rb), nil
}
