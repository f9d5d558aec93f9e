package server

import (
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// instancesOf lists the instances a request names, for tokens limited to
// some instances: the instance of every resource name
// (projects/P/instances/I/…) in its string fields, those of singular
// nested messages included (UpdateInstance's instance, UpdateAppProfile's
// app profile), an instance_id (CreateInstance), or, for ebbtable's own
// admin requests, their instance field. Lists and maps are not walked: no
// Bigtable request names resources there, and a MutateRows of a million
// entries must not cost a walk.
func instancesOf(req any) []string {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if isAdminMessage(m) {
		if r, ok := m.(instanceRequest); ok && r.GetInstance() != "" {
			return []string{r.GetInstance()}
		}
		return nil
	}
	var out []string
	walkNames(m.ProtoReflect(), 0, &out)
	return out
}

func walkNames(m protoreflect.Message, depth int, out *[]string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() || fd.IsMap():
		case fd.Kind() == protoreflect.StringKind:
			if fd.Name() == "instance_id" {
				*out = append(*out, v.String())
			} else if in := instanceOfName(v.String()); in != "" {
				*out = append(*out, in)
			}
		case fd.Kind() == protoreflect.MessageKind && depth < 3:
			walkNames(v.Message(), depth+1, out)
		}
		return true
	})
}

// instanceOfName is the instance of a resource name, or "".
func instanceOfName(name string) string {
	name = strings.TrimPrefix(name, "operations/") // long-running operation names
	p := strings.SplitN(name, "/", 5)
	if len(p) >= 4 && p[0] == "projects" && p[2] == "instances" {
		return p[3]
	}
	return ""
}

// requestBytes is a request's size as the in-flight bound counts it.
func requestBytes(req any) int64 {
	if m, ok := req.(proto.Message); ok {
		return int64(proto.Size(m))
	}
	return 0
}
