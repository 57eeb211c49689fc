// Command go-ccm-flags prints, as JSON, every flag of Go's cloud-controller-manager
// (k8s.io/cloud-provider's app.NewCloudControllerManagerCommand with the default
// controllers and aliases, as bench/go-reference-ccm builds it): name, shorthand, type
// (pflag's Value.Type()), default, and whether it is hidden or deprecated.
//
// With the argument "gates" it prints instead every feature gate the command knows (those
// --feature-gates accepts), one a line: name, default, pre-release stage, locked; committed
// as crates/ccm-runtime/src/flags/go-feature-gates.txt, which the binary reads.
//
// Its output is committed as crates/ccm-runtime/tests/data/go-ccm-flags.json; the test
// crates/ccm-runtime/tests/go_flags.rs checks that our Options accept each flag, and
// tools/go-ccm-flags/check.sh regenerates the file and fails when it differs.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/apimachinery/pkg/util/wait"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/app/config"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	_ "k8s.io/component-base/logs/json/register" // as the reference CCM: --logging-format=json
)

type flag struct {
	Name       string `json:"name"`
	Shorthand  string `json:"shorthand,omitempty"`
	Type       string `json:"type"`
	Default    string `json:"default"`
	NoOptDef   string `json:"no_opt_default,omitempty"`
	Hidden     bool   `json:"hidden,omitempty"`
	Deprecated string `json:"deprecated,omitempty"`
	Usage      string `json:"usage"`
}

func main() {
	o, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cmd := app.NewCloudControllerManagerCommand(o, func(*config.CompletedConfig) cloudprovider.Interface { return nil },
		app.DefaultInitFuncConstructors, names.CCMControllerAliases(), cliflag.NamedFlagSets{}, wait.NeverStop)
	if len(os.Args) > 1 && os.Args[1] == "gates" {
		all := utilfeature.DefaultMutableFeatureGate.GetAll()
		names := make([]string, 0, len(all))
		for name := range all {
			names = append(names, string(name))
		}
		sort.Strings(names)
		fmt.Println("# name default stage locked (tools/go-ccm-flags/check.sh --write regenerates this)")
		for _, name := range names {
			spec := all[featuregate.Feature(name)]
			stage := string(spec.PreRelease)
			if stage == "" {
				stage = "GA"
			}
			fmt.Printf("%s %t %s %t\n", name, spec.Default, stage, spec.LockToDefault)
		}
		return
	}
	var flags []flag
	seen := map[string]bool{}
	add := func(f *pflag.Flag) {
		if seen[f.Name] {
			return
		}
		seen[f.Name] = true
		flags = append(flags, flag{
			Name: f.Name, Shorthand: f.Shorthand, Type: f.Value.Type(), Default: f.DefValue,
			NoOptDef: f.NoOptDefVal, Hidden: f.Hidden, Deprecated: f.Deprecated, Usage: f.Usage,
		})
	}
	cmd.Flags().VisitAll(add)
	cmd.PersistentFlags().VisitAll(add)
	sort.Slice(flags, func(i, j int) bool { return flags[i].Name < flags[j].Name })
	out, err := json.MarshalIndent(flags, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(append(out, '\n'))
}
