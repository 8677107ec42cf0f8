package e2b

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

const (
	keyA = "e2b_key_of_team_a"
	keyB = "e2b_key_of_team_b"
)

// scopedGateway serves two keys of two namespaces and the default key
// apiKey (in "default").
func scopedGateway(t *testing.T) (*gw, *fakeFleet) {
	t.Helper()
	f := newFakeFleet(t)
	f.addWarm("rt", 10)
	h, err := New(Config{Fleet: f, APIKeys: []string{apiKey}, Keys: []APIKey{{Key: keyA, Namespace: "team-a"}, {Key: keyB, Namespace: "team-b"}}, Domain: "gw.local"})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &gw{t: t, url: srv.URL, f: f}, f
}

// as calls the control plane with key.
func (g *gw) as(key, method, path, body string) (int, string) {
	g.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	status, b := g.raw(method, path, rd, map[string]string{"X-API-KEY": key, "Content-Type": "application/json"})
	return status, string(b)
}

// TestKeys_AKeySeesOnlyItsNamespace: a key's creates land in its
// namespace, and no other namespace's key sees, kills, pauses, connects
// to, forks, snapshots or measures them, nor lists or uses its snapshots.
func TestKeys_AKeySeesOnlyItsNamespace(t *testing.T) {
	g, f := scopedGateway(t)
	status, body := g.as(keyA, "POST", "/v2/sandboxes", `{"templateID":"rt"}`)
	require.Equal(t, http.StatusCreated, status, body)
	f.mu.Lock()
	require.True(t, strings.HasPrefix(f.claims[0].ClaimRef, "team-a/e2b-"), f.claims[0].ClaimRef)
	require.Equal(t, "true", f.claims[0].Object.Labels[sandbox.LabelE2B], "an e2b create is labelled for e2b")
	f.mu.Unlock()
	id := "sb0001"
	status, body = g.as(keyA, "POST", "/sandboxes/"+id+"/snapshots", `{"name":"golden"}`)
	require.Equal(t, http.StatusCreated, status, body)

	for _, other := range []string{keyB, apiKey} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/sandboxes/" + id, ""}, {"DELETE", "/sandboxes/" + id, ""}, {"POST", "/sandboxes/" + id + "/pause", "{}"},
			{"POST", "/v2/sandboxes/" + id + "/connect", `{"timeout":60}`}, {"POST", "/sandboxes/" + id + "/fork", "{}"},
			{"POST", "/sandboxes/" + id + "/snapshots", "{}"}, {"GET", "/sandboxes/" + id + "/metrics", ""},
			{"GET", "/sandboxes/" + id + "/logs", ""}, {"GET", "/v2/sandboxes/" + id + "/logs", ""},
			{"POST", "/sandboxes/" + id + "/timeout", `{"timeout":60}`}, {"DELETE", "/templates/sn_1", ""},
			{"POST", "/v2/sandboxes", `{"templateID":"sn_1"}`}, {"POST", "/v2/sandboxes", `{"templateID":"golden"}`},
		} {
			status, body := g.as(other, c.method, c.path, c.body)
			require.Equal(t, http.StatusNotFound, status, "%s %s with another namespace's key: %s", c.method, c.path, body)
		}
		_, body := g.as(other, "GET", "/v2/sandboxes", "")
		require.Equal(t, "[]\n", body)
		_, body = g.as(other, "GET", "/snapshots", "")
		require.Equal(t, "[]\n", body)
	}
	// Its own key, right after (no cached miss in the way), sees it all.
	status, body = g.as(keyA, "GET", "/sandboxes/"+id, "")
	require.Equal(t, http.StatusOK, status, body)
	_, body = g.as(keyA, "GET", "/v2/sandboxes", "")
	require.Contains(t, body, id)
	_, body = g.as(keyA, "GET", "/snapshots", "")
	require.Contains(t, body, "sn_1")
	status, body = g.as(keyA, "POST", "/v2/sandboxes", `{"templateID":"golden"}`)
	require.Equal(t, http.StatusCreated, status, "a clone of its own snapshot: %s", body)
	_, body = g.as(keyA, "GET", "/v2/sandboxes", "")
	require.Contains(t, body, "sb0002", "the clone is labelled for e2b, so listed")
	f.mu.Lock()
	require.Len(t, f.sandboxes, 2, "nothing was killed")
	f.mu.Unlock()
}

// TestKeys_KubernetesSandboxesAreE2bsOnlyWhenCreatedLabelled: a sandbox
// created through Kubernetes without the e2b label is invisible to every
// key — not listed, not found, not killed — and labelling it
// sandbox.cocoonstack.io/e2b=true later (which `patch sandboxes` allows,
// on anyone's sandbox) does not hand it to e2b: visibility is the claim's
// (nodeapi.Lifecycle.E2B), or an e2b key would read its token without
// `sandboxes/exec`. One created with the label (its creator holds `create
// sandboxes` and the token anyway) is e2b's; even then its ports are not
// public.
func TestKeys_KubernetesSandboxesAreE2bsOnlyWhenCreatedLabelled(t *testing.T) {
	g, f := scopedGateway(t)
	k, _ := pool.KeyForE2B("rt", false)
	kube, err := f.Claim(context.Background(), nodeapi.ClaimFor(k, "default/made-by-kubectl"))
	require.NoError(t, err)
	id := RenderID(kube.ID)
	hidden := func(when string) {
		t.Helper()
		_, body := g.as(apiKey, "GET", "/v2/sandboxes", "")
		require.NotContains(t, body, id, when)
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/sandboxes/" + id, ""}, {"DELETE", "/sandboxes/" + id, ""}, {"POST", "/sandboxes/" + id + "/pause", "{}"},
			{"POST", "/v2/sandboxes/" + id + "/connect", `{"timeout":60}`}, {"POST", "/sandboxes/" + id + "/fork", "{}"},
			{"POST", "/sandboxes/" + id + "/snapshots", "{}"}, {"GET", "/sandboxes/" + id + "/metrics", ""},
			{"GET", "/sandboxes/" + id + "/logs", ""}, {"GET", "/v2/sandboxes/" + id + "/logs", ""},
		} {
			status, body := g.as(apiKey, c.method, c.path, c.body)
			require.Equal(t, http.StatusNotFound, status, "%s: %s %s: %s", when, c.method, c.path, body)
			require.NotContains(t, body, kube.Token, when)
		}
		f.mu.Lock()
		_, alive := f.sandboxes[kube.ID]
		f.mu.Unlock()
		require.True(t, alive, "%s: killed", when)
	}
	hidden("unlabelled")
	_, err = f.SetLabels(context.Background(), kube, nodeapi.LabelsRequest{Labels: map[string]string{sandbox.LabelE2B: "true"}})
	require.NoError(t, err)
	hidden("labelled after its claim")

	labelled, err := f.Claim(context.Background(), nodeapi.ClaimRequest{Template: k.Template, Net: k.Net, Size: k.Size, ClaimRef: "default/labelled-at-create",
		Object: nodeapi.Object{Labels: map[string]string{sandbox.LabelE2B: "true"}}})
	require.NoError(t, err)
	lid := RenderID(labelled.ID)
	status, body := g.as(apiKey, "GET", "/sandboxes/"+lid, "")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, labelled.Token)
	_, body = g.as(apiKey, "GET", "/v2/sandboxes", "")
	require.Contains(t, body, lid)
	status, _ = g.as(keyA, "GET", "/sandboxes/"+lid, "")
	require.Equal(t, http.StatusNotFound, status, "another namespace's key")
	_, err = f.SetLabels(context.Background(), labelled, nodeapi.LabelsRequest{Labels: map[string]string{}})
	require.NoError(t, err)
	status, body = g.as(apiKey, "GET", "/sandboxes/"+lid, "")
	require.Equal(t, http.StatusOK, status, "dropping the label later keeps it e2b's: %s", body)

	// Their ports answer their tokens only, labelled or not.
	app := echoApp(t)
	get := func(sid string, hdr map[string]string) int {
		status, _ := send(t, g.url, "GET", "/page", app+"-"+sid+".gw.local", hdr)
		return status
	}
	for _, s := range []nodeapi.Sandbox{kube, labelled} {
		sid := RenderID(s.ID)
		require.Equal(t, http.StatusUnauthorized, get(sid, nil))
		require.Equal(t, http.StatusOK, get(sid, map[string]string{"X-Access-Token": s.Token}))
		require.Equal(t, http.StatusOK, get(sid, map[string]string{TrafficTokenHeader: TrafficToken(s.Token)}))
	}
}

// TestKeys_SnapshotsOfSandboxesE2bDoesNotSeeAreNotE2bs: a snapshot taken
// of a sandbox no key sees (through Kubernetes' sandboxes/snapshot) is
// not the namespace key's either: it is not listed, cannot be cloned (by
// id or name: a clone's memory may hold the source's token) and cannot
// be deleted. A snapshot of an e2b sandbox is.
func TestKeys_SnapshotsOfSandboxesE2bDoesNotSeeAreNotE2bs(t *testing.T) {
	g, f := scopedGateway(t)
	k, _ := pool.KeyForE2B("rt", false)
	kube, err := f.Claim(context.Background(), nodeapi.ClaimFor(k, "default/made-by-kubectl"))
	require.NoError(t, err)
	snap, err := f.Snapshot(context.Background(), kube, "kube-golden")
	require.NoError(t, err)
	require.Equal(t, "default", snap.Namespace, "the key's namespace")

	_, body := g.as(apiKey, "GET", "/snapshots", "")
	require.Equal(t, "[]\n", body, "listed")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v2/sandboxes", `{"templateID":"` + snap.ID + `"}`},
		{"POST", "/v2/sandboxes", `{"templateID":"kube-golden"}`},
		{"DELETE", "/templates/" + snap.ID, ""},
	} {
		status, body := g.as(apiKey, c.method, c.path, c.body)
		require.Equal(t, http.StatusNotFound, status, "%s %s %s: %s", c.method, c.path, c.body, body)
	}
	f.mu.Lock()
	require.Len(t, f.snaps, 1, "deleted")
	require.Len(t, f.sandboxes, 1, "cloned")
	f.mu.Unlock()

	// An e2b sandbox's snapshot, in the same namespace, is the key's.
	s := g.create(map[string]any{"templateID": "rt"})
	var own snapshotJSON
	resp, _ := g.call("POST", "/sandboxes/"+s.SandboxID+"/snapshots", map[string]any{"name": "e2b-golden"}, &own)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	_, body = g.as(apiKey, "GET", "/snapshots", "")
	require.Contains(t, body, own.SnapshotID)
	require.NotContains(t, body, snap.ID)
	status, body := g.as(apiKey, "POST", "/v2/sandboxes", `{"templateID":"e2b-golden"}`)
	require.Equal(t, http.StatusCreated, status, body)
	status, body = g.as(apiKey, "DELETE", "/templates/"+own.SnapshotID, "")
	require.Equal(t, http.StatusNoContent, status, body)
}

// TestKeys_OnlyAnE2bCreateHasPublicPorts: an e2b create's ports are public
// (allowPublicTraffic's default), a clone of a snapshot too; a fork
// child's are not (it was not created by an e2b create: its token or
// traffic token, both returned by the fork, open them).
func TestKeys_OnlyAnE2bCreateHasPublicPorts(t *testing.T) {
	g, _ := scopedGateway(t)
	app := echoApp(t)
	get := func(sid string, hdr map[string]string) int {
		status, _ := send(t, g.url, "GET", "/page", app+"-"+sid+".gw.local", hdr)
		return status
	}
	s := g.create(map[string]any{"templateID": "rt"})
	require.Equal(t, http.StatusOK, get(s.SandboxID, nil))
	var forked []struct{ Sandbox sandboxJSON }
	resp, _ := g.call("POST", "/sandboxes/"+s.SandboxID+"/fork", map[string]any{"count": 1}, &forked)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	child := forked[0].Sandbox
	require.Equal(t, http.StatusUnauthorized, get(child.SandboxID, nil))
	require.Equal(t, http.StatusOK, get(child.SandboxID, map[string]string{TrafficTokenHeader: *child.TrafficAccessToken}))
	var d detailJSON
	resp, _ = g.call("GET", "/sandboxes/"+child.SandboxID, nil, &d)
	require.Equal(t, http.StatusOK, resp.StatusCode, "a fork child keeps the e2b label: visible")

	var snap snapshotJSON
	resp, _ = g.call("POST", "/sandboxes/"+s.SandboxID+"/snapshots", map[string]any{}, &snap)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	clone := g.create(map[string]any{"templateID": snap.SnapshotID})
	require.Equal(t, http.StatusOK, get(clone.SandboxID, nil))
	private := g.create(map[string]any{"templateID": snap.SnapshotID, "network": map[string]any{"allowPublicTraffic": false}})
	require.Equal(t, http.StatusUnauthorized, get(private.SandboxID, nil))
}
