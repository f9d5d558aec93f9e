package rowttl

// scannedEstimate is how many rows a run over table id will scan, as far
// as can be told before it starts: the last complete run's scanned rows
// less those it deleted, or -1 before any. A progress display shows it as
// the run's total; progress.Op.Add raises it if the table has grown since.
func (j *Job) scannedEstimate(id uint64) int64 {
	j.statusMu.Lock()
	defer j.statusMu.Unlock()
	if st, ok := j.status[id]; ok && !st.LastRun.IsZero() {
		return max(st.Scanned-st.Deleted, 0)
	}
	return -1
}
