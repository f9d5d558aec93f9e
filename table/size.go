package table

import "github.com/ebbtable/ebbtable/storage"

// DiskUsage estimates the bytes a table's cells take in the SSTables on
// disk. Cells still only in the memtable (and the WAL) count nothing until
// they are flushed.
func (e *Engine) DiskUsage(m *Meta) (uint64, error) {
	if err := e.enter(); err != nil {
		return 0, err
	}
	defer e.leave()
	return e.store.EstimateDiskUsage(storage.TablePrefix(m.ID), storage.TableEnd(m.ID))
}
