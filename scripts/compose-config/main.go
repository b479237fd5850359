// compose-config loads a compose file the way `docker compose config` does (compose-go, the library the
// compose plugin is built on: interpolation, the compose-spec JSON Schema, normalization, dependency
// checks) and prints the resolved model as YAML. No Docker engine is involved.
//
//	compose-config docker-compose.yml > resolved.yaml
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: compose-config FILE")
		os.Exit(2)
	}
	options, err := cli.NewProjectOptions([]string{os.Args[1]}, cli.WithOsEnv, cli.WithDotEnv)
	if err == nil {
		var out []byte
		project, loadErr := cli.ProjectFromOptions(context.Background(), options)
		if err = loadErr; err == nil {
			if out, err = project.MarshalYAML(); err == nil {
				os.Stdout.Write(out)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-config:", err)
		os.Exit(1)
	}
}
