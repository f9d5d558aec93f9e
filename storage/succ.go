package storage

// columnSuccessor is the comparer's ImmediateSuccessor. Pebble's
// Iterator.NextPrefix seeks to ImmediateSuccessor(prefix) to leave the
// current prefix; for a cell key the prefix is its column (Split), and the
// column's versions are that prefix followed by an 8-byte suffix of any
// value, so the default (prefix + 0x00) sorts before nearly all of them and
// NextPrefix would stay in the column. The column's end (PrefixEnd) sorts
// after every version and, column prefixes being prefix-free (escaped and
// terminated row and qualifier), no later than the next column. Any other
// key is its own prefix, and prefix + 0x00 is the next key.
func columnSuccessor(dst, a []byte) []byte {
	if isColumnPrefix(a) {
		if end := PrefixEnd(a); end != nil {
			return append(dst, end...)
		}
	}
	return append(append(dst, a...), 0)
}

// isColumnPrefix says whether a is a cell key without its suffix: tag,
// table id, escaped row, family id, escaped qualifier, nothing more.
func isColumnPrefix(a []byte) bool {
	if len(a)+SuffixLen < minCellKeyLen || a[0] != tagCell {
		return false
	}
	i := skipEscaped(a, 9)
	if i < 0 || i+4 > len(a) {
		return false
	}
	return skipEscaped(a, i+4) == len(a)
}
