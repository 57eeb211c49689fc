// Command rulecheck checks what promtool does not about our alerting rules
// (deploy/monitoring/ccm-alerts.yaml); scripts/alerts.sh runs it after promtool:
//
//   - every metric a rule's expression selects, and every series a unit test feeds in,
//     is a metric docs/metrics.md lists (a histogram's _bucket, _sum and _count
//     included), so renaming a metric breaks the rules' test;
//   - every alert has a severity label (critical, warning or info), summary and
//     description annotations and a runbook_url that points at a heading of
//     docs/metrics.md named after the alert;
//   - every alert is expected to fire in at least one unit test, and expected not to
//     fire (exp_alerts empty) in at least one;
//   - with -operator, that PrometheusRule's spec holds the same groups as the (single)
//     rules file.
//
// Usage: rulecheck -docs docs/metrics.md -url URL [-operator FILE] RULES.yaml -- TEST.yaml...
// It prints the problems and exits 1 if there are any.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// testFile is the part of a promtool unit test file rulecheck reads.
type testFile struct {
	Tests []struct {
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTests []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

var problems []string

// problem records a problem once.
func problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for _, p := range problems {
		if p == msg {
			return
		}
	}
	problems = append(problems, msg)
}

func main() {
	docsPath := flag.String("docs", "docs/metrics.md", "the metrics documentation")
	url := flag.String("url", "", "the runbook_url every alert's URL must start with, up to the '#'")
	operator := flag.String("operator", "", "a PrometheusRule whose spec must equal the rules file")
	flag.Parse()
	args := flag.Args()
	if len(args) < 1 || *url == "" {
		fmt.Fprintln(os.Stderr, "usage: rulecheck -docs docs/metrics.md -url URL RULES.yaml... [-- TEST.yaml...]")
		os.Exit(2)
	}
	var ruleFiles, testFiles []string
	for i, a := range args {
		if a == "--" {
			testFiles = args[i+1:]
			break
		}
		ruleFiles = append(ruleFiles, a)
	}

	docs, err := os.ReadFile(*docsPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	metrics, anchors := readDocs(string(docs))
	if len(metrics) == 0 {
		problem("%s: no metric found in its tables", *docsPath)
	}

	p := parser.NewParser(parser.Options{})
	alerts := map[string]bool{}
	used := map[string]bool{}
	for _, file := range ruleFiles {
		groups, errs := rulefmt.ParseFile(file, false, model.LegacyValidation, p, slog.Default())
		for _, e := range errs {
			problem("%v", e)
		}
		if groups == nil {
			continue
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				name := r.Alert
				if name == "" {
					name = r.Record
				}
				checkExpr(p, file, name, r.Expr, metrics, used)
				if r.Alert != "" {
					alerts[r.Alert] = true
					checkAlert(file, r, *url, anchors)
				}
			}
		}
	}
	if len(alerts) == 0 {
		problem("no alert found in %v", ruleFiles)
	}
	if *operator != "" {
		if len(ruleFiles) != 1 {
			problem("-operator needs exactly one rules file")
		} else {
			checkOperator(*operator, ruleFiles[0])
		}
	}

	firing, quiet := map[string]int{}, map[string]int{}
	for _, file := range testFiles {
		b, err := os.ReadFile(file)
		if err != nil {
			problem("%v", err)
			continue
		}
		var tf testFile
		if err := yaml.Unmarshal(b, &tf); err != nil {
			problem("%s: %v", file, err)
			continue
		}
		for _, t := range tf.Tests {
			for _, s := range t.InputSeries {
				m, err := p.ParseMetric(s.Series)
				if err != nil {
					problem("%s: series %q: %v", file, s.Series, err)
					continue
				}
				if n := m.Get(labels.MetricName); !documented(n, metrics) {
					problem("%s: input series %s is not a metric docs/metrics.md lists", file, n)
				}
			}
			for _, a := range t.AlertRuleTests {
				if !alerts[a.Alertname] {
					problem("%s: tests alert %s, which no rule defines", file, a.Alertname)
				}
				if len(a.ExpAlerts) > 0 {
					firing[a.Alertname]++
				} else {
					quiet[a.Alertname]++
				}
			}
		}
	}
	names := make([]string, 0, len(alerts))
	for a := range alerts {
		names = append(names, a)
	}
	sort.Strings(names)
	for _, a := range names {
		if firing[a] == 0 {
			problem("alert %s: no unit test expects it to fire", a)
		}
		if quiet[a] == 0 {
			problem("alert %s: no unit test expects it not to fire (exp_alerts empty)", a)
		}
	}

	if len(problems) > 0 {
		for _, msg := range problems {
			fmt.Fprintln(os.Stderr, "rulecheck: ERROR:", msg)
		}
		os.Exit(1)
	}
	usedNames := make([]string, 0, len(used))
	for n := range used {
		usedNames = append(usedNames, n)
	}
	sort.Strings(usedNames)
	fmt.Fprintf(os.Stderr, "rulecheck: %d alerts, each with a firing and a quiet unit test; "+
		"the rules use %d documented metrics: %s\n", len(names), len(usedNames), strings.Join(usedNames, " "))
}

// readDocs returns the metrics the tables of docs/metrics.md list (name → type) and the
// GitHub anchors of its headings. A metric row starts with "| `name`", as the Rust test
// docs_list_exactly_the_exported_metrics reads it.
func readDocs(docs string) (map[string]string, map[string]bool) {
	metrics := map[string]string{}
	anchors := map[string]bool{}
	for _, line := range strings.Split(docs, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"); ok {
			name, _, _ := strings.Cut(rest, "`")
			cols := strings.Split(line, "|")
			typ := ""
			if len(cols) > 2 {
				typ = strings.TrimSpace(cols[2])
			}
			metrics[name] = typ
		}
		if strings.HasPrefix(line, "#") {
			anchors[slug(strings.TrimLeft(line, "# "))] = true
		}
	}
	return metrics, anchors
}

var nonSlug = regexp.MustCompile(`[^a-z0-9 _-]`)

// slug is GitHub's anchor for a heading: lower case, punctuation removed, spaces as '-'.
func slug(heading string) string {
	return strings.ReplaceAll(nonSlug.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), ""), " ", "-")
}

// documented tells whether a series name is a listed metric, or a histogram's
// _bucket/_sum/_count series.
func documented(name string, metrics map[string]string) bool {
	if _, ok := metrics[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && metrics[base] == "histogram" {
			return true
		}
	}
	return false
}

func checkExpr(p parser.Parser, file, rule, expr string, metrics map[string]string, used map[string]bool) {
	e, err := p.ParseExpr(expr)
	if err != nil {
		problem("%s: %s: %v", file, rule, err)
		return
	}
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name == "" {
			problem("%s: %s: selector %s names no metric: give every selector a metric name", file, rule, vs)
			return nil
		}
		used[vs.Name] = true
		if !documented(vs.Name, metrics) {
			problem("%s: %s: %s is not a metric docs/metrics.md lists (renamed?)", file, rule, vs.Name)
		}
		return nil
	})
}

func checkAlert(file string, r rulefmt.Rule, url string, anchors map[string]bool) {
	switch r.Labels["severity"] {
	case "critical", "warning", "info":
	default:
		problem("%s: %s: severity label is %q, not critical, warning or info", file, r.Alert, r.Labels["severity"])
	}
	for _, a := range []string{"summary", "description", "runbook_url"} {
		if strings.TrimSpace(r.Annotations[a]) == "" {
			problem("%s: %s: no %s annotation", file, r.Alert, a)
		}
	}
	want := url + "#" + strings.ToLower(r.Alert)
	if got := r.Annotations["runbook_url"]; got != want {
		problem("%s: %s: runbook_url is %q, want %q", file, r.Alert, got, want)
	}
	if !anchors[strings.ToLower(r.Alert)] {
		problem("%s: %s: docs/metrics.md has no heading %q (its runbook)", file, r.Alert, r.Alert)
	}
}

// checkOperator checks that the PrometheusRule in file has kind PrometheusRule and the
// rules file's groups as its spec.
func checkOperator(file, rulesFile string) {
	var rule struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Spec       any    `yaml:"spec"`
	}
	var rules any
	for path, into := range map[string]any{file: &rule, rulesFile: &rules} {
		b, err := os.ReadFile(path)
		if err != nil {
			problem("%v", err)
			return
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			problem("%s: %v", path, err)
			return
		}
	}
	if rule.APIVersion != "monitoring.coreos.com/v1" || rule.Kind != "PrometheusRule" {
		problem("%s: is a %s %s, not a monitoring.coreos.com/v1 PrometheusRule", file, rule.APIVersion, rule.Kind)
	}
	if !reflect.DeepEqual(rule.Spec, rules) {
		problem("%s: its spec differs from %s", file, rulesFile)
	}
}
