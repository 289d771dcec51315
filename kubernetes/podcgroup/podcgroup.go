// Package podcgroup reads Kubernetes identity out of a cgroup path: the pod
// UID, QoS class and container ID that the kubelet's cgroup drivers (systemd
// and cgroupfs) and the container runtimes (containerd, CRI-O, docker) write
// into the directory names. It is pure string work on paths, so that pod labels
// work without the API server; names come from enrichment elsewhere.
package podcgroup

import (
	"regexp"
	"strings"

	"github.com/pmu-exporter/pmu_exporter/model"
)

// Identity is what a cgroup path says of its pod and container
// (model.PodIdentity).
type Identity = model.PodIdentity

var (
	// systemd driver: kubepods-burstable-pod<uid with _>.slice, kubepods-pod<uid>.slice;
	// a slice's name starts with its parent's (kubelet-kubepods-... under kind's kubelet.slice)
	systemdPod = regexp.MustCompile(`(?:^|-)kubepods(?:-(burstable|besteffort))?-pod([0-9a-fA-F_]{36})\.slice$`)
	systemdQoS = regexp.MustCompile(`(?:^|-)kubepods-(burstable|besteffort)\.slice$`)
	// cgroupfs driver: pod<uid>
	cgroupfsPod = regexp.MustCompile(`^pod([0-9a-fA-F-]{36})$`)
	// systemd scopes: cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope
	systemdContainer = regexp.MustCompile(`^(cri-containerd|crio|docker)-([0-9a-f]{64})\.scope$`)
	// cgroupfs: the bare id
	bareContainer = regexp.MustCompile(`^([0-9a-f]{64})$`)
)

var runtimes = map[string]string{"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker"}

// Parse reads the identity from a cgroup path (relative to the cgroup root or
// absolute, any prefix before the kubepods level, e.g. kind's kubelet.slice).
// ok is false when the path is not under a kubelet's pods.
func Parse(path string) (id Identity, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	start := -1
	for i, p := range parts {
		if p == "kubepods" || p == "kubepods.slice" || strings.HasSuffix(p, "-kubepods.slice") {
			start = i
			break
		}
	}
	if start < 0 {
		return Identity{}, false
	}
	id.QoS = "guaranteed" // pods directly under kubepods
	for _, p := range parts[start+1:] {
		switch {
		case p == "burstable" || p == "besteffort":
			id.QoS = p
		case systemdPod.MatchString(p):
			m := systemdPod.FindStringSubmatch(p)
			if m[1] != "" {
				id.QoS = m[1]
			}
			id.PodUID = strings.ReplaceAll(m[2], "_", "-")
		case systemdQoS.MatchString(p):
			id.QoS = systemdQoS.FindStringSubmatch(p)[1]
		case cgroupfsPod.MatchString(p):
			id.PodUID = cgroupfsPod.FindStringSubmatch(p)[1]
		case id.PodUID != "" && systemdContainer.MatchString(p):
			m := systemdContainer.FindStringSubmatch(p)
			id.Runtime, id.ContainerID = runtimes[m[1]], m[2]
		case id.PodUID != "" && bareContainer.MatchString(p):
			id.ContainerID = p
		}
	}
	return id, true
}
