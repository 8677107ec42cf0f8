package inventory

// EventType is the kind of a change of a live fleet view (Change.Type).
type EventType string

// Event types, spelled like watch.EventType.
const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
)
