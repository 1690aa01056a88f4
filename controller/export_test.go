package controller

// LiveFigures returns what the last heartbeat of broker's replica id that
// this node received said about its log (its epoch and max offset), and
// whether one came: for tests that wait until a heartbeat has carried new
// figures to the leader instead of sleeping for a heartbeat or two.
func (n *Node) LiveFigures(broker string, id int64) (epoch int32, maxOffset int64, ok bool) {
	e, ok := n.live.info(broker, id)
	return e.epoch, e.maxOffset, ok
}

// Kill stops the node as SIGKILL would for the others: its listeners and
// Raft member stop without handing leadership over first (Close hands it).
func (n *Node) Kill() error {
	if n.closed.Swap(true) {
		return nil
	}
	n.srvMu.Lock()
	if n.srv != nil {
		n.srv.Close()
	}
	n.srvMu.Unlock()
	close(n.stop)
	n.wg.Wait()
	return n.closeParts()
}
