package podmeta

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/pmu-exporter/pmu_exporter/kubernetes/podcgroup"
)

const ctrID = "4f2a0000000000000000000000000000000000000000000000000000000000aa"

func pod(name, uid string, containers ...string) corev1.Pod {
	p := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(uid), ResourceVersion: "1"},
		Spec:       corev1.PodSpec{NodeName: "node-a"}}
	for i := 0; i+1 < len(containers); i += 2 {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: containers[i], ContainerID: containers[i+1]})
	}
	return p
}

// apiServer answers the pod list and watch (streaming lists included) the way
// the API server does over HTTP, and records the field selectors it was asked for.
type apiServer struct {
	mu        sync.Mutex
	selectors []string
	list      []corev1.Pod
	added     corev1.Pod
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/api/v1/pods" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.selectors = append(s.selectors, r.URL.Query().Get("fieldSelector"))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("watch") != "true" {
		json.NewEncoder(w).Encode(corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
			ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: s.list})
		return
	}
	enc := json.NewEncoder(w)
	if r.URL.Query().Get("sendInitialEvents") == "true" {
		// A streaming list: the pods, then a bookmark marking the end of
		// the initial events.
		for _, p := range s.list {
			enc.Encode(metav1.WatchEvent{Type: "ADDED", Object: runtimeRaw(p)})
		}
		end := corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
		enc.Encode(metav1.WatchEvent{Type: "BOOKMARK", Object: runtimeRaw(end)})
	}
	enc.Encode(metav1.WatchEvent{Type: "ADDED", Object: runtimeRaw(s.added)})
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func runtimeRaw(p corev1.Pod) (raw runtime.RawExtension) {
	b, _ := json.Marshal(p)
	raw.Raw = b
	return raw
}

func TestNamesFromAPIServer(t *testing.T) {
	api := &apiServer{
		list:  []corev1.Pod{pod("cart-7f9", "0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c", "app", "containerd://"+ctrID, "sidecar", "containerd://beef")},
		added: pod("late", "11111111-2222-3333-4444-555555555555"),
	}
	api.list[0].Annotations = map[string]string{CommAnnotation: "true", "other": "dropped"}
	api.added.Annotations = map[string]string{CommAnnotation: "false"}
	api.added.ResourceVersion = "2"
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close) // after the index stops watching: Close waits for open watches
	x := watching(t, srv.URL)
	deadline := time.Now().Add(10 * time.Second)
	for !(x.Synced() && x.Pods() == 2) {
		if time.Now().After(deadline) {
			t.Fatalf("synced %v with %d pods", x.Synced(), x.Pods())
		}
		time.Sleep(10 * time.Millisecond)
	}
	api.mu.Lock()
	for _, s := range api.selectors {
		if s != "spec.nodeName=node-a" {
			t.Errorf("asked the API server for pods with fieldSelector %q", s)
		}
	}
	api.mu.Unlock()
	// The pods selected for the address sampler by annotation.
	if got := x.Annotations(CommAnnotation); len(got) != 2 || got["0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c"] != "true" || got["11111111-2222-3333-4444-555555555555"] != "false" {
		t.Errorf("annotations by pod %v, want the cart pod's true and the late pod's false", got)
	}
	for _, c := range []struct {
		id           podcgroup.Identity
		ns, pod, ctr string
		ok           bool
	}{
		{podcgroup.Identity{PodUID: "0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c", ContainerID: ctrID}, "shop", "cart-7f9", "app", true},
		{podcgroup.Identity{PodUID: "0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c"}, "shop", "cart-7f9", "", true},
		// Not in the status yet: the pod's names and the ID.
		{podcgroup.Identity{PodUID: "0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c", ContainerID: "abc"}, "shop", "cart-7f9", "abc", true},
		{podcgroup.Identity{PodUID: "11111111-2222-3333-4444-555555555555"}, "shop", "late", "", true},
		{podcgroup.Identity{PodUID: "99999999-2222-3333-4444-555555555555"}, "", "", "", false},
	} {
		ns, p, ctr, ok := x.Names(c.id)
		if ns != c.ns || p != c.pod || ctr != c.ctr || ok != c.ok {
			t.Errorf("Names(%+v) = %q %q %q %v, want %q %q %q %v", c.id, ns, p, ctr, ok, c.ns, c.pod, c.ctr, c.ok)
		}
	}
}

// TestAPIServerUnreachable: nothing syncs, errors are counted, Names answers
// false, and nothing blocks.
func TestAPIServerUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // a closed port
	x := watching(t, url)
	deadline := time.Now().Add(10 * time.Second)
	for x.WatchErrors() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no list error counted against a closed port")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if x.Synced() {
		t.Error("synced without an API server")
	}
	if _, _, _, ok := x.Names(podcgroup.Identity{PodUID: "0d7a6b2c-3e41-4f5a-9b8c-1d2e3f4a5b6c"}); ok {
		t.Error("names without an API server")
	}
}

// watching runs an Index of node-a's pods against the API server at url until
// the test ends.
func watching(t *testing.T, url string) *Index {
	t.Helper()
	client, err := RESTClient(&rest.Config{Host: url})
	if err != nil {
		t.Fatal(err)
	}
	x := New(client, "node-a", nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go x.Run(ctx)
	return x
}
