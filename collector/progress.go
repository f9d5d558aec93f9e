package collector

// examinedEstimate is how many cells a pass over table id will examine, as
// far as can be told before it starts: what the last pass over it
// examined (the background collector passes every interval, so that is
// recent), or -1 when no pass has covered it yet. A progress display
// shows it as the pass's total; progress.Op.Add raises it if the table has
// grown since.
func (c *Collector) examinedEstimate(id uint64) int64 {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	if st, ok := c.status[id]; ok && st.Examined > 0 {
		return st.Examined
	}
	return -1
}
