package tenantio

import (
	"container/list"
	"context"
	"crypto/tls"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// server is one etcd server as Connections asks it: an address and a
// client identity.
type server struct {
	endpoint string
	tlsID    string
}

// Connections asks etcd servers for their status over connections kept
// from one look to the next, one per server and client identity, at most
// max of them (the least recently used closed first).
type Connections struct {
	etcd EtcdV3
	max  int

	mu    sync.Mutex
	lru   *list.List // of *connection, most recently used first
	conns map[server]*list.Element
}

type connection struct {
	server server
	client *clientv3.Client
	// inUse counts the looks under way: a connection in use is not closed.
	inUse int
	// dropped is set once the connection is forgotten: the last look
	// that uses it closes it.
	dropped bool
}

// NewConnections keeps at most kept connections of etcd's.
func NewConnections(etcd EtcdV3, kept int) *Connections {
	return &Connections{etcd: etcd, max: kept, lru: list.New(), conns: map[server]*list.Element{}}
}

// Probe asks endpoint for its status, as the client tlsConfig identifies
// (tlsID names that identity).
func (c *Connections) Probe(ctx context.Context, endpoint string, tlsConfig *tls.Config, tlsID string) error {
	conn, err := c.acquire(server{endpoint, tlsID}, tlsConfig)
	if err != nil {
		return &Unreachable{Endpoint: endpoint, Err: err}
	}
	reqCtx, cancel := context.WithTimeout(ctx, c.etcd.RequestTimeout())
	_, err = conn.client.Status(reqCtx, endpoint)
	cancel()
	// A connection that failed is not kept: the next look dials afresh
	// rather than wait out gRPC's growing reconnection backoff.
	c.release(conn, err != nil)
	if err != nil {
		return &Unreachable{Endpoint: endpoint, Err: err}
	}
	return nil
}

func (c *Connections) acquire(s server, tlsConfig *tls.Config) (*connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.conns[s]; ok {
		c.lru.MoveToFront(e)
		conn := e.Value.(*connection)
		conn.inUse++
		return conn, nil
	}
	cli, err := c.etcd.Client([]string{s.endpoint}, tlsConfig)
	if err != nil {
		return nil, err
	}
	conn := &connection{server: s, client: cli, inUse: 1}
	c.conns[s] = c.lru.PushFront(conn)
	for e := c.lru.Back(); e != nil && c.lru.Len() > c.max; {
		prev := e.Prev()
		if old := e.Value.(*connection); old.inUse == 0 {
			old.dropped = true
			_ = old.client.Close()
			delete(c.conns, old.server)
			c.lru.Remove(e)
		}
		e = prev
	}
	return conn, nil
}

// release ends a look; drop closes the connection (once no other look
// uses it) and forgets it.
func (c *Connections) release(conn *connection, drop bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn.inUse--
	if drop {
		conn.dropped = true
		if e, ok := c.conns[conn.server]; ok && e.Value.(*connection) == conn {
			delete(c.conns, conn.server)
			c.lru.Remove(e)
		}
	}
	if conn.dropped && conn.inUse == 0 {
		_ = conn.client.Close()
	}
}

// Open is how many connections are kept.
func (c *Connections) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Close closes every kept connection.
func (c *Connections) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.lru.Front(); e != nil; e = e.Next() {
		_ = e.Value.(*connection).client.Close()
	}
	c.lru.Init()
	c.conns = map[server]*list.Element{}
}
