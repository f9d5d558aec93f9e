package table

import "github.com/ebbtable/ebbtable/storage"

// Sample is one SampleRowKeys entry: a row key that splits the table and the
// approximate bytes stored before it.
type Sample struct {
	Key    []byte
	Offset int64
}

// SampleRowKeys returns split points of a table: its declared initial splits
// and, last, the empty key standing for the table's end, with on-disk size
// estimates.
func (e *Engine) SampleRowKeys(instance, table string) ([]Sample, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.leave()
	m, err := e.Table(instance, table)
	if err != nil {
		return nil, err
	}
	start := storage.TablePrefix(m.ID)
	var out []Sample
	for _, s := range m.Splits {
		n, err := e.store.EstimateDiskUsage(start, storage.RowBound(m.ID, s))
		if err != nil {
			return nil, err
		}
		out = append(out, Sample{Key: s, Offset: int64(n)})
	}
	n, err := e.store.EstimateDiskUsage(start, storage.TableEnd(m.ID))
	if err != nil {
		return nil, err
	}
	return append(out, Sample{Key: []byte{}, Offset: int64(n)}), nil
}
