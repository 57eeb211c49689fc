package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// providerName is the name the cloud registers under (--cloud-provider=fake).
const providerName = "fake"

func init() {
	cloudprovider.RegisterCloudProvider(providerName, newCloud)
}

// cloudConfig is the part of examples/fake-cloud's cloud-config this cloud reads;
// other fields (instances, instancesShape) are ignored, so both CCMs take the same file.
type cloudConfig struct {
	NodesAreInstances bool `json:"nodesAreInstances"`
	Defaults          struct {
		InstanceType string `json:"instanceType"`
		Zone         string `json:"zone"`
		Region       string `json:"region"`
	} `json:"defaults"`
	LatencyMs int64 `json:"latencyMs"`
}

// method numbers index the bounded call counter.
const (
	mInstanceExists = iota
	mInstanceShutdown
	mInstanceMetadata
	mGetLoadBalancer
	mEnsureLoadBalancer
	mUpdateLoadBalancer
	mEnsureLoadBalancerDeleted
	mListRoutes
	mCreateRoute
	mDeleteRoute
	mCount
)

var methodNames = [mCount]string{
	"InstanceExists", "InstanceShutdown", "InstanceMetadata",
	"GetLoadBalancer", "EnsureLoadBalancer", "UpdateLoadBalancer", "EnsureLoadBalancerDeleted",
	"ListRoutes", "CreateRoute", "DeleteRoute",
}

// metricMethods are the method labels of ccm_cloud_requests_total: the Rust trait's
// method names, so the benchmark reads both CCMs' cloud calls the same way.
var metricMethods = [mCount]string{
	"instance_exists", "instance_shutdown", "instance_metadata",
	"get_load_balancer", "ensure_load_balancer", "update_load_balancer", "ensure_load_balancer_deleted",
	"list_routes", "create_route", "delete_route",
}

// The metrics our CCM exports for the same things (ccm-core's ccm_cloud_requests_total
// and examples/fake-cloud's fake_cloud_*), so the benchmark driver reads both alike.
var (
	cloudRequests = metrics.NewCounterVec(&metrics.CounterOpts{
		Name:           "ccm_cloud_requests_total",
		Help:           "Cloud provider calls, by provider, method and result.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"provider", "method", "result"})
	duplicateRouteCreates = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "fake_cloud_duplicate_route_creates_total",
		Help:           "Route creates the fake cloud refused because the route existed.",
		StabilityLevel: metrics.ALPHA,
	})
	redundantLoadBalancerUpdates = metrics.NewCounter(&metrics.CounterOpts{
		Name:           "fake_cloud_redundant_load_balancer_updates_total",
		Help:           "Load balancer updates that gave a load balancer the host set (Node name to provider ID) it already had.",
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

// registerMetrics registers the cloud's metrics in the registry /metrics serves (once).
func (c *cloud) registerMetrics() {
	registerOnce.Do(func() { c.registerMetricsNow() })
}

func (c *cloud) registerMetricsNow() {
	legacyregistry.MustRegister(cloudRequests, duplicateRouteCreates, redundantLoadBalancerUpdates)
	legacyregistry.RawMustRegister(
		metrics.NewGaugeFunc(&metrics.GaugeOpts{
			Name:           "fake_cloud_load_balancers",
			Help:           "Load balancers in the fake cloud.",
			StabilityLevel: metrics.ALPHA,
		}, func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			return float64(len(c.loadBalancers))
		}),
		metrics.NewGaugeFunc(&metrics.GaugeOpts{
			Name:           "fake_cloud_load_balancer_hosts_min",
			Help:           "The fewest Nodes any load balancer of the fake cloud points at (0 without any).",
			StabilityLevel: metrics.ALPHA,
		}, func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			min := -1
			for _, lb := range c.loadBalancers {
				if min < 0 || len(lb.nodes) < min {
					min = len(lb.nodes)
				}
			}
			if min < 0 {
				return 0
			}
			return float64(min)
		}),
	)
}

// done records a finished call's result in ccm_cloud_requests_total.
func done(m int, err error) {
	result := "success"
	if err != nil {
		result = "error"
	}
	cloudRequests.WithLabelValues(providerName, metricMethods[m], result).Inc()
}

type instance struct {
	name      string
	addresses []v1.NodeAddress
}

type loadBalancer struct {
	clusterName string
	service     string
	// nodes are the sorted Node names; providerIDs their spec.providerID (empty when
	// unset), in the same order: with the names, the host set an update is compared by.
	nodes       []string
	providerIDs []string
	ingressIP   string
}

type route struct {
	clusterName string
	r           cloudprovider.Route
}

// cloud is an in-memory cloud: every Node name is an instance (created on first
// sight), load balancers and routes are stored; every call waits the latency.
// All maps are behind one mutex; the call counter is a fixed array of atomics.
type cloud struct {
	cfg     cloudConfig
	latency time.Duration
	calls   [mCount]atomic.Uint64

	mu                   sync.Mutex
	instances            map[string]*instance
	gone                 map[string]bool
	nextInstanceIP       uint32
	loadBalancers        map[string]*loadBalancer
	nextIngressIP        uint32
	routes               map[string]*route // by cluster + "/" + name
	duplicateRouteCreate uint64
	// redundantLBUpdates counts UpdateLoadBalancer calls that gave a load balancer the
	// host set it had.
	redundantLBUpdates uint64
	// lastNodes and lastProviderIDs are the lists last given to a load balancer; those
	// given the same lists share them (as examples/fake-cloud does).
	lastNodes       []string
	lastProviderIDs []string
}

func newCloud(r io.Reader) (cloudprovider.Interface, error) {
	c := &cloud{
		instances:     map[string]*instance{},
		gone:          map[string]bool{},
		loadBalancers: map[string]*loadBalancer{},
		routes:        map[string]*route{},
	}
	c.cfg.Defaults.InstanceType = "fake-small"
	c.cfg.Defaults.Zone = "zone-a"
	c.cfg.Defaults.Region = "region-1"
	c.cfg.NodesAreInstances = true
	if r != nil {
		data, err := io.ReadAll(r)
		if err != nil {
			return nil, fmt.Errorf("reading the cloud-config: %w", err)
		}
		if err := yaml.Unmarshal(data, &c.cfg); err != nil {
			return nil, fmt.Errorf("parsing the cloud-config: %w", err)
		}
	}
	if !c.cfg.NodesAreInstances {
		return nil, fmt.Errorf("the Go reference cloud supports only nodesAreInstances: true")
	}
	if c.cfg.LatencyMs < 0 {
		return nil, fmt.Errorf("latencyMs must not be negative")
	}
	c.latency = time.Duration(c.cfg.LatencyMs) * time.Millisecond
	return c, nil
}

// call counts a call and waits the injected latency.
func (c *cloud) call(ctx context.Context, m int) error {
	c.calls[m].Add(1)
	if c.latency > 0 {
		t := time.NewTimer(c.latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (c *cloud) Initialize(_ cloudprovider.ControllerClientBuilder, stop <-chan struct{}) {
	c.registerMetrics()
	// Logs the call counts every 30 s (a bounded summary, no growing log).
	go func() {
		t := time.NewTicker(30 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				var b strings.Builder
				for i := range c.calls {
					fmt.Fprintf(&b, " %s=%d", methodNames[i], c.calls[i].Load())
				}
				c.mu.Lock()
				dup, redundant := c.duplicateRouteCreate, c.redundantLBUpdates
				c.mu.Unlock()
				klog.V(2).Infof("fake cloud calls:%s duplicateRouteCreates=%d redundantLoadBalancerUpdates=%d", b.String(), dup, redundant)
			}
		}
	}()
}

func (c *cloud) LoadBalancer() (cloudprovider.LoadBalancer, bool) { return c, true }
func (c *cloud) Instances() (cloudprovider.Instances, bool)       { return nil, false }
func (c *cloud) InstancesV2() (cloudprovider.InstancesV2, bool)   { return c, true }
func (c *cloud) Zones() (cloudprovider.Zones, bool)               { return nil, false }
func (c *cloud) Clusters() (cloudprovider.Clusters, bool)         { return nil, false }
func (c *cloud) Routes() (cloudprovider.Routes, bool)             { return c, true }
func (c *cloud) ProviderName() string                             { return providerName }
func (c *cloud) HasClusterID() bool                               { return true }

// ----- instances -----

// instanceLocked returns the instance for a Node (by provider ID when set, else
// by name), creating it on first sight unless it was removed. c.mu is held.
func (c *cloud) instanceLocked(node *v1.Node) (*instance, error) {
	name := node.Name
	if pid := node.Spec.ProviderID; pid != "" {
		id, ok := strings.CutPrefix(pid, providerName+"://")
		if !ok || id == "" {
			return nil, fmt.Errorf("invalid provider ID %q", pid)
		}
		name = id
	}
	if name == "" {
		return nil, nil
	}
	if inst, ok := c.instances[name]; ok {
		return inst, nil
	}
	if c.gone[name] {
		return nil, nil
	}
	c.nextInstanceIP++
	ip := netip.AddrFrom4([4]byte{10, 0, 0, 0})
	ip = addIP(ip, c.nextInstanceIP)
	inst := &instance{name: name, addresses: []v1.NodeAddress{
		{Type: v1.NodeInternalIP, Address: ip.String()},
		{Type: v1.NodeHostName, Address: name},
	}}
	c.instances[name] = inst
	return inst, nil
}

func addIP(base netip.Addr, n uint32) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func (c *cloud) InstanceExists(ctx context.Context, node *v1.Node) (r0 bool, err error) {
	defer func() { done(mInstanceExists, err) }()
	if err := c.call(ctx, mInstanceExists); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, err := c.instanceLocked(node)
	return inst != nil, err
}

func (c *cloud) InstanceShutdown(ctx context.Context, node *v1.Node) (r0 bool, err error) {
	defer func() { done(mInstanceShutdown, err) }()
	if err := c.call(ctx, mInstanceShutdown); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, err := c.instanceLocked(node)
	if err != nil {
		return false, err
	}
	if inst == nil {
		return false, cloudprovider.InstanceNotFound
	}
	return false, nil
}

func (c *cloud) InstanceMetadata(ctx context.Context, node *v1.Node) (r0 *cloudprovider.InstanceMetadata, err error) {
	defer func() { done(mInstanceMetadata, err) }()
	if err := c.call(ctx, mInstanceMetadata); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inst, err := c.instanceLocked(node)
	if err != nil {
		return nil, err
	}
	if inst == nil {
		return nil, cloudprovider.InstanceNotFound
	}
	return &cloudprovider.InstanceMetadata{
		ProviderID:    providerName + "://" + inst.name,
		InstanceType:  c.cfg.Defaults.InstanceType,
		NodeAddresses: append([]v1.NodeAddress(nil), inst.addresses...),
		Zone:          c.cfg.Defaults.Zone,
		Region:        c.cfg.Defaults.Region,
	}, nil
}

// ----- load balancers -----

func serviceKey(s *v1.Service) string { return s.Namespace + "/" + s.Name }

// hosts returns the host set of nodes: their sorted names, and their provider IDs
// (spec.providerID, empty when unset) in the same order; each list is c.lastNodes or
// c.lastProviderIDs when it is the same, so load balancers given the same Nodes share
// them. Call with c.mu held.
func (c *cloud) hosts(nodes []*v1.Node) (names, providerIDs []string) {
	sorted := make([]*v1.Node, 0, len(nodes))
	for _, n := range nodes {
		if n.Name != "" {
			sorted = append(sorted, n)
		}
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	names = make([]string, 0, len(sorted))
	providerIDs = make([]string, 0, len(sorted))
	for i, n := range sorted {
		if i > 0 && n.Name == sorted[i-1].Name {
			continue
		}
		names = append(names, n.Name)
		providerIDs = append(providerIDs, n.Spec.ProviderID)
	}
	if slices.Equal(names, c.lastNodes) {
		names = c.lastNodes
	} else {
		c.lastNodes = names
	}
	if slices.Equal(providerIDs, c.lastProviderIDs) {
		providerIDs = c.lastProviderIDs
	} else {
		c.lastProviderIDs = providerIDs
	}
	return names, providerIDs
}

func (c *cloud) GetLoadBalancerName(_ context.Context, _ string, service *v1.Service) string {
	return cloudprovider.DefaultLoadBalancerName(service)
}

func (c *cloud) GetLoadBalancer(ctx context.Context, clusterName string, service *v1.Service) (r0 *v1.LoadBalancerStatus, r1 bool, err error) {
	defer func() { done(mGetLoadBalancer, err) }()
	if err := c.call(ctx, mGetLoadBalancer); err != nil {
		return nil, false, err
	}
	name := cloudprovider.DefaultLoadBalancerName(service)
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.loadBalancers[name]
	if !ok || lb.clusterName != clusterName {
		return nil, false, nil
	}
	return lb.status(), true, nil
}

func (lb *loadBalancer) status() *v1.LoadBalancerStatus {
	return &v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: lb.ingressIP}}}
}

func (c *cloud) EnsureLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (r0 *v1.LoadBalancerStatus, err error) {
	defer func() { done(mEnsureLoadBalancer, err) }()
	if err := c.call(ctx, mEnsureLoadBalancer); err != nil {
		return nil, err
	}
	if len(service.Spec.Ports) == 0 {
		return nil, fmt.Errorf("service %s has no ports: a load balancer needs at least one", serviceKey(service))
	}
	name := cloudprovider.DefaultLoadBalancerName(service)
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.loadBalancers[name]
	if ok && lb.clusterName != clusterName {
		return nil, fmt.Errorf("load balancer %s belongs to cluster %q", name, lb.clusterName)
	}
	if !ok {
		c.nextIngressIP++
		lb = &loadBalancer{
			clusterName: clusterName,
			ingressIP:   addIP(netip.AddrFrom4([4]byte{100, 64, 0, 0}), c.nextIngressIP).String(),
		}
		c.loadBalancers[name] = lb
	}
	lb.service = serviceKey(service)
	lb.nodes, lb.providerIDs = c.hosts(nodes)
	return lb.status(), nil
}

func (c *cloud) UpdateLoadBalancer(ctx context.Context, clusterName string, service *v1.Service, nodes []*v1.Node) (err error) {
	defer func() { done(mUpdateLoadBalancer, err) }()
	if err := c.call(ctx, mUpdateLoadBalancer); err != nil {
		return err
	}
	name := cloudprovider.DefaultLoadBalancerName(service)
	c.mu.Lock()
	defer c.mu.Unlock()
	lb, ok := c.loadBalancers[name]
	if !ok || lb.clusterName != clusterName {
		return fmt.Errorf("load balancer %s not found", name)
	}
	names, providerIDs := c.hosts(nodes)
	// The host set (name → provider ID) it has: the call changed nothing. Both CCMs
	// decide an update on this comparison, so it was not needed.
	if slices.Equal(names, lb.nodes) && slices.Equal(providerIDs, lb.providerIDs) {
		c.redundantLBUpdates++
		redundantLoadBalancerUpdates.Inc()
	}
	lb.nodes, lb.providerIDs = names, providerIDs
	return nil
}

func (c *cloud) EnsureLoadBalancerDeleted(ctx context.Context, clusterName string, service *v1.Service) (err error) {
	defer func() { done(mEnsureLoadBalancerDeleted, err) }()
	if err := c.call(ctx, mEnsureLoadBalancerDeleted); err != nil {
		return err
	}
	name := cloudprovider.DefaultLoadBalancerName(service)
	c.mu.Lock()
	defer c.mu.Unlock()
	if lb, ok := c.loadBalancers[name]; ok && lb.clusterName == clusterName {
		delete(c.loadBalancers, name)
	}
	return nil
}

// ----- routes -----

func (c *cloud) ListRoutes(ctx context.Context, clusterName string) (r0 []*cloudprovider.Route, err error) {
	defer func() { done(mListRoutes, err) }()
	if err := c.call(ctx, mListRoutes); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*cloudprovider.Route, 0, len(c.routes))
	for _, r := range c.routes {
		if r.clusterName != clusterName {
			continue
		}
		rc := r.r
		// A route to a removed instance is a blackhole; every other Node name is an
		// instance (created on first sight), as in examples/fake-cloud.
		rc.Blackhole = c.gone[string(rc.TargetNode)]
		out = append(out, &rc)
	}
	return out, nil
}

func (c *cloud) CreateRoute(ctx context.Context, clusterName string, nameHint string, r *cloudprovider.Route) (err error) {
	defer func() { done(mCreateRoute, err) }()
	if err := c.call(ctx, mCreateRoute); err != nil {
		return err
	}
	name := clusterName + "-" + nameHint
	if strings.Contains(r.DestinationCIDR, ":") {
		name += "-v6"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, old := range c.routes {
		if old.clusterName == clusterName && (old.r.Name == name || old.r.DestinationCIDR == r.DestinationCIDR) {
			c.duplicateRouteCreate++
			duplicateRouteCreates.Inc()
			return fmt.Errorf("route %s for %s already exists", name, r.DestinationCIDR)
		}
	}
	stored := *r
	stored.Name = name
	stored.Blackhole = false
	if !stored.EnableNodeAddresses {
		stored.TargetNodeAddresses = nil
	}
	c.routes[clusterName+"/"+name] = &route{clusterName: clusterName, r: stored}
	return nil
}

func (c *cloud) DeleteRoute(ctx context.Context, clusterName string, r *cloudprovider.Route) (err error) {
	defer func() { done(mDeleteRoute, err) }()
	if err := c.call(ctx, mDeleteRoute); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	key := clusterName + "/" + r.Name
	if _, ok := c.routes[key]; !ok {
		return fmt.Errorf("route %q not found", r.Name)
	}
	delete(c.routes, key)
	return nil
}
