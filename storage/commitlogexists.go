package storage

// HasCommitState says whether node has a catalog or commit log objects in
// the shared store (a node starting on an empty data directory asks it:
// that state is its previous engine's, server/clusterfresh.go).
func HasCommitState(st ObjectStore, node string) (bool, error) {
	cats, err := listCatalogs(st, node)
	if err != nil || len(cats) > 0 {
		return len(cats) > 0, err
	}
	objs, err := listLog(st, node)
	return len(objs) > 0, err
}
