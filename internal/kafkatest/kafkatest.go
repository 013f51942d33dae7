package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cluster is a kfake cluster whose brokers can be killed and restarted.
type Cluster struct {
	*kfake.Cluster

	mu    sync.Mutex
	lns   map[int]*trackingListener // by port
	ports []int                     // by node ID
	down  map[int32]bool
}

// New starts a cluster of n brokers, closed when tb ends. Topics are
// created on first use with partitions partitions each (a producer's
// metadata request creates them), and the brokers listen on loopback.
func New(tb testing.TB, n int, partitions int, opts ...kfake.Opt) *Cluster {
	tb.Helper()
	c, err := Start(n, partitions, opts...)
	if err != nil {
		tb.Fatalf("kfake cluster: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// Start is New for programs that are not tests (the benchmark): the
// caller closes the cluster.
func Start(n int, partitions int, opts ...kfake.Opt) (*Cluster, error) {
	c := &Cluster{lns: make(map[int]*trackingListener), down: make(map[int32]bool)}
	all := append([]kfake.Opt{
		kfake.NumBrokers(n),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(partitions),
		kfake.ListenFn(c.listen),
	}, opts...)
	kc, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, err
	}
	c.Cluster = kc
	for _, a := range kc.ListenAddrs() {
		_, p, _ := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		c.ports = append(c.ports, port)
	}
	return c, nil
}

// Seeds returns the brokers' addresses, for kgo.SeedBrokers.
func (c *Cluster) Seeds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := make([]string, len(c.ports))
	for i, p := range c.ports {
		s[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return s
}

// Kill takes broker node down as a crash would: its listener closes,
// every connection it had is cut, and its partitions get leaders among
// the others. Clients see their requests to it fail and move on.
func (c *Cluster) Kill(node int32) error {
	c.mu.Lock()
	if int(node) >= len(c.ports) || c.down[node] {
		c.mu.Unlock()
		return fmt.Errorf("kafkatest: broker %d is not up", node)
	}
	ln := c.lns[c.ports[node]]
	c.down[node] = true
	c.mu.Unlock()
	if err := c.RemoveNode(node); err != nil {
		return err
	}
	ln.cutAll()
	return nil
}

// Restart brings a killed broker back on its port. kfake then spreads
// partition leadership over the brokers again.
func (c *Cluster) Restart(node int32) error {
	c.mu.Lock()
	if !c.down[node] {
		c.mu.Unlock()
		return fmt.Errorf("kafkatest: broker %d is not down", node)
	}
	port := c.ports[node]
	c.mu.Unlock()
	var err error
	// The port was just released: binding it again may need a retry.
	for range 50 {
		if _, _, err = c.AddNode(node, port); err == nil {
			c.mu.Lock()
			delete(c.down, node)
			c.mu.Unlock()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

func (c *Cluster) listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	tl := &trackingListener{Listener: ln, conns: make(map[net.Conn]struct{})}
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(p)
	c.mu.Lock()
	c.lns[port] = tl
	c.mu.Unlock()
	return tl, nil
}

// trackingListener remembers the connections it accepted, so a kill can
// cut them: kfake closes only the listener of a removed broker.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

func (l *trackingListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	return l.Listener.Close()
}

func (l *trackingListener) cutAll() {
	_ = l.Close()
	l.mu.Lock()
	conns := make([]net.Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// CreateTopic creates topic with partitions partitions.
func CreateTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int32) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, rt := range resp.Topics {
		if rt.ErrorCode != 0 {
			msg := ""
			if rt.ErrorMessage != nil {
				msg = *rt.ErrorMessage
			}
			return fmt.Errorf("create topic %s: error code %d %s", rt.Topic, rt.ErrorCode, msg)
		}
	}
	return nil
}

// Collector consumes topics from their start and keeps every record. A
// collector that lives through broker kills may read some records twice
// (kfake moves leadership with a new epoch, and the consumer may fetch
// again from an earlier offset): what a topic holds is what a collector
// started after the faults reads.
type Collector struct {
	cl   *kgo.Client
	done chan struct{}

	mu      sync.Mutex
	records []*kgo.Record
	err     error
	notify  chan struct{}
}

// Collect starts consuming topics from their first offsets on a client
// of its own, until tb ends.
func Collect(tb testing.TB, seeds []string, topics ...string) *Collector {
	tb.Helper()
	c, err := StartCollector(seeds, topics...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// StartCollector is Collect for programs that are not tests: the caller
// closes it.
func StartCollector(seeds []string, topics ...string) (*Collector, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond),
		// Topics a test has not produced to yet exist once it does.
		kgo.AllowAutoTopicCreation(), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	c := &Collector{cl: cl, done: make(chan struct{}), notify: make(chan struct{})}
	go c.run()
	return c, nil
}

func (c *Collector) run() {
	defer close(c.done)
	for {
		fs := c.cl.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		var errs []error
		fs.EachError(func(t string, p int32, err error) {
			// A topic not created yet, a broker killed by the test: the
			// client retries; only record what is not one of those.
			if !kerr.IsRetriable(err) && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("fetch %s/%d: %w", t, p, err))
			}
		})
		var got []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
		c.mu.Lock()
		c.records = append(c.records, got...)
		if c.err == nil && len(errs) > 0 {
			c.err = errors.Join(errs...)
		}
		if len(got) > 0 {
			close(c.notify)
			c.notify = make(chan struct{})
		}
		c.mu.Unlock()
	}
}

// Records returns the records received so far, in arrival order (which is
// offset order within each partition).
func (c *Collector) Records() []*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*kgo.Record(nil), c.records...)
}

// Len is len(Records()).
func (c *Collector) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.records)
}

// Err returns the first fetch error that was not a retriable one.
func (c *Collector) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// WaitFor waits until at least n records have arrived or ctx ends.
func (c *Collector) WaitFor(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		have, ch := len(c.records), c.notify
		c.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d records arrived: %w", have, n, ctx.Err())
		}
	}
}

// Close stops consuming.
func (c *Collector) Close() {
	c.cl.Close()
	<-c.done
}

// EndOffsets returns the sum over topic's partitions of their high
// watermarks: the number of records the topic holds (no transactions
// write to these topics, so offsets have no gaps), and the partition
// count.
func EndOffsets(ctx context.Context, cl *kgo.Client, topic string) (records int64, partitions int, err error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return 0, 0, err
	}
	if len(mresp.Topics) != 1 || mresp.Topics[0].ErrorCode != 0 {
		return 0, 0, fmt.Errorf("metadata of %s: %+v", topic, mresp.Topics)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition, lp.Timestamp = p.Partition, -1 // latest
		lt.Partitions = append(lt.Partitions, lp)
	}
	req.Topics = append(req.Topics, lt)
	// kgo sends each partition's part to its leader and merges the answers.
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return 0, 0, fmt.Errorf("list offsets of %s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode)
			}
			records += p.Offset
			partitions++
		}
	}
	return records, partitions, nil
}
