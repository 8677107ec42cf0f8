package sandboxstore

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/sandbox"
)

var tableColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the sandbox"},
	{Name: "Node", Type: "string", Description: "Node holding the microVM"},
	{Name: "Phase", Type: "string", Description: "Phase the node reports (Running, Paused)"},
	{Name: "Claim-ID", Type: "string", Description: "Node-local claim id"},
	{Name: "Age", Type: "string", Description: "Time since the claim"},
}

// ConvertToTable renders NAME, NODE, PHASE, CLAIM-ID, AGE.
func (s *sandboxStorage) ConvertToTable(_ context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{}
	if o, ok := opts.(*metav1.TableOptions); !ok || !o.NoHeaders {
		t.ColumnDefinitions = tableColumns
	}
	row := func(sb *sandboxv1beta1.Sandbox) {
		phase := sb.Labels[sandbox.LabelPhase]
		if phase == "" && len(sb.Status.Conditions) > 0 {
			phase = sb.Status.Conditions[0].Reason
		}
		age := "<unknown>"
		if !sb.CreationTimestamp.IsZero() {
			age = duration.HumanDuration(s.now().Sub(sb.CreationTimestamp.Time))
		}
		t.Rows = append(t.Rows, metav1.TableRow{
			Cells:  []any{sb.Name, sb.Status.NodeName, phase, sb.Annotations[sandbox.AnnotationClaimID], age},
			Object: runtime.RawExtension{Object: sb},
		})
	}
	switch o := obj.(type) {
	case *sandboxv1beta1.Sandbox:
		row(o)
		t.ResourceVersion = o.ResourceVersion
	case *sandboxv1beta1.SandboxList:
		for i := range o.Items {
			row(&o.Items[i])
		}
		t.ResourceVersion = o.ResourceVersion
	default:
		if _, err := meta.ListAccessor(obj); err == nil {
			return nil, fmt.Errorf("unexpected list type %T", obj)
		}
		return nil, fmt.Errorf("unexpected object type %T", obj)
	}
	return t, nil
}
