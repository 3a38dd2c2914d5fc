//go:build tools

// Package realcluster pins the real control plane's components (docs/realcluster.md): this
// file only names their main packages so that go.mod and go.sum keep what builds them.
package realcluster

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
