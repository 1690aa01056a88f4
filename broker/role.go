package broker

import (
	"errors"
	"fmt"

	"github.com/apogeemq/apogee/broker/core"
)

// Role changes in place (controller mode, docs/failover.md), as RocketMQ's
// BrokerController.changeToMaster and changeToSlave: the store, the core,
// the remoting server, its connections and every other front end on the
// core stay; what changes is the core's role (core.Core.SetRole: the write
// gate, the features that write, the store's replica mode), the HA side
// (the master side that ServeHA's listeners hand slaves to, or an ha.Slave
// and the loop that follows the master's tables), and the registration
// (broker id, state version).

// RoleChange describes the role SetRole gives the broker.
type RoleChange struct {
	// Role is the new role. A master's sync or async is the core's
	// (SYNC_MASTER waits for a replica).
	Role core.Role
	// BrokerID is registered with the name servers: 0 for a master, the
	// controller's id for a slave.
	BrokerID int64
	// StateVersion is put in every registration's data version (the
	// controller's master epoch), as Options.StateVersion.
	StateVersion int64
	// BeforeMaster, when it is set and a slave becomes master, runs once
	// the HA slave has stopped (nothing appends to the store any more) and
	// before the store takes writes, with the log's end: the epoch file's
	// new entry begins there. An error leaves the broker a slave.
	BeforeMaster func(logEnd int64) error
}

// ErrRoleChange wraps what made a role change fail.
var ErrRoleChange = errors.New("broker: role change")

// Role is the broker's role now.
func (b *Broker) Role() core.Role { return b.core.Role() }

// StateVersion is the state version registered now (the controller's
// master epoch in controller mode).
func (b *Broker) StateVersion() int64 { return b.stateVersion.Load() }

// brokerID is the broker id registered now.
func (b *Broker) brokerID() int64 { return b.id.Load() }

// SetRole changes the broker's role in place. To slave: the core refuses
// writes first, then the HA master side closes (its slaves disconnect) and
// an ha.Slave starts (FollowMaster names its master). To master: the HA
// slave stops, ch.BeforeMaster runs, the core takes writes and the HA
// master side starts on the listeners ServeHA serves. Then the broker
// registers again with the new id and state version. Client connections
// stay open. Role changes are serialized; one to the current role only
// updates the registration.
func (b *Broker) SetRole(ch RoleChange) error {
	b.roleMu.Lock()
	defer b.roleMu.Unlock()
	if b.closing.Load() {
		return ErrClosed
	}
	cur := b.core.Role()
	toSlave := ch.Role == core.RoleSlave
	switch {
	case toSlave && cur != core.RoleSlave:
		if err := b.core.Replication().SetRole(ch.Role); err != nil {
			return fmt.Errorf("%w: to %s: %w", ErrRoleChange, ch.Role, err)
		}
		b.stopMaster()
		if err := b.startSlave(ch.BrokerID); err != nil {
			return fmt.Errorf("%w: to %s: %w", ErrRoleChange, ch.Role, err)
		}
	case !toSlave && cur == core.RoleSlave:
		b.stopSlave()
		if ch.BeforeMaster != nil {
			if err := ch.BeforeMaster(b.core.Store().WrittenOffset()); err != nil {
				b.restartSlave()
				return fmt.Errorf("%w: to %s: %w", ErrRoleChange, ch.Role, err)
			}
		}
		if err := b.core.Replication().SetRole(ch.Role); err != nil {
			b.restartSlave()
			return fmt.Errorf("%w: to %s: %w", ErrRoleChange, ch.Role, err)
		}
		if err := b.startMaster(); err != nil {
			return fmt.Errorf("%w: to %s: %w", ErrRoleChange, ch.Role, err)
		}
	case cur != ch.Role:
		if err := b.core.Replication().SetRole(ch.Role); err != nil {
			return fmt.Errorf("%w: to %s: %w", ErrRoleChange, ch.Role, err)
		}
	}
	b.id.Store(ch.BrokerID)
	b.stateVersion.Store(ch.StateVersion)
	b.registerEmbedded()
	if b.registrar != nil {
		b.registrar.Trigger()
	}
	return nil
}

// restartSlave starts the HA slave again after a promotion that failed.
func (b *Broker) restartSlave() {
	if err := b.startSlave(b.brokerID()); err != nil {
		b.copts.Logger.Error("broker: restarting the HA slave after a failed promotion", "err", err)
	}
}
