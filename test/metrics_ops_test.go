package test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"gopkg.in/yaml.v3"

	"skein.dev/internal/natsmetrics"
	"skein.dev/internal/natstest"
	"skein.dev/internal/stacktest"
	"skein.dev/internal/testutil"
)

// monitoringDir holds the dashboard, the scrape configuration and the alert
// rules the tests below hold to the metrics the services export.
const monitoringDir = "../ops/monitoring"

// metricsStack runs the four services in-process on one embedded NATS with
// their registry's /metrics served on a listener of its own, as skein serve
// --metrics-listen serves it, and returns the registry and the gateway's
// URL.
func metricsStack(t *testing.T) (reg *prometheus.Registry, gatewayURL, metricsURL string) {
	t.Helper()
	st := stacktest.Start(t, stacktest.WithServer(natstest.Run(t)), stacktest.AsSkein(testutil.TempDir(t), func(cfg *stackConfig) {
		cfg.Runner.ID = "metrics"
	}))
	metricsAddr := freeAddr(t)
	ln, err := net.Listen("tcp", metricsAddr)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(st.Registry(), promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return st.Registry(), st.URL(), "http://" + metricsAddr + "/metrics"
}

// scrape reads /metrics over HTTP and returns each family's type, from its
// "# TYPE" line.
func scrape(t *testing.T, url string) map[string]string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d", url, resp.StatusCode)
	}
	types := map[string]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return types
}

// driveTraffic gives the stack a completed turn, a failed one, a permission
// request answered, history pages, a listing and a deletion.
func driveTraffic(t *testing.T, url string) {
	t.Helper()
	for _, open := range []struct{ sid, body string }{
		{"calm", `{"agent":"test"}`},
		{"asks", `{"agent":"test","permissionPolicy":"ask"}`},
		{"fails", `{"agent":"test"}`},
	} {
		if code, b := do(t, http.MethodPut, url+"/v1/sessions/"+open.sid, open.body); code != http.StatusOK {
			t.Fatalf("PUT %s = %d %s", open.sid, code, b)
		}
	}
	if code, b := do(t, http.MethodPost, url+"/v1/sessions/calm/prompt", promptBody("say hi")); code != http.StatusOK {
		t.Fatalf("prompt calm = %d %s", code, b)
	}
	if code, _ := do(t, http.MethodPost, url+"/v1/sessions/fails/prompt", promptBody("error -32603 the model is down")); code == http.StatusOK {
		t.Fatalf("prompt fails = %d, want an error", code)
	}
	asked := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/sessions/asks/prompt",
			strings.NewReader(promptBody("permission call_1 allow_once=yes,reject_once=no\nsay done")))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			asked <- 0
			return
		}
		resp.Body.Close()
		asked <- resp.StatusCode
	}()
	var reqID string
	if err := pollFor(t.Context(), "the permission request", func() bool {
		for _, s := range listSessions(t, url) {
			if s.SessionID == "asks" && len(s.State.Requests) == 1 {
				reqID = s.State.Requests[0].RequestID
			}
		}
		return reqID != ""
	}); err != nil {
		t.Fatal(err)
	}
	if code, b := do(t, http.MethodPost, url+"/v1/sessions/asks/permissions/"+reqID, `{"optionId":"yes"}`); code != http.StatusOK {
		t.Fatalf("answer = %d %s", code, b)
	}
	if code := <-asked; code != http.StatusOK {
		t.Fatalf("prompt asks = %d", code)
	}
	for _, q := range []string{"?after=0", "?limit=2"} {
		if code, b := do(t, http.MethodGet, url+"/v1/sessions/calm/history"+q, ""); code != http.StatusOK {
			t.Fatalf("history%s = %d %s", q, code, b)
		}
	}
	if code, b := do(t, http.MethodDelete, url+"/v1/sessions/calm", ""); code != http.StatusOK {
		t.Fatalf("DELETE calm = %d %s", code, b)
	}
}

// acpName matches a Skein metric name in PromQL. Label names and values
// are not matched: a label value is quoted, and no label name starts with
// acp_.
var acpName = regexp.MustCompile(`\bacp_[a-z0-9_]+\b`)

// opsExprs returns every PromQL expression of the dashboard and the alert
// rules, by where it is.
func opsExprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for where, expr := range dashboardExprs(t) {
		out["grafana-dashboard.json: "+where] = expr
	}
	for _, r := range alertRules(t) {
		out["alerts.yml: "+r.Alert] = r.Expr
	}
	return out
}

// dashboardExprs returns every target's expr of every panel, rows' panels
// included, by panel title and refId.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	var d struct {
		SchemaVersion int `json:"schemaVersion"`
		Panels        []dashPanel
	}
	readJSON(t, filepath.Join(monitoringDir, "grafana-dashboard.json"), &d)
	if d.SchemaVersion < 39 {
		t.Errorf("dashboard schemaVersion %d, want 39 or later", d.SchemaVersion)
	}
	out := map[string]string{}
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type != "row" && p.Datasource.UID != "${datasource}" {
				t.Errorf("dashboard panel %q: datasource %q, want the ${datasource} variable", p.Title, p.Datasource.UID)
			}
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("dashboard panel %q target %s has no expr", p.Title, tg.RefID)
				}
				out[p.Title+" "+tg.RefID] = tg.Expr
			}
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

type dashPanel struct {
	Title      string
	Type       string
	Datasource struct{ UID string }
	Targets    []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	}
	Panels []dashPanel
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join(monitoringDir, "alerts.yml"), &f)
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	return out
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil && err != io.EOF {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestMonitoringMetricsExported starts the four services, drives a little
// traffic and scrapes /metrics over HTTP: every metric the dashboard and
// the alert rules name is exported (a histogram's _bucket, _sum and _count
// by its family), every exported Skein metric is in docs/METRICS.md, and
// the traffic's figures are in the series the dashboard reads.
func TestMonitoringMetricsExported(t *testing.T) {
	reg, url, metricsURL := metricsStack(t)
	driveTraffic(t, url)

	type want struct {
		name    string
		labels  []string
		atLeast float64
	}
	wants := []want{
		{"acp_session_turn_dispatch_seconds", nil, 3},
		{"acp_session_turn_first_reply_seconds", nil, 2},
		{"acp_session_turn_finished_seconds", []string{"outcome", "completed"}, 2},
		{"acp_session_turn_finished_seconds", []string{"outcome", "failed"}, 1},
		{"acp_session_prompts_total", []string{"outcome", "completed", "stop_reason", "end_turn"}, 2},
		{"acp_session_prompts_total", []string{"outcome", "failed", "stop_reason", "none"}, 1},
		{"acp_session_permission_wait_seconds", []string{"end", "answered"}, 1},
		{"acp_session_live_delta_seconds", nil, 1},
		{"acp_session_append_seconds", nil, 1},
		{"acp_session_attach_seconds", []string{"tier", "new"}, 3},
		{"acp_session_runners", nil, 1},
		{"acp_session_runner_free_slots", nil, 1},
		{"acp_runner_capacity", nil, 1},
		{"acp_runner_free_slots", nil, 1},
		{"acp_runner_adapter_exits_total", []string{"cause", "requested"}, 1},
		{"acp_history_page_seconds", []string{"direction", "forward"}, 1},
		{"acp_history_page_seconds", []string{"direction", "backward"}, 1},
		{"acp_gateway_requests_total", []string{"route", "PUT /v1/sessions/{id}", "code", "200"}, 3},
		{"acp_gateway_request_seconds", []string{"route", "POST /v1/sessions/{id}/prompt"}, 3},
		{"acp_stream_leader_present", []string{"stream", "ACP_LOG"}, 1},
		{"acp_stream_messages", []string{"stream", "ACP_LOG"}, 1},
	}
	wants = append(wants, want{"acp_notify_events_total", []string{"type", "turn.finished"}, 2})
	for _, svc := range []string{natsmetrics.ServiceGateway, natsmetrics.ServiceSession, natsmetrics.ServiceAdapterRunner, natsmetrics.ServiceHistory, natsmetrics.ServiceNotify} {
		wants = append(wants, want{"acp_nats_connected", []string{"service", svc}, 1})
	}
	var mfs []*dto.MetricFamily
	short := func() []want {
		var err error
		if mfs, err = reg.Gather(); err != nil {
			t.Fatal(err)
		}
		var out []want
		for _, w := range wants {
			if v, _ := testutil.SeriesIn(mfs, w.name, w.labels...); v < w.atLeast {
				out = append(out, w)
			}
		}
		return out
	}
	// The services count after they answer: the figures come soon after.
	if err := pollFor(t.Context(), "the traffic's figures", func() bool { return len(short()) == 0 }); err != nil {
		for _, w := range short() {
			v, ok := testutil.SeriesIn(mfs, w.name, w.labels...)
			t.Errorf("%s%v = %v (present %v), want at least %v", w.name, w.labels, v, ok, w.atLeast)
		}
	}

	types := scrape(t, metricsURL)
	for where, expr := range opsExprs(t) {
		for _, name := range acpName.FindAllString(expr, -1) {
			if _, ok := types[name]; ok {
				continue
			}
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if base != name && types[base] == "histogram" {
				continue
			}
			t.Errorf("%s names %s, which /metrics does not export", where, name)
		}
	}

	doc, err := os.ReadFile("../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(types)) {
		if strings.HasPrefix(name, "acp_") && !strings.Contains(string(doc), "`"+name+"`") {
			t.Errorf("docs/METRICS.md does not list %s", name)
		}
	}
}

// forbiddenLabels are labels whose values are open sets: a series per
// session, tenant or runner would grow without bound.
var forbiddenLabels = []string{"session", "session_id", "sessionid", "sid", "namespace", "ns", "runner", "runner_id", "turn", "turn_id", "request_id", "process_id"}

// TestMetricLabelsClosed: no metric a service exports is labelled with an
// ID, after traffic that gave the vectors their series.
func TestMetricLabelsClosed(t *testing.T) {
	reg, url, _ := metricsStack(t)
	driveTraffic(t, url)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if slices.Contains(forbiddenLabels, strings.ToLower(l.GetName())) {
					t.Errorf("%s has label %s=%q: an open set", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// TestMonitoringConfig: prometheus.yml scrapes the four services under the
// job names the dashboard and alerts select, and loads alerts.yml; every
// alert rule has its annotations and a runbook link to its anchor in
// docs/OPERATIONS.md, which is there.
func TestMonitoringConfig(t *testing.T) {
	var prom struct {
		Global        map[string]string `yaml:"global"`
		RuleFiles     []string          `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			ScrapeTimeout string `yaml:"scrape_timeout"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(monitoringDir, "prometheus.yml"), &prom)
	jobs := map[string]int{}
	for _, sc := range prom.ScrapeConfigs {
		for _, c := range sc.StaticConfigs {
			jobs[sc.JobName] += len(c.Targets)
		}
	}
	for _, job := range []string{"skein-gateway", "skein-session", "skein-adapter-runner", "skein-history", "skein-notify"} {
		if jobs[job] == 0 {
			t.Errorf("prometheus.yml: job %s has no targets (jobs: %v)", job, jobs)
		}
	}
	if !slices.Contains(prom.RuleFiles, "alerts.yml") {
		t.Errorf("prometheus.yml rule_files = %v, want alerts.yml", prom.RuleFiles)
	}

	runbook, err := os.ReadFile("../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		if !regexp.MustCompile(`^Skein[A-Za-z]+$`).MatchString(r.Alert) || seen[r.Alert] {
			t.Errorf("alert %q: want a unique SkeinCamelCase name", r.Alert)
		}
		seen[r.Alert] = true
		if r.Expr == "" || r.Labels["severity"] == "" {
			t.Errorf("alert %s: expr %q, severity %q", r.Alert, r.Expr, r.Labels["severity"])
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if r.Annotations[a] == "" {
				t.Errorf("alert %s has no %s annotation", r.Alert, a)
			}
		}
		anchor := "alert-" + strings.ToLower(r.Alert)
		if want := "docs/OPERATIONS.md#" + anchor; r.Annotations["runbook"] != want {
			t.Errorf("alert %s: runbook %q, want %q", r.Alert, r.Annotations["runbook"], want)
		}
		if !strings.Contains(string(runbook), `id="`+anchor+`"`) {
			t.Errorf("docs/OPERATIONS.md has no anchor %s for alert %s", anchor, r.Alert)
		}
	}
}

// TestAlertRules runs promtool, Prometheus' own checker, when it is on the
// PATH (Debian's prometheus package has it): the scrape configuration and
// the rules load, alerts_test.yml's unit tests of every rule pass (each
// alert fires on the series it is for, after its for, with its
// annotations rendered), and every dashboard query parses as PromQL.
// Without promtool only the checks above run. Either way, every alert has
// a unit test that expects it to fire.
func TestAlertRules(t *testing.T) {
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	f, err := os.ReadFile(filepath.Join(monitoringDir, "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(f, &tests); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	for _, r := range alertRules(t) {
		if !fires[r.Alert] {
			t.Errorf("alerts_test.yml has no test that expects %s to fire", r.Alert)
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not on the PATH: the rules' unit tests and the PromQL parse are not run")
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), promtool, args...)
		cmd.Dir = monitoringDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "config", "prometheus.yml")
	run("test", "rules", "alerts_test.yml")

	// The dashboard's queries as recording rules, its variables given
	// values, for promtool's parser.
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", "skein-.*", "$instance", ".*")
	exprs := dashboardExprs(t)
	for _, where := range slices.Sorted(maps.Keys(exprs)) {
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", len(rules)), Expr: vars.Replace(exprs[where])})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run("check", "rules", path)
}
