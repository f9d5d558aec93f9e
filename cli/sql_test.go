package cli

import "testing"

// TestSQLCommand runs `ebbtable sql` as a subprocess against a server
// subprocess (the shared one, in an instance of its own): an aligned
// table, JSON lines, parameters, and a bad query refused with its
// position.
func TestSQLCommand(t *testing.T) {
	t.Parallel()
	addr, inst := sharedServer(t)
	at := func(args ...string) []string { return append(args, "--addr", addr, "--instance", inst) }
	writeFixed(t, addr, inst)

	r := ebbtable(t, at("sql", "SELECT _key, cf['name'] AS name, zz FROM fixed WHERE _key BETWEEN 'user#1' AND 'user#2'")...).mustSucceed(t, "sql")
	wantOutput(t, "sql table", r.stdout, `_key     name       zz
-------  ---------  ----------------
user#1   Ada        {x: b"\x00\x01"}
user#10  Tim "Ten"  {}
user#2   Bob        {}
`)
	r = ebbtable(t, at("sql", "--json", "SELECT _key, cf['name'] AS name, zz, COUNT(*) OVER () AS n FROM fixed")...)
	wantFailure(t, "sql with a window function", r, 1, "InvalidArgument")

	r = ebbtable(t, at("sql", "--json", "SELECT CAST(cf['name'] AS STRING) AS name, zz, 2 AS two, [1, 2] FROM fixed WHERE _key = @k", "--param", "k=STRING:user#1")...).mustSucceed(t, "sql --json")
	wantOutput(t, "sql --json", r.stdout, `{"name":"Ada","zz":{"x":"\u0000\u0001"},"two":2,"$4":[1,2]}
`)
	r = ebbtable(t, at("sql", "--json", "SELECT b'\\xff' AS raw")...).mustSucceed(t, "sql --json bytes")
	wantOutput(t, "sql --json bytes", r.stdout, `{"raw":{"base64":"/w=="}}
`)
	r = ebbtable(t, at("sql", "SELECT COUNT(*) AS n FROM fixed WHERE STARTS_WITH(_key, @p)", "--param", "p=BYTES:user#")...).mustSucceed(t, "sql count")
	wantOutput(t, "sql count", r.stdout, "n\n-\n4\n")

	wantFailure(t, "bad sql", ebbtable(t, at("sql", "SELECT _key FROM fixed WHERE")...), 1, "InvalidArgument", "1:29")
	wantFailure(t, "bad param", ebbtable(t, at("sql", "SELECT 1", "--param", "p=WHAT:1")...), 2, "unknown type")
	wantFailure(t, "no query", ebbtable(t, at("sql")...), 2)
}
