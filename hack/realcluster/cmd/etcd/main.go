// Command etcd is etcd's server, built from its published Go module for the real-cluster
// test tier (docs/realcluster.md): the module's own main package sits behind replace
// directives that a dependent module cannot follow, so this one calls its entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
