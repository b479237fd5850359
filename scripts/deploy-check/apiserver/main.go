// kube-apiserver, built from the published k8s.io/kubernetes module: its own main package
// (cmd/kube-apiserver/apiserver.go) cannot be `go install`ed because k8s.io/kubernetes replaces its
// k8s.io/* dependencies with ./staging directories, so this module maps them to the published modules.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
