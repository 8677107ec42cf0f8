package sandboxstore

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// sandboxWatch is one watch over the live source (watchLive): its events
// and its Stop.
type sandboxWatch struct {
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func (w *sandboxWatch) Stop()                          { w.once.Do(func() { close(w.done) }) }
func (w *sandboxWatch) ResultChan() <-chan watch.Event { return w.ch }

// bookmarkObject is the BOOKMARK at rv that ends a watch-list's initial
// events (annotated k8s.io/initial-events-end).
func bookmarkObject(rv string) *sandboxv1beta1.Sandbox {
	return &sandboxv1beta1.Sandbox{
		TypeMeta: metav1.TypeMeta{APIVersion: sandboxv1beta1.GroupVersion.String(), Kind: "Sandbox"},
		ObjectMeta: metav1.ObjectMeta{
			ResourceVersion: rv,
			Annotations:     map[string]string{metav1.InitialEventsAnnotationKey: "true"},
		},
	}
}
