// Package podmeta keeps the names of this node's pods — namespace, pod name and
// container names by container ID — from the Kubernetes API, through a
// client-go informer limited to the node (fieldSelector spec.nodeName), so
// that per-cgroup series can carry names instead of UIDs. Everything works
// without it: while the API server is unreachable, or a pod is not known yet,
// Names answers false and the series keep the UID and container ID that the
// cgroup path gives (package podcgroup).
package podmeta

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
)

const byUID = "uid"

// CommAnnotation selects a pod for the address sampler when
// --collector.comm.pods=annotated: "true", or "watchpoints" or "reuse" to
// choose what its threads' debug registers serve.
const CommAnnotation = "pmu-exporter.io/comm"

// Index answers pod names by UID from the informer's cache.
type Index struct {
	informer cache.SharedIndexInformer
	node     string
	errors   atomic.Uint64
	failing  atomic.Bool
	logger   *slog.Logger
}

// Client makes a clientset from kubeconfig, or from the in-cluster service
// account when kubeconfig is "".
// It is a REST client for core/v1 alone: client-go's clientsets register
// every API group's types and would triple the binary's size.
func Client(kubeconfig string) (rest.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.UserAgent = "pmu_exporter"
	cfg.Timeout = 30 * time.Second
	return RESTClient(cfg)
}

// RESTClient is a core/v1 REST client for cfg.
func RESTClient(cfg *rest.Config) (rest.Interface, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	metav1.AddToGroupVersion(scheme, corev1.SchemeGroupVersion)
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return rc, nil
}

// New watches the pods of node. Only the fields labels need are kept.
func New(client rest.Interface, node string, logger *slog.Logger) *Index {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	x := &Index{node: node, logger: logger}
	// Errors are counted here: client-go's reflector retries an unreachable
	// server inside its streaming list without telling its error handler.
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			obj := &corev1.PodList{}
			err := client.Get().Resource("pods").VersionedParams(&o, metav1.ParameterCodec).Do(ctx).Into(obj)
			x.observe(err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			o.Watch = true
			w, err := client.Get().Resource("pods").VersionedParams(&o, metav1.ParameterCodec).Watch(ctx)
			x.observe(err)
			return w, err
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{byUID: func(obj any) ([]string, error) {
		return []string{string(obj.(*corev1.Pod).UID)}, nil
	}})
	inf.SetTransform(trim)
	x.informer = inf
	return x
}

// observe counts a failed list or watch, and logs when the API server becomes
// unreachable and when it answers again (not every retry).
func (x *Index) observe(err error) {
	if err != nil {
		x.errors.Add(1)
		if !x.failing.Swap(true) {
			x.logger.Warn("cannot list or watch this node's pods; cgroup series keep pod UIDs and container IDs until it works", "node", x.node, "err", err)
		}
		return
	}
	if x.failing.Swap(false) {
		x.logger.Info("listing this node's pods again", "node", x.node)
	}
}

// trim keeps what Names reads, so the cache stays small on busy nodes.
func trim(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion}}
	if v, ok := p.Annotations[CommAnnotation]; ok {
		out.Annotations = map[string]string{CommAnnotation: v}
	}
	out.Status.ContainerStatuses = trimStatuses(p.Status.ContainerStatuses)
	out.Status.InitContainerStatuses = trimStatuses(p.Status.InitContainerStatuses)
	out.Status.EphemeralContainerStatuses = trimStatuses(p.Status.EphemeralContainerStatuses)
	return out, nil
}

func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	out := make([]corev1.ContainerStatus, 0, len(in))
	for _, s := range in {
		out = append(out, corev1.ContainerStatus{Name: s.Name, ContainerID: s.ContainerID})
	}
	return out
}

// Run runs the informer until ctx ends.
func (x *Index) Run(ctx context.Context) { x.informer.RunWithContext(ctx) }

// Synced says whether the first list has completed.
func (x *Index) Synced() bool { return x.informer.HasSynced() }

// WatchErrors counts failed lists and watches.
func (x *Index) WatchErrors() uint64 { return x.errors.Load() }

// Pods is the number of pods known.
func (x *Index) Pods() int { return len(x.informer.GetStore().ListKeys()) }

// Annotations are the values of annotation key on this node's pods that
// have it, by pod UID (key: CommAnnotation; the cache keeps no other).
func (x *Index) Annotations(key string) map[string]string {
	out := map[string]string{}
	for _, obj := range x.informer.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok {
			if v, ok := p.Annotations[key]; ok {
				out[string(p.UID)] = v
			}
		}
	}
	return out
}

// Names returns the namespace, pod name and (for a container's cgroup) the
// container name of id; container is "" for the pod's own cgroup. ok is false
// when the pod is unknown.
func (x *Index) Names(id podcgroup.Identity) (namespace, pod, container string, ok bool) {
	objs, err := x.informer.GetIndexer().ByIndex(byUID, id.PodUID)
	if err != nil || len(objs) == 0 {
		return "", "", "", false
	}
	p := objs[0].(*corev1.Pod)
	if id.ContainerID == "" {
		return p.Namespace, p.Name, "", true
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			// <runtime>://<id>, e.g. containerd://4f2a...
			if _, cid, found := strings.Cut(s.ContainerID, "://"); found && cid == id.ContainerID {
				return p.Namespace, p.Name, s.Name, true
			}
		}
	}
	// A container the status does not list yet (just started): the pod's
	// names, and the ID rather than a wrong name.
	return p.Namespace, p.Name, id.ContainerID, true
}
