//go:build !amd64

package host

var cpuidFunc CPUIDFunc
