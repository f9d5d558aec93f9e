// Package auth decides who may call what: bearer tokens read from a token
// file, each with one of Bigtable's roles (viewer, reader, user, admin) and
// optionally limited to some instances; a separate peer credential for
// cluster-to-cluster calls that no client token can stand in for; the
// table of what each gRPC method needs (a role, and an IAM permission); and
// how IAM bindings grant permissions to a token's members. It knows nothing
// of gRPC itself: the server extracts the credentials and resource names,
// asks Check, and hands the stored policies to Grants.
package auth
