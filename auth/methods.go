package auth

// Requirement is what a method needs.
type Requirement struct {
	// Role is the least role a client token needs; None with Peer set
	// means only the peer credential will do.
	Role Role
	// Peer: the peer credential may call it.
	Peer bool
	// Node: the node credential (the nodes of one cluster) may call it.
	Node bool
	// Open: anyone may call it, with no credentials (health checks).
	Open bool
}

// Need returns what a method needs. A method missing from the table (an RPC
// added later) needs admin until it is listed.
func Need(method string) Requirement {
	if r, ok := methods[method]; ok {
		return r
	}
	return Requirement{Role: Admin}
}

var (
	open     = Requirement{Open: true}
	viewer   = Requirement{Role: Viewer}
	reader   = Requirement{Role: Reader}
	user     = Requirement{Role: User}
	admin    = Requirement{Role: Admin}
	peerOnly = Requirement{Peer: true}
)

// methods maps each full method name to what it needs. The roles follow
// Bigtable's IAM roles: viewer is metadata (get and list), reader adds data
// reads, user adds data writes and replication waits, admin the rest.
var methods = map[string]Requirement{}

func add(service string, r Requirement, names ...string) {
	for _, n := range names {
		methods["/"+service+"/"+n] = r
	}
}

func init() {
	const data = "google.bigtable.v2.Bigtable"
	add(data, reader, "ReadRows", "SampleRowKeys", "PingAndWarm", "GenerateInitialChangeStreamPartitions",
		"ReadChangeStream", "PrepareQuery", "ExecuteQuery")
	add(data, user, "MutateRow", "MutateRows", "CheckAndMutateRow", "ReadModifyWriteRow")

	const tables = "google.bigtable.admin.v2.BigtableTableAdmin"
	add(tables, viewer, "ListTables", "GetTable", "ListAuthorizedViews", "GetAuthorizedView", "GetSnapshot",
		"ListSnapshots", "GetBackup", "ListBackups", "GetSchemaBundle", "ListSchemaBundles", "TestIamPermissions")
	add(tables, user, "GenerateConsistencyToken", "CheckConsistency")
	add(tables, admin, "CreateTable", "CreateTableFromSnapshot", "UpdateTable", "DeleteTable", "UndeleteTable",
		"CreateAuthorizedView", "UpdateAuthorizedView", "DeleteAuthorizedView", "ModifyColumnFamilies", "DropRowRange",
		"SnapshotTable", "DeleteSnapshot", "CreateBackup", "UpdateBackup", "DeleteBackup", "RestoreTable", "CopyBackup",
		"GetIamPolicy", "SetIamPolicy", "CreateSchemaBundle", "UpdateSchemaBundle", "DeleteSchemaBundle")

	const instances = "google.bigtable.admin.v2.BigtableInstanceAdmin"
	add(instances, viewer, "GetInstance", "ListInstances", "GetCluster", "ListClusters", "GetAppProfile",
		"ListAppProfiles", "ListHotTablets", "GetLogicalView", "ListLogicalViews", "GetMaterializedView",
		"ListMaterializedViews", "TestIamPermissions")
	add(instances, admin, "CreateInstance", "UpdateInstance", "PartialUpdateInstance", "DeleteInstance",
		"CreateCluster", "UpdateCluster", "PartialUpdateCluster", "DeleteCluster", "CreateAppProfile",
		"UpdateAppProfile", "DeleteAppProfile", "GetIamPolicy", "SetIamPolicy", "CreateLogicalView",
		"UpdateLogicalView", "DeleteLogicalView", "CreateMaterializedView", "UpdateMaterializedView",
		"DeleteMaterializedView")

	const ops = "google.longrunning.Operations"
	add(ops, viewer, "ListOperations", "GetOperation", "WaitOperation")
	add(ops, admin, "DeleteOperation", "CancelOperation")

	add("grpc.health.v1.Health", open, "Check", "Watch", "List")

	const ebb = "ebbtable.admin.v1.EbbAdmin"
	add(ebb, viewer, "GcStatus", "TtlStatus", "Progress")
	add(ebb, reader, "GcPlan", "TtlPlan", "Watch")
	add(ebb, admin, "GcRun", "SetFamilyOptions", "DebugClock", "GcRaise", "ReplicationDiff", "ReplicationLink",
		"Ddl", "TtlRun", "TtlResume")
	// Cluster to cluster: joining, copying, pulling, comparing and
	// repairing, holding GC. Only the peer credential opens them.
	add(ebb, peerOnly, "Join", "Ready", "TableChunks", "TableCells", "RepairCells", "GcHold")
	// A node of a cluster of several nodes asks the others for their part
	// of a peer's pull or snapshot with the node credential.
	add(ebb, Requirement{Peer: true, Node: true}, "Pull", "Snapshot")
	// Consistency checks ask peers for their status; so does the CLI.
	add(ebb, Requirement{Role: Viewer, Peer: true}, "ReplicationStatus")

	// Scale-out: the cluster of nodes and its tablets. A node passes a move
	// to the tablet's owner, ships the span to the target and asks an
	// owner for its part of a backup with the node credential (never the
	// peer credential: another cluster must not write spans here); an
	// admin token may call them too.
	const cl = "ebbtable.cluster.v1.Cluster"
	add(cl, viewer, "ListNodes", "ListTablets")
	add(cl, admin, "DrainNode", "SplitTablet", "MergeTablet")
	add(cl, Requirement{Role: Admin, Node: true}, "MoveTablet", "IngestSpan", "BackupRows", "IngestChanges", "RestoreRows", "ApplyReplicated", "ImportSnapshot")
	// A node reading a materialized view asks each owner of the table's
	// tablets for its part of the view's state.
	add(cl, Requirement{Role: Admin, Node: true}, "ViewPartial")
}
