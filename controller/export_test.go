package controller

// LiveFigures returns what the last heartbeat of broker's replica id that
// this node received said about its log (its epoch and max offset), and
// whether one came: for tests that wait until a heartbeat has carried new
// figures to the leader instead of sleeping for a heartbeat or two.
func (n *Node) LiveFigures(broker string, id int64) (epoch int32, maxOffset int64, ok bool) {
	e, ok := n.live.info(broker, id)
	return e.epoch, e.maxOffset, ok
}
