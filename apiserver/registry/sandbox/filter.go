package sandboxstore

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// filter is what a list or watch selects: a namespace (empty = all), label
// and field selectors, and the one name a field selector may pin.
type filter struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
	// name is set when the field selector pins metadata.name.
	name string
}

// newFilter validates the selectors of a list or watch: field selectors
// only on metadata.name, metadata.namespace and status.nodeName; label
// selectors naming a template value are refused (an image reference is not
// a label value; existence works).
func newFilter(namespace string, opts *metainternalversion.ListOptions) (filter, error) {
	f := filter{namespace: namespace, labels: labels.Everything(), fields: fields.Everything()}
	if opts == nil {
		return f, nil
	}
	if opts.LabelSelector != nil {
		reqs, _ := opts.LabelSelector.Requirements()
		for _, r := range reqs {
			if r.Key() != sandbox.LabelTemplate {
				continue
			}
			switch r.Operator() {
			case selection.Exists, selection.DoesNotExist:
			default:
				return f, apierrors.NewBadRequest(fmt.Sprintf("label selector on %s must test existence only (-l %s): the label carries an image reference, which is not a valid label value", sandbox.LabelTemplate, sandbox.LabelTemplate))
			}
		}
		f.labels = opts.LabelSelector
	}
	if opts.FieldSelector != nil {
		for _, r := range opts.FieldSelector.Requirements() {
			switch r.Field {
			case fieldName:
				if r.Operator == selection.Equals || r.Operator == selection.DoubleEquals {
					f.name = r.Value
				}
			case fieldNamespace, fieldNodeName:
			default:
				return f, apierrors.NewBadRequest(fmt.Sprintf("field selector %q is not supported on sandboxes (supported: %s, %s, %s)", r.Field, fieldName, fieldNamespace, fieldNodeName))
			}
		}
		f.fields = opts.FieldSelector
	}
	return f, nil
}

// pinned reports the "ns/name" a name-pinned request in a namespace reads live.
func (f filter) pinned() (string, bool) {
	if f.name == "" || f.namespace == "" {
		return "", false
	}
	return f.namespace + "/" + f.name, true
}

// matches reports whether sandbox s passes the filter.
func (f filter) matches(s *nodeapi.Sandbox) bool {
	ns, name := inventory.SplitName(inventory.NameOf(s))
	if f.namespace != "" && ns != f.namespace {
		return false
	}
	if f.name != "" && name != f.name {
		return false
	}
	if !f.fields.Empty() && !f.fields.Matches(fields.Set{fieldName: name, fieldNamespace: ns, fieldNodeName: s.Node}) {
		return false
	}
	if !f.labels.Empty() && !f.labels.Matches(labels.Set(readLabels(s))) {
		return false
	}
	return true
}

func (f filter) keep(it inventory.Item) bool {
	s := it.Sandbox()
	return f.matches(&s)
}

// Field selectors sandboxes support.
const (
	fieldName      = "metadata.name"
	fieldNamespace = "metadata.namespace"
	fieldNodeName  = "status.nodeName"
)

// ConvertFieldLabel is the field label conversion of Sandbox: the field
// selectors the storage can filter by pass, others are an error (400).
func ConvertFieldLabel(label, value string) (string, string, error) {
	switch label {
	case fieldName, fieldNamespace, fieldNodeName:
		return label, value, nil
	}
	return "", "", fmt.Errorf("field selector %q is not supported on sandboxes (supported: %s, %s, %s)", label, fieldName, fieldNamespace, fieldNodeName)
}
