package clusteretcd

import clientv3 "go.etcd.io/etcd/client/v3"

func clientLease(id int64) clientv3.LeaseID { return clientv3.LeaseID(id) }
