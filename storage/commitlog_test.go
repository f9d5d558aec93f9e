package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestCommitLogAppendReadTruncate(t *testing.T) {
	st, err := SharedDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, err := OpenCommitLog(CommitLogOptions{Store: st, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	// Concurrent appends share groups; every record gets its own number.
	var wg sync.WaitGroup
	seqs := make([]uint64, 40)
	for i := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := l.Append([]byte(fmt.Sprintf("r%02d", i)))
			if err != nil {
				t.Error(err)
			}
			seqs[i] = s
			l.Finished(s)
		}()
	}
	wg.Wait()
	if got := l.CommittedThrough(); got != 40 {
		t.Fatalf("committed through %d, want 40", got)
	}
	// Another node's log of a similar name is not read.
	other, _ := OpenCommitLog(CommitLogOptions{Store: st, Node: "n10"})
	if _, err := other.Append([]byte("x")); err != nil {
		t.Fatal(err)
	}
	read := func(after uint64) map[uint64]string {
		out := map[uint64]string{}
		var last uint64
		err := ReadCommitLog(context.Background(), st, "n1", after, func(seq, _ uint64, repr []byte) error {
			if seq <= last {
				t.Errorf("record %d after %d", seq, last)
			}
			last = seq
			out[seq] = string(repr)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := read(0)
	if len(all) != 40 {
		t.Fatalf("read %d records, want 40", len(all))
	}
	for i, s := range seqs {
		if all[s] != fmt.Sprintf("r%02d", i) {
			t.Errorf("record %d = %q, want r%02d", s, all[s], i)
		}
	}
	if got := read(30); len(got) != 10 {
		t.Errorf("after 30: %d records", len(got))
	}
	// Truncation deletes whole objects up to the point; reopening
	// continues the numbering (from the catalog once the log is empty).
	if err := l.Truncate(40); err != nil {
		t.Fatal(err)
	}
	if got := read(0); len(got) != 0 {
		t.Errorf("after truncating: %d records", len(got))
	}
	if err := WriteCatalog(st, CommitCatalog{Node: "n1", Round: 1, Truncated: 40, Next: 41}); err != nil {
		t.Fatal(err)
	}
	l2, err := OpenCommitLog(CommitLogOptions{Store: st, Node: "n1", Tag: func() uint64 { return 7 }})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := l2.Append([]byte("next")); err != nil || s != 41 {
		t.Fatalf("first append after reopening: %d %v", s, err)
	}
	err = ReadCommitLog(context.Background(), st, "n1", 0, func(seq, tag uint64, repr []byte) error {
		if seq != 41 || tag != 7 || string(repr) != "next" {
			t.Errorf("record %d tag %d %q", seq, tag, repr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A refusing fence: the record is in the log but the append fails.
	fenced := errors.New("fence")
	l3, _ := OpenCommitLog(CommitLogOptions{Store: st, Node: "n1", Fence: func() error { return fenced }})
	if _, err := l3.Append([]byte("late")); !errors.Is(err, fenced) {
		t.Fatalf("append past the fence: %v", err)
	}
	if got := l3.CommittedThrough(); got != 42 {
		t.Errorf("a refused record still finishes: committed through %d", got)
	}
}

func TestCommitLogDamage(t *testing.T) {
	st, err := SharedDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l, _ := OpenCommitLog(CommitLogOptions{Store: st, Node: "n1"})
	for i := range 3 {
		if _, err := l.Append([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	objs, _ := listLog(st, "n1")
	if len(objs) != 3 {
		t.Fatalf("%d objects", len(objs))
	}
	count := func() (int, error) {
		n := 0
		err := ReadCommitLog(context.Background(), st, "n1", 0, func(uint64, uint64, []byte) error { n++; return nil })
		return n, err
	}
	// The newest object cut short (its writer died): skipped.
	if err := PutObject(st, objs[2].name, []byte("ebblog2\n\x03")); err != nil {
		t.Fatal(err)
	}
	if n, err := count(); n != 2 || err != nil {
		t.Fatalf("torn tail: %d records, %v", n, err)
	}
	// Reopening the log (the node restarted) removes the torn object,
	// keeps its numbers used, and the log goes on readable.
	l2, err := OpenCommitLog(CommitLogOptions{Store: st, Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := l2.Append([]byte{9}); err != nil || s != 4 {
		t.Fatalf("append after reopening: %d %v", s, err)
	}
	if n, err := count(); n != 3 || err != nil {
		t.Fatalf("after reopening: %d records, %v", n, err)
	}
	// An older one damaged: acknowledged writes may be missing.
	if err := PutObject(st, objs[0].name, []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if _, err := count(); !errors.Is(err, ErrLogDamaged) {
		t.Fatalf("damaged middle: %v", err)
	}
	// Catalogs: the newest readable one wins; older ones go.
	for r := uint64(1); r <= 3; r++ {
		if err := WriteCatalog(st, CommitCatalog{Node: "n1", Round: r, Next: r * 10}); err != nil {
			t.Fatal(err)
		}
	}
	cat, ok, err := ReadCatalog(st, "n1")
	if err != nil || !ok || cat.Round != 3 || cat.Next != 30 {
		t.Fatalf("catalog: %+v %v %v", cat, ok, err)
	}
	if cs, _ := listCatalogs(st, "n1"); len(cs) != 1 {
		t.Errorf("%d catalogs kept", len(cs))
	}
}
