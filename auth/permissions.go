package auth

import (
	"strings"
	"sync"
)

// IAM: each method needs one Bigtable permission (bigtable.KIND.VERB), and
// Bigtable's roles, predefined and basic, are sets of permissions. When a
// resource a call names, or one of its parents, has an IAM policy, the
// caller's members must be granted a role holding the permission; the
// token's role stays a ceiling (docs/security.md, "IAM policies").

// Permission returns the permission a method needs, and whether the method
// is listed at all. An empty permission on a listed method means IAM does
// not apply to it: health checks, cluster-to-cluster calls, connection
// warm-up (PingAndWarm, GetClientConfiguration) and TestIamPermissions
// (which answers for the caller whatever it holds).
func Permission(method string) (string, bool) {
	p, ok := permissions[method]
	return p, ok
}

// permissions maps each full method name to its permission.
var permissions = map[string]string{}

// permLevel is the least token role among the methods needing each
// permission: what the predefined role of that name holds. Built on first
// use, once both method tables are filled.
var permLevel = sync.OnceValue(levels)

func perm(service, permission string, names ...string) {
	for _, n := range names {
		permissions["/"+service+"/"+n] = permission
	}
}

// PermissionFor is the permission a method needs on a resource of kind
// ("tables", "authorizedViews", "backups", "instances"): a table
// permission whose counterpart exists on that kind becomes it, so a
// ReadRows through an authorized view needs bigtable.authorizedViews.readRows
// and a GetIamPolicy on a backup bigtable.backups.getIamPolicy, as in
// Bigtable.
func PermissionFor(permission, kind string) string {
	const pre = "bigtable.tables."
	if (kind != "authorizedViews" && kind != "backups") || !strings.HasPrefix(permission, pre) {
		return permission
	}
	alt := "bigtable." + kind + "." + strings.TrimPrefix(permission, pre)
	if _, ok := permLevel()[alt]; ok {
		return alt
	}
	return permission
}

// RoleHolds says whether an IAM role (roles/…) holds a permission.
// Predefined roles hold the permissions of the methods their token role
// may call: roles/bigtable.viewer those of viewer methods, reader adds the
// data reads, user the writes, admin (and roles/owner) everything;
// roles/editor everything but setIamPolicy, roles/viewer what
// roles/bigtable.viewer holds. Other roles (custom ones) hold nothing.
func RoleHolds(role, permission string) bool {
	level, ok := permLevel()[permission]
	if !ok {
		return false
	}
	switch role {
	case "roles/bigtable.admin", "roles/owner":
		return true
	case "roles/editor":
		return !strings.HasSuffix(permission, ".setIamPolicy")
	case "roles/bigtable.user":
		return level <= User
	case "roles/bigtable.reader":
		return level <= Reader
	case "roles/bigtable.viewer", "roles/viewer":
		return level <= Viewer
	}
	return false
}

// TokenHolds says whether a token role reaches a permission (the ceiling
// TestIamPermissions applies before any policy).
func TokenHolds(r Role, permission string) bool {
	level, ok := permLevel()[permission]
	return ok && r >= level
}

// Binding is one binding of an IAM policy, as the server reads it.
type Binding struct {
	Role    string
	Members []string
	// Conditional bindings are not evaluated: they grant nothing.
	Conditional bool
}

// Matches says whether a binding member names one of the caller's
// members: allUsers and allAuthenticatedUsers match every token (every
// caller that gets this far is authenticated), domain:D every member
// whose e-mail is at D, anything else the same member exactly.
func Matches(bindingMember string, members []string) bool {
	if bindingMember == "allUsers" || bindingMember == "allAuthenticatedUsers" {
		return true
	}
	if d, ok := strings.CutPrefix(bindingMember, "domain:"); ok {
		for _, m := range members {
			if i := strings.LastIndexByte(m, '@'); i >= 0 && strings.EqualFold(m[i+1:], d) && !strings.HasPrefix(m, "token:") {
				return true
			}
		}
		return false
	}
	for _, m := range members {
		if m == bindingMember {
			return true
		}
	}
	return false
}

// Grants says whether bindings grant one of members the permission.
func Grants(bindings []Binding, members []string, permission string) bool {
	for _, b := range bindings {
		if b.Conditional || !RoleHolds(b.Role, permission) {
			continue
		}
		for _, m := range b.Members {
			if Matches(m, members) {
				return true
			}
		}
	}
	return false
}

func init() {
	const data = "google.bigtable.v2.Bigtable"
	perm(data, "bigtable.tables.readRows", "ReadRows")
	perm(data, "bigtable.tables.sampleRowKeys", "SampleRowKeys")
	// Connection warm-up reads nothing, and the official clients call it
	// when they connect: a member bound only on a table must get through.
	perm(data, "", "PingAndWarm", "GetClientConfiguration")
	perm(data, "bigtable.tables.readChangeStream", "GenerateInitialChangeStreamPartitions", "ReadChangeStream")
	perm(data, "bigtable.instances.executeQuery", "PrepareQuery", "ExecuteQuery")
	perm(data, "bigtable.tables.mutateRows", "MutateRow", "MutateRows", "CheckAndMutateRow", "ReadModifyWriteRow")
	// Session methods (not served yet) and client configuration.
	perm(data, "bigtable.tables.readRows", "OpenTable", "OpenMaterializedView")
	perm(data, "bigtable.authorizedViews.readRows", "OpenAuthorizedView")

	const tables = "google.bigtable.admin.v2.BigtableTableAdmin"
	perm(tables, "bigtable.tables.list", "ListTables")
	perm(tables, "bigtable.tables.get", "GetTable", "GetSnapshot", "ListSnapshots")
	perm(tables, "bigtable.authorizedViews.list", "ListAuthorizedViews")
	perm(tables, "bigtable.authorizedViews.get", "GetAuthorizedView")
	perm(tables, "bigtable.backups.get", "GetBackup")
	perm(tables, "bigtable.backups.list", "ListBackups")
	perm(tables, "bigtable.schemaBundles.get", "GetSchemaBundle")
	perm(tables, "bigtable.schemaBundles.list", "ListSchemaBundles")
	perm(tables, "", "TestIamPermissions")
	perm(tables, "bigtable.tables.generateConsistencyToken", "GenerateConsistencyToken")
	perm(tables, "bigtable.tables.checkConsistency", "CheckConsistency")
	perm(tables, "bigtable.tables.create", "CreateTable", "CreateTableFromSnapshot")
	perm(tables, "bigtable.tables.update", "UpdateTable", "ModifyColumnFamilies", "DropRowRange", "SnapshotTable", "DeleteSnapshot")
	perm(tables, "bigtable.tables.delete", "DeleteTable")
	perm(tables, "bigtable.tables.undelete", "UndeleteTable")
	perm(tables, "bigtable.authorizedViews.create", "CreateAuthorizedView")
	perm(tables, "bigtable.authorizedViews.update", "UpdateAuthorizedView")
	perm(tables, "bigtable.authorizedViews.delete", "DeleteAuthorizedView")
	perm(tables, "bigtable.backups.create", "CreateBackup", "CopyBackup")
	perm(tables, "bigtable.backups.update", "UpdateBackup")
	perm(tables, "bigtable.backups.delete", "DeleteBackup")
	perm(tables, "bigtable.backups.restore", "RestoreTable")
	perm(tables, "bigtable.tables.getIamPolicy", "GetIamPolicy")
	perm(tables, "bigtable.tables.setIamPolicy", "SetIamPolicy")
	perm(tables, "bigtable.schemaBundles.create", "CreateSchemaBundle")
	perm(tables, "bigtable.schemaBundles.update", "UpdateSchemaBundle")
	perm(tables, "bigtable.schemaBundles.delete", "DeleteSchemaBundle")

	const instances = "google.bigtable.admin.v2.BigtableInstanceAdmin"
	perm(instances, "bigtable.instances.get", "GetInstance")
	perm(instances, "bigtable.instances.list", "ListInstances")
	perm(instances, "bigtable.clusters.get", "GetCluster")
	perm(instances, "bigtable.clusters.list", "ListClusters")
	perm(instances, "bigtable.appProfiles.get", "GetAppProfile")
	perm(instances, "bigtable.appProfiles.list", "ListAppProfiles")
	perm(instances, "bigtable.hotTablets.list", "ListHotTablets")
	perm(instances, "bigtable.logicalViews.get", "GetLogicalView")
	perm(instances, "bigtable.logicalViews.list", "ListLogicalViews")
	perm(instances, "bigtable.materializedViews.get", "GetMaterializedView")
	perm(instances, "bigtable.materializedViews.list", "ListMaterializedViews")
	perm(instances, "", "TestIamPermissions")
	perm(instances, "bigtable.clusters.get", "GetMemoryLayer")
	perm(instances, "bigtable.clusters.list", "ListMemoryLayers")
	perm(instances, "bigtable.instances.create", "CreateInstance")
	perm(instances, "bigtable.instances.update", "UpdateInstance", "PartialUpdateInstance")
	perm(instances, "bigtable.instances.delete", "DeleteInstance")
	perm(instances, "bigtable.clusters.create", "CreateCluster")
	perm(instances, "bigtable.clusters.update", "UpdateCluster", "PartialUpdateCluster", "UpdateMemoryLayer")
	perm(instances, "bigtable.clusters.delete", "DeleteCluster")
	perm(instances, "bigtable.appProfiles.create", "CreateAppProfile")
	perm(instances, "bigtable.appProfiles.update", "UpdateAppProfile")
	perm(instances, "bigtable.appProfiles.delete", "DeleteAppProfile")
	perm(instances, "bigtable.instances.getIamPolicy", "GetIamPolicy")
	perm(instances, "bigtable.instances.setIamPolicy", "SetIamPolicy")
	perm(instances, "bigtable.logicalViews.create", "CreateLogicalView")
	perm(instances, "bigtable.logicalViews.update", "UpdateLogicalView")
	perm(instances, "bigtable.logicalViews.delete", "DeleteLogicalView")
	perm(instances, "bigtable.materializedViews.create", "CreateMaterializedView")
	perm(instances, "bigtable.materializedViews.update", "UpdateMaterializedView")
	perm(instances, "bigtable.materializedViews.delete", "DeleteMaterializedView")

	// Long-running operations are named under their instance.
	const ops = "google.longrunning.Operations"
	perm(ops, "bigtable.instances.get", "ListOperations", "GetOperation", "WaitOperation")
	perm(ops, "bigtable.instances.update", "DeleteOperation", "CancelOperation")

	perm("grpc.health.v1.Health", "", "Check", "Watch", "List")

	// ebbtable's own admin service, by the nearest Bigtable permission.
	const ebb = "ebbtable.admin.v1.EbbAdmin"
	perm(ebb, "bigtable.tables.get", "GcStatus", "TtlStatus", "Progress", "GcPlan", "TtlPlan")
	perm(ebb, "bigtable.tables.readChangeStream", "Watch")
	perm(ebb, "bigtable.tables.update", "GcRun", "SetFamilyOptions", "GcRaise", "Ddl", "TtlRun", "TtlResume")
	perm(ebb, "bigtable.instances.update", "DebugClock")
	perm(ebb, "bigtable.clusters.update", "ReplicationDiff", "ReplicationLink")
	perm(ebb, "bigtable.clusters.get", "ReplicationStatus")
	perm(ebb, "", "Join", "Ready", "Pull", "Snapshot", "TableChunks", "TableCells", "RepairCells", "GcHold")

	// The scale-out cluster: nodes are Bigtable's clusters' nodes, tablets
	// are parts of tables.
	const cl = "ebbtable.cluster.v1.Cluster"
	perm(cl, "bigtable.clusters.get", "ListNodes")
	perm(cl, "bigtable.clusters.update", "DrainNode")
	perm(cl, "bigtable.tables.get", "ListTablets")
	perm(cl, "bigtable.tables.update", "SplitTablet", "MergeTablet", "MoveTablet", "IngestSpan", "IngestChanges", "ApplyReplicated", "ImportSnapshot")
	perm(cl, "bigtable.backups.create", "BackupRows")
	perm(cl, "bigtable.backups.restore", "RestoreRows")
	perm(cl, "bigtable.tables.readRows", "ViewPartial")

}

func levels() map[string]Role {
	out := map[string]Role{}
	for m, p := range permissions {
		if p == "" {
			continue
		}
		r := Need(m).Role
		if l, ok := out[p]; !ok || r < l {
			out[p] = r
		}
	}
	// Authorized views' and backups' counterparts of table permissions.
	for alt, of := range map[string]string{
		"bigtable.authorizedViews.readRows":      "bigtable.tables.readRows",
		"bigtable.authorizedViews.sampleRowKeys": "bigtable.tables.sampleRowKeys",
		"bigtable.authorizedViews.mutateRows":    "bigtable.tables.mutateRows",
		"bigtable.authorizedViews.getIamPolicy":  "bigtable.tables.getIamPolicy",
		"bigtable.authorizedViews.setIamPolicy":  "bigtable.tables.setIamPolicy",
		"bigtable.backups.getIamPolicy":          "bigtable.tables.getIamPolicy",
		"bigtable.backups.setIamPolicy":          "bigtable.tables.setIamPolicy",
	} {
		out[alt] = out[of]
	}
	return out
}
