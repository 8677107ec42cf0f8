package registry

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
)

// column is one printer column; cell reads it from an object.
type column struct {
	def  metav1.TableColumnDefinition
	cell func(runtime.Object) any
}

// tableConvertor renders NAME, the kind's columns and AGE, like a CRD's
// additionalPrinterColumns.
type tableConvertor struct{ columns []column }

func (c tableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, _ runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{}
	t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: "Name", Type: "string", Format: "name"})
	for _, col := range c.columns {
		t.ColumnDefinitions = append(t.ColumnDefinitions, col.def)
	}
	t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: "Age", Type: "date"})

	row := func(o runtime.Object) error {
		m, err := meta.Accessor(o)
		if err != nil {
			return err
		}
		cells := []any{m.GetName()}
		for _, col := range c.columns {
			cells = append(cells, col.cell(o))
		}
		age := "<unknown>"
		if ts := m.GetCreationTimestamp(); !ts.IsZero() {
			age = duration.HumanDuration(time.Since(ts.Time))
		}
		cells = append(cells, age)
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: o}})
		return nil
	}
	if meta.IsListType(obj) {
		if err := meta.EachListItem(obj, row); err != nil {
			return nil, err
		}
		if l, err := meta.ListAccessor(obj); err == nil {
			t.ResourceVersion = l.GetResourceVersion()
			t.Continue = l.GetContinue()
			t.RemainingItemCount = l.GetRemainingItemCount()
		}
		return t, nil
	}
	if err := row(obj); err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	return t, nil
}
