package core

// Replication is the core's surface for the replication and controller-mode
// side of a broker (see the package doc, "Audiences"): what a master serves
// its slaves (TopicTable, SubscriptionGroupTable, AllConsumerOffsets), what
// a slave follows its master with (SyncTopics, SyncSubscriptionGroups,
// SyncConsumerOffsets, OffsetForwarded, SyncDelayOffsets), role changes
// (SetRole, AdoptStoredTopics), the write gate controller mode closes
// (SetWriteGate, WriteGate) and the configuration log's statistics. It is a
// view of the core: it holds no state of its own.
type Replication struct{ c *Core }

// Replication returns the core's replication surface.
func (c *Core) Replication() Replication { return Replication{c} }

// Admin is the core's surface for administration and monitoring (see the
// package doc, "Audiences"): topic and subscription-group administration,
// offset resets and clones, the broker's configuration, runtime reports and
// the statistics the admin protocol, the dashboard and the metrics exporter
// read. It is a view of the core: it holds no state of its own.
type Admin struct{ c *Core }

// Admin returns the core's administration surface.
func (c *Core) Admin() Admin { return Admin{c} }
