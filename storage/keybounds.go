package storage

import "encoding/binary"

// AppendRowBound appends RowBound(tableID, row) to dst, so a caller can
// build several bounds in one buffer.
func AppendRowBound(dst []byte, tableID uint64, row []byte) []byte {
	dst = append(dst, tagCell)
	dst = binary.BigEndian.AppendUint64(dst, tableID)
	return appendEscaped(dst, row)
}

// AppendRowAfter appends RowAfter(tableID, row) to dst: the bound of the
// row key row+"\x00", whose escaped form is row's with an escaped zero byte
// before the terminator.
func AppendRowAfter(dst []byte, tableID uint64, row []byte) []byte {
	dst = append(dst, tagCell)
	dst = binary.BigEndian.AppendUint64(dst, tableID)
	dst = appendEscapedOpen(dst, row)
	return append(dst, 0, 0xFF, 0, 1)
}
