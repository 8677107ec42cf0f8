package sandboxstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// verbStorage serves one lifecycle subresource (pause, resume, fork,
// snapshot) as a named create. Dry-run and bad bodies are 400 before the
// sandbox is even looked up; node 404/409 come through as 404/409.
type verbStorage struct {
	s    *sandboxStorage
	verb string
	new  func() runtime.Object
	// do checks the body (400s) and returns the action to run on the sandbox.
	do func(obj runtime.Object) (func(ctx context.Context, loc nodeapi.Sandbox) (runtime.Object, error), error)
}

var _ rest.NamedCreater = (*verbStorage)(nil)

func (v *verbStorage) New() runtime.Object { return v.new() }
func (v *verbStorage) Destroy()            {}

func (v *verbStorage) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, opts *metav1.CreateOptions) (runtime.Object, error) {
	if opts != nil && isDryRun(opts.DryRun) {
		return nil, errDryRun(v.verb)
	}
	if fmt.Sprintf("%T", obj) != fmt.Sprintf("%T", v.new()) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s takes a %T body, not %T", v.verb, v.new(), obj))
	}
	run, err := v.do(obj)
	if err != nil {
		return nil, err
	}
	sb, err := v.s.fleet.ByRef(ctx, refOf(ctx, name))
	if err != nil {
		return nil, fleetError(err, name, v.verb)
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj); err != nil {
			return nil, err
		}
	}
	out, err := run(ctx, sb)
	if err != nil {
		return nil, fleetError(err, name, v.verb)
	}
	return out, nil
}

// verbs returns the lifecycle subresources keyed by their path.
func (s *sandboxStorage) verbs() map[string]*verbStorage {
	// reread returns the sandbox as its node now reports it.
	reread := func(ctx context.Context, sb nodeapi.Sandbox) (runtime.Object, error) {
		before := s.live.Rev()
		if now, err := s.fleet.LiveByID(ctx, sb.ID); err == nil {
			return s.read(ctx, now, before), nil
		}
		return synthesize(&sb, before), nil
	}
	return map[string]*verbStorage{
		"pause": {s: s, verb: "pause", new: func() runtime.Object { return &sandbox.SandboxPauseOptions{} },
			do: func(runtime.Object) (func(context.Context, nodeapi.Sandbox) (runtime.Object, error), error) {
				return func(ctx context.Context, loc nodeapi.Sandbox) (runtime.Object, error) {
					if err := s.fleet.Pause(ctx, loc); err != nil {
						return nil, err
					}
					return reread(ctx, loc)
				}, nil
			}},
		"resume": {s: s, verb: "resume", new: func() runtime.Object { return &sandbox.SandboxResumeOptions{} },
			do: func(runtime.Object) (func(context.Context, nodeapi.Sandbox) (runtime.Object, error), error) {
				return func(ctx context.Context, loc nodeapi.Sandbox) (runtime.Object, error) {
					if err := s.fleet.Resume(ctx, loc); err != nil {
						return nil, err
					}
					return reread(ctx, loc)
				}, nil
			}},
		"fork": {s: s, verb: "fork", new: func() runtime.Object { return &sandbox.SandboxForkOptions{} },
			do: func(obj runtime.Object) (func(context.Context, nodeapi.Sandbox) (runtime.Object, error), error) {
				in := obj.(*sandbox.SandboxForkOptions)
				if in.Count < 0 || in.Count > nodeapi.MaxForkCount {
					return nil, apierrors.NewBadRequest(fmt.Sprintf("count must be in [1, %d] (a node forks at most %d children in one call; 0 means 1), got %d", nodeapi.MaxForkCount, nodeapi.MaxForkCount, in.Count))
				}
				if in.TTLSeconds < 0 {
					return nil, apierrors.NewBadRequest(fmt.Sprintf("ttlSeconds must be >= 0, got %d", in.TTLSeconds))
				}
				count := int(in.Count)
				if count == 0 {
					count = 1
				}
				return func(ctx context.Context, loc nodeapi.Sandbox) (runtime.Object, error) {
					// As Create's claim: detached, and released if the client is gone.
					kids, err := fleet.Detached(ctx, s.fleet, func(ctx context.Context) ([]nodeapi.Sandbox, error) {
						return s.fleet.Fork(ctx, loc, count, int64(in.TTLSeconds))
					})
					if errors.Is(err, fleet.ErrAbandoned) {
						return nil, apierrors.NewTimeoutError(fmt.Sprintf("fork of %s was abandoned by the client and its children released", loc.ClaimRef), 0)
					}
					if err != nil {
						return nil, err
					}
					out := &sandbox.SandboxForkResult{
						TypeMeta: metav1.TypeMeta{APIVersion: sandbox.SchemeGroupVersion.String(), Kind: "SandboxForkResult"},
						Children: []sandbox.SandboxForkChild{},
					}
					for _, k := range kids {
						name := k.ID
						if k.ClaimRef != "" {
							_, name = inventory.SplitName(k.ClaimRef)
						}
						c := sandbox.SandboxForkChild{SandboxID: k.ID, Name: name, NodeName: k.Node, Address: k.AgentAddr}
						if !k.Deadline.IsZero() {
							dl := metav1.NewTime(k.Deadline.UTC().Truncate(time.Second))
							c.Deadline = &dl
						}
						out.Children = append(out.Children, c)
					}
					return out, nil
				}, nil
			}},
		"snapshot": {s: s, verb: "snapshot", new: func() runtime.Object { return &sandbox.SandboxSnapshotOptions{} },
			do: func(obj runtime.Object) (func(context.Context, nodeapi.Sandbox) (runtime.Object, error), error) {
				in := obj.(*sandbox.SandboxSnapshotOptions)
				return func(ctx context.Context, loc nodeapi.Sandbox) (runtime.Object, error) {
					snap, err := s.fleet.Snapshot(ctx, loc, in.Name)
					if err != nil {
						return nil, err
					}
					return &sandbox.SandboxSnapshotResult{
						TypeMeta:          metav1.TypeMeta{APIVersion: sandbox.SchemeGroupVersion.String(), Kind: "SandboxSnapshotResult"},
						SnapshotID:        snap.ID,
						Name:              snap.Name,
						NodeName:          snap.Node,
						CreationTimestamp: metav1.NewTime(snap.CreatedAt.UTC().Truncate(time.Second)),
					}, nil
				}, nil
			}},
	}
}
