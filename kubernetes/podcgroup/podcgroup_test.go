package podcgroup

import "testing"

const (
	uid  = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"
	uidU = "0b1c2d3e_4f50_6172_8394_a5b6c7d8e9f0" // systemd escapes - as _
	cid  = "3f7c9e2a1b4d6f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708"
)

func TestParse(t *testing.T) {
	cases := []struct {
		path string
		want Identity
		ok   bool
	}{
		// systemd driver, each runtime and QoS class
		{"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Identity{PodUID: uid, QoS: "burstable", ContainerID: cid, Runtime: "containerd"}, true},
		{"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidU + ".slice/crio-" + cid + ".scope",
			Identity{PodUID: uid, QoS: "besteffort", ContainerID: cid, Runtime: "cri-o"}, true},
		{"/kubepods.slice/kubepods-pod" + uidU + ".slice/docker-" + cid + ".scope",
			Identity{PodUID: uid, QoS: "guaranteed", ContainerID: cid, Runtime: "docker"}, true},
		// the pod level itself, and the QoS level
		{"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice", Identity{PodUID: uid, QoS: "burstable"}, true},
		{"/kubepods.slice/kubepods-besteffort.slice", Identity{QoS: "besteffort"}, true},
		// CRI-O's conmon scope is not a container
		{"/kubepods.slice/kubepods-pod" + uidU + ".slice/crio-conmon-" + cid + ".scope", Identity{PodUID: uid, QoS: "guaranteed"}, true},
		// cgroupfs driver
		{"/kubepods/burstable/pod" + uid + "/" + cid, Identity{PodUID: uid, QoS: "burstable", ContainerID: cid}, true},
		{"/kubepods/besteffort/pod" + uid + "/" + cid, Identity{PodUID: uid, QoS: "besteffort", ContainerID: cid}, true},
		{"/kubepods/pod" + uid + "/" + cid, Identity{PodUID: uid, QoS: "guaranteed", ContainerID: cid}, true},
		// kind and other --cgroup-root prefixes
		{"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope",
			Identity{PodUID: uid, QoS: "burstable", ContainerID: cid, Runtime: "containerd"}, true},
		{"/docker/abc/kubepods/burstable/pod" + uid + "/" + cid, Identity{PodUID: uid, QoS: "burstable", ContainerID: cid}, true},
		// not pods
		{"/system.slice/containerd.service", Identity{}, false},
		{"/", Identity{}, false},
		{"/user.slice/user-1000.slice/session-2.scope", Identity{}, false},
		// a container id without a pod above it is not taken
		{"/kubepods/" + cid, Identity{QoS: "guaranteed"}, true},
	}
	for _, c := range cases {
		got, ok := Parse(c.path)
		if got != c.want || ok != c.ok {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, %v", c.path, got, ok, c.want, c.ok)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidU + ".slice/cri-containerd-" + cid + ".scope")
	f.Add("/kubepods/pod" + uid + "/" + cid)
	f.Fuzz(func(t *testing.T, p string) {
		id, ok := Parse(p)
		if !ok && id != (Identity{}) {
			t.Errorf("not a pod path but identity %+v", id)
		}
		if id.ContainerID != "" && id.PodUID == "" {
			t.Errorf("container %s without a pod", id.ContainerID)
		}
	})
}
