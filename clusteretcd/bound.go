package clusteretcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A closed clientv3 client does not end a call on its own: the call's
// gRPC error is "the client connection is closing" (code Canceled), which
// clientv3's retry interceptor retries with backoff until the call's own
// context ends. A node shutting down would then wait out every running
// job's etcd timeout (10-30 s). So every KV and lease call of a member
// runs under its context cut short by the member's done context, which
// Abandon and Close cancel before they close the client.

// bound cuts a call's context short when done ends.
type bound struct{ done context.Context }

// bind returns ctx ended also when the member is done, and its release
// (to call when the call returns), or ErrClosed if the member is done.
func (b bound) bind(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if b.done.Err() != nil {
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.done, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// fail is err, or ErrClosed (wrapping it) when the member is done.
func (b bound) fail(err error) error {
	if err != nil && b.done.Err() != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}

// boundKV is a clientv3.KV whose calls end when the member is done.
type boundKV struct {
	clientv3.KV
	bound
}

func (kv boundKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	ctx, release, err := kv.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := kv.KV.Put(ctx, key, val, opts...)
	return r, kv.fail(err)
}

func (kv boundKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	ctx, release, err := kv.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := kv.KV.Get(ctx, key, opts...)
	return r, kv.fail(err)
}

func (kv boundKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	ctx, release, err := kv.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := kv.KV.Delete(ctx, key, opts...)
	return r, kv.fail(err)
}

func (kv boundKV) Compact(ctx context.Context, rev int64, opts ...clientv3.CompactOption) (*clientv3.CompactResponse, error) {
	ctx, release, err := kv.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := kv.KV.Compact(ctx, rev, opts...)
	return r, kv.fail(err)
}

func (kv boundKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	ctx, release, err := kv.bind(ctx)
	if err != nil {
		return clientv3.OpResponse{}, err
	}
	defer release()
	r, err := kv.KV.Do(ctx, op)
	return r, kv.fail(err)
}

// Txn collects the transaction; Commit runs it under the bound context
// (so a transaction built and never committed holds nothing).
func (kv boundKV) Txn(ctx context.Context) clientv3.Txn {
	return &boundTxn{kv: kv, ctx: ctx}
}

type boundTxn struct {
	kv          boundKV
	ctx         context.Context
	cmps        []clientv3.Cmp
	thens, elss []clientv3.Op
}

func (t *boundTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.cmps = append(t.cmps, cs...)
	return t
}

func (t *boundTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.thens = append(t.thens, ops...)
	return t
}

func (t *boundTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.elss = append(t.elss, ops...)
	return t
}

func (t *boundTxn) Commit() (*clientv3.TxnResponse, error) {
	ctx, release, err := t.kv.bind(t.ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := t.kv.KV.Txn(ctx).If(t.cmps...).Then(t.thens...).Else(t.elss...).Commit()
	return r, t.kv.fail(err)
}

// boundLease is a clientv3.Lease whose one-shot calls end when the member
// is done (KeepAlive's stream is not used by a member).
type boundLease struct {
	clientv3.Lease
	bound
}

func (l boundLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	ctx, release, err := l.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := l.Lease.Grant(ctx, ttl)
	return r, l.fail(err)
}

func (l boundLease) Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	ctx, release, err := l.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := l.Lease.Revoke(ctx, id)
	return r, l.fail(err)
}

func (l boundLease) TimeToLive(ctx context.Context, id clientv3.LeaseID, opts ...clientv3.LeaseOption) (*clientv3.LeaseTimeToLiveResponse, error) {
	ctx, release, err := l.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := l.Lease.TimeToLive(ctx, id, opts...)
	return r, l.fail(err)
}

func (l boundLease) KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	ctx, release, err := l.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	r, err := l.Lease.KeepAliveOnce(ctx, id)
	return r, l.fail(err)
}

// boundWatcher ends a progress request when the member is done (a watch
// ends with the member's stop already).
type boundWatcher struct {
	clientv3.Watcher
	bound
}

func (w boundWatcher) RequestProgress(ctx context.Context) error {
	ctx, release, err := w.bind(ctx)
	if err != nil {
		return err
	}
	defer release()
	return w.fail(w.Watcher.RequestProgress(ctx))
}
