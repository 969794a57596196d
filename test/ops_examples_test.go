package test

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"skein.dev/internal/cluster"
)

// The deployment examples checked here, and the configuration they run.
const (
	opsComposeFile = "../ops/compose/docker-compose.yml"
	opsSystemdDir  = "../ops/systemd"
)

// opsServiceUsers is the NATS user each skein serve target connects as:
// make cluster's, which the examples must follow.
var opsServiceUsers = map[string]string{
	cluster.Gateway: cluster.UserGateway,
	cluster.Session: cluster.UserSession,
	cluster.Runner:  cluster.UserRunner,
	cluster.History: cluster.UserHistory,
	cluster.Notify:  cluster.UserNotify,
}

// accountsPasswords reads ops/cluster/nats/accounts.conf's users and the
// environment variable of each one's password.
func accountsPasswords(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(opsClusterDir, "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	users := map[string]string{}
	for _, m := range regexp.MustCompile(`\{\s*user:\s*([\w-]+),\s*password:\s*\$(\w+)`).FindAllStringSubmatch(string(b), -1) {
		users[m[1]] = m[2]
	}
	for _, user := range append(slices.Collect(maps.Values(opsServiceUsers)), cluster.UserOps) {
		if users[user] == "" {
			t.Fatalf("accounts.conf has no user %s with a password from the environment: %v", user, users)
		}
	}
	return users
}

// nodeConfVars are the variables node.conf reads from a node's environment.
func nodeConfVars(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(opsClusterDir, "node.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var vars []string
	for line := range strings.Lines(string(b)) {
		if before, _, _ := strings.Cut(line, "#"); before != "" {
			for _, m := range regexp.MustCompile(`\$(NATS_\w+)`).FindAllStringSubmatch(before, -1) {
				vars = append(vars, m[1])
			}
		}
	}
	if len(vars) < 7 {
		t.Fatalf("node.conf reads only %v", vars)
	}
	return vars
}

// natsServerVersion is the nats-server version cmd/skein/go.mod pins.
func natsServerVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../cmd/skein/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`github\.com/nats-io/nats-server/v2 v(\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod pins no nats-server")
	}
	return string(m[1])
}

// natsURLs splits a NATS_URL into its URLs' user, password, host and
// port. The password may be a ${VAR} reference, which net/url refuses.
func natsURLs(t *testing.T, where, urls string) [][4]string {
	t.Helper()
	re := regexp.MustCompile(`^(?:nats|tls)://([^:@/]+):([^@/]+)@([\w.-]+):(\d+)$`)
	var out [][4]string
	for u := range strings.SplitSeq(urls, ",") {
		m := re.FindStringSubmatch(strings.TrimSpace(u))
		if m == nil {
			t.Errorf("%s: %q is not a nats://user:password@host:port URL", where, u)
			continue
		}
		out = append(out, [4]string{m[1], m[2], m[3], m[4]})
	}
	return out
}

// routeHosts returns the host:port of each nats-route:// URL of a
// NATS_ROUTES value.
func routeHosts(routes string) []string {
	var hosts []string
	for _, m := range regexp.MustCompile(`nats-route://([\w.-]+:\d+)`).FindAllStringSubmatch(routes, -1) {
		hosts = append(hosts, m[1])
	}
	slices.Sort(hosts)
	return hosts
}

// varRef matches a compose variable reference: ${VAR}, ${VAR:?message},
// ${VAR:-default} and the like.
var varRef = regexp.MustCompile(`^\$\{(\w+)(?:[:?-][^}]*)?\}$`)

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// TestOpsCompose checks ops/compose/docker-compose.yml against the
// cluster's configuration: three nodes running node.conf with distinct
// names and routes naming all three, skein provision as the ops user
// before the services, the four services each with its target and its own
// user of accounts.conf, and every password a ${VAR} reference.
func TestOpsCompose(t *testing.T) {
	b, err := os.ReadFile(opsComposeFile)
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", opsComposeFile, err)
	}
	passwords := accountsPasswords(t)
	nodeVars := nodeConfVars(t)

	// Every password anywhere is a reference, never a value.
	for name, s := range f.Services {
		for k, v := range s.Environment {
			if strings.Contains(k, "PASSWORD") && !varRef.MatchString(v) {
				t.Errorf("%s: %s is %q, not a ${VAR} reference", name, k, v)
			}
		}
	}

	// The nodes.
	var nodes []string
	names := map[string]string{}
	for name, s := range f.Services {
		if !strings.HasPrefix(s.Image, "nats:") {
			continue
		}
		nodes = append(nodes, name)
		if want := "nats:" + natsServerVersion(t); !strings.HasPrefix(s.Image, want) {
			t.Errorf("%s: image %s, want %s (the version go.mod pins)", name, s.Image, want)
		}
		if len(s.Command) != 2 || s.Command[0] != "-c" || path.Base(s.Command[1]) != "node.conf" {
			t.Errorf("%s: command %q, want -c <dir>/node.conf", name, s.Command)
		} else if !slices.ContainsFunc(s.Volumes, func(v string) bool {
			return strings.HasPrefix(v, "../cluster/nats:"+path.Dir(s.Command[1]))
		}) {
			t.Errorf("%s: no volume mounts ../cluster/nats at %s: %q", name, path.Dir(s.Command[1]), s.Volumes)
		}
		for _, v := range nodeVars {
			if s.Environment[v] == "" {
				t.Errorf("%s: node.conf reads %s, which is not set", name, v)
			}
		}
		for user, v := range passwords {
			if m := varRef.FindStringSubmatch(s.Environment[v]); m == nil || m[1] != v {
				t.Errorf("%s: %s (user %s) is %q, want ${%s}", name, v, user, s.Environment[v], v)
			}
		}
		if other, dup := names[s.Environment["NATS_SERVER_NAME"]]; dup {
			t.Errorf("%s and %s are both NATS_SERVER_NAME %s", name, other, s.Environment["NATS_SERVER_NAME"])
		}
		names[s.Environment["NATS_SERVER_NAME"]] = name
	}
	slices.Sort(nodes)
	if len(nodes) != 3 {
		t.Fatalf("nats services %v, want three", nodes)
	}
	var wantRoutes, clientHosts []string
	for _, n := range nodes {
		wantRoutes = append(wantRoutes, n+":"+f.Services[n].Environment["NATS_CLUSTER_PORT"])
		clientHosts = append(clientHosts, n+":"+f.Services[n].Environment["NATS_PORT"])
	}
	for _, n := range nodes {
		if got := routeHosts(f.Services[n].Environment["NATS_ROUTES"]); !slices.Equal(got, wantRoutes) {
			t.Errorf("%s: NATS_ROUTES names %v, want every node's %v", n, got, wantRoutes)
		}
	}

	// checkURL checks that a service connects to every node as user, with
	// that user's password variable.
	checkURL := func(name string, s composeService, user string) {
		var hosts []string
		for _, u := range natsURLs(t, name, s.Environment["NATS_URL"]) {
			if u[0] != user {
				t.Errorf("%s: connects as %s, want %s", name, u[0], user)
			}
			if m := varRef.FindStringSubmatch(u[1]); m == nil || m[1] != passwords[user] {
				t.Errorf("%s: %s's password is %q, want ${%s}", name, user, u[1], passwords[user])
			}
			hosts = append(hosts, u[2]+":"+u[3])
		}
		slices.Sort(hosts)
		if !slices.Equal(hosts, clientHosts) {
			t.Errorf("%s: NATS_URL names %v, want every node's %v", name, hosts, clientHosts)
		}
	}

	// Provision, then the services.
	targets := map[string]string{}
	provisioned := false
	for name, s := range f.Services {
		if len(s.Command) == 0 {
			continue
		}
		switch s.Command[0] {
		case "provision":
			provisioned = true
			checkURL(name, s, cluster.UserOps)
			if !slices.Contains(s.Command, "--replicas=3") {
				t.Errorf("%s: %q provisions no R3 streams", name, s.Command)
			}
			for _, n := range nodes {
				if s.DependsOn[n].Condition != "service_healthy" {
					t.Errorf("%s: does not wait for %s to be healthy", name, n)
				}
			}
		case "serve":
			var target string
			for _, a := range s.Command {
				if v, ok := strings.CutPrefix(a, "--target="); ok {
					target = v
				}
			}
			if other, dup := targets[target]; dup {
				t.Errorf("%s and %s both serve --target=%s", name, other, target)
			}
			targets[target] = name
			user, ok := opsServiceUsers[target]
			if !ok {
				t.Errorf("%s: serve --target=%q, not one service", name, target)
				continue
			}
			checkURL(name, s, user)
			if s.Build.Dockerfile != "ops/compose/Dockerfile" || s.Build.Context != "../.." {
				t.Errorf("%s: built from %+v, want ops/compose/Dockerfile in the repository", name, s.Build)
			}
			if s.DependsOn["provision"].Condition != "service_completed_successfully" {
				t.Errorf("%s: starts before provision succeeded: %+v", name, s.DependsOn)
			}
		}
	}
	if !provisioned {
		t.Error("no service runs skein provision")
	}
	if got, want := slices.Sorted(maps.Keys(targets)), slices.Sorted(maps.Keys(opsServiceUsers)); !slices.Equal(got, want) {
		t.Errorf("serve targets %v, want %v", got, want)
	}

	// The Dockerfile builds cmd/skein in the workspace.
	df, err := os.ReadFile("../ops/compose/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"COPY go.work", "go build", "./cmd/skein", `ENTRYPOINT ["/usr/local/bin/skein"]`} {
		if !strings.Contains(string(df), want) {
			t.Errorf("ops/compose/Dockerfile has no %q", want)
		}
	}
}

// unit is a parsed systemd unit file: section → key → values, in order.
type unit map[string]map[string][]string

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// parseUnit reads a systemd unit file: [Section] headers, Key=Value
// lines (a key may repeat), # and ; comments, a trailing backslash
// continuing a line.
func parseUnit(t *testing.T, file string) unit {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	var pending string
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if pending != "" {
			line, pending = pending+" "+line, ""
		}
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if l, ok := strings.CutSuffix(line, `\`); ok {
			pending = l
			continue
		}
		if strings.HasPrefix(line, "[") {
			if !strings.HasSuffix(line, "]") {
				t.Fatalf("%s:%d: %q", file, n, line)
			}
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: %q is no key=value in a section", file, n, line)
		}
		k = strings.TrimSpace(k)
		u[section][k] = append(u[section][k], strings.TrimSpace(v))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if pending != "" {
		t.Fatalf("%s: ends in a continued line", file)
	}
	return u
}

// parseEnvFile reads an EnvironmentFile: KEY=VALUE lines and comments.
func parseEnvFile(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is no KEY=VALUE", file, line)
		}
		env[k] = v
	}
	return env
}

// checkHardened checks the directives every example unit carries.
func checkHardened(t *testing.T, name string, u unit) {
	t.Helper()
	for key, want := range map[string]string{"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "CapabilityBoundingSet": ""} {
		if vs, ok := u["Service"][key]; !ok || vs[len(vs)-1] != want {
			t.Errorf("%s: %s=%q, want %q", name, key, vs, want)
		}
	}
	if user := u.get("Service", "User"); user == "" || user == "root" {
		t.Errorf("%s: runs as %q", name, user)
	}
	if u.get("Service", "Restart") == "" {
		t.Errorf("%s: no Restart=", name)
	}
	if u.get("Install", "WantedBy") == "" {
		t.Errorf("%s: no [Install] WantedBy=", name)
	}
}

// TestOpsSystemd checks ops/systemd: the node template and the four
// services' units parse and have what they need (ExecStart, the
// environment file, Restart=, the hardening), and the example environment
// files agree with accounts.conf and with each other. Where systemd-analyze
// is installed it verifies the units too.
func TestOpsSystemd(t *testing.T) {
	passwords := accountsPasswords(t)
	envDir := filepath.Join(opsSystemdDir, "env")

	// The node template and its environment.
	node := parseUnit(t, filepath.Join(opsSystemdDir, "nats-server@.service"))
	checkHardened(t, "nats-server@.service", node)
	if files := node["Service"]["EnvironmentFile"]; !slices.Contains(files, "/etc/skein/nats-%i.env") || !slices.Contains(files, "/etc/skein/nats.env") {
		t.Errorf("nats-server@.service: EnvironmentFile %q, want /etc/skein/nats.env and /etc/skein/nats-%%i.env", files)
	}
	if exec := strings.Fields(node.get("Service", "ExecStart")); len(exec) != 3 || path.Base(exec[0]) != "nats-server" || exec[1] != "-c" || path.Base(exec[2]) != "node.conf" {
		t.Errorf("nats-server@.service: ExecStart %q, want nats-server -c <dir>/node.conf", exec)
	}
	shared := parseEnvFile(t, filepath.Join(envDir, "nats.env"))
	for user, v := range passwords {
		if shared[v] == "" {
			t.Errorf("nats.env: no %s (user %s)", v, user)
		}
	}
	var nodeHosts, routes []string
	for _, name := range []string{"n1", "n2", "n3"} {
		own := parseEnvFile(t, filepath.Join(envDir, "nats-"+name+".env"))
		if own["NATS_SERVER_NAME"] != name {
			t.Errorf("nats-%s.env: NATS_SERVER_NAME %q, want the instance name %s", name, own["NATS_SERVER_NAME"], name)
		}
		env := maps.Clone(shared)
		maps.Copy(env, own)
		for _, v := range nodeConfVars(t) {
			if env[v] == "" {
				t.Errorf("nats-server@%s: node.conf reads %s, set in neither nats.env nor nats-%s.env", name, v, name)
			}
		}
		nodeHosts = append(nodeHosts, own["NATS_HOST"]+":"+shared["NATS_PORT"])
		routes = append(routes, own["NATS_HOST"]+":"+shared["NATS_CLUSTER_PORT"])
	}
	slices.Sort(nodeHosts)
	slices.Sort(routes)
	if got := routeHosts(shared["NATS_ROUTES"]); !slices.Equal(got, routes) {
		t.Errorf("nats.env: NATS_ROUTES names %v, want every node's %v", got, routes)
	}

	// checkEnv checks that an environment file connects to every node as
	// user, with the password nats.env gives that user.
	checkEnv := func(file, user string) {
		env := parseEnvFile(t, filepath.Join(envDir, file))
		var hosts []string
		for _, u := range natsURLs(t, file, env["NATS_URL"]) {
			if u[0] != user {
				t.Errorf("%s: connects as %s, want %s", file, u[0], user)
			}
			if u[1] != shared[passwords[user]] {
				t.Errorf("%s: %s's password is not nats.env's %s", file, user, passwords[user])
			}
			hosts = append(hosts, u[2]+":"+u[3])
		}
		slices.Sort(hosts)
		if !slices.Equal(hosts, nodeHosts) {
			t.Errorf("%s: NATS_URL names %v, want every node's %v", file, hosts, nodeHosts)
		}
	}

	// The services.
	for target, user := range opsServiceUsers {
		name := "skein-" + target + ".service"
		u := parseUnit(t, filepath.Join(opsSystemdDir, name))
		checkHardened(t, name, u)
		exec := strings.Fields(u.get("Service", "ExecStart"))
		if len(exec) < 3 || path.Base(exec[0]) != "skein" || exec[1] != "serve" || !slices.Contains(exec, "--target="+target) {
			t.Errorf("%s: ExecStart %q, want skein serve --target=%s", name, exec, target)
		}
		envFile := "/etc/skein/" + target + ".env"
		if got := u["Service"]["EnvironmentFile"]; !slices.Equal(got, []string{envFile}) {
			t.Errorf("%s: EnvironmentFile %q, want %s", name, got, envFile)
		}
		checkEnv(target+".env", user)
	}
	prov := parseUnit(t, filepath.Join(opsSystemdDir, "skein-provision.service"))
	if exec := strings.Fields(prov.get("Service", "ExecStart")); len(exec) < 2 || exec[1] != "provision" || prov.get("Service", "Type") != "oneshot" {
		t.Errorf("skein-provision.service: %q, Type=%s; want a oneshot skein provision", exec, prov.get("Service", "Type"))
	}
	checkEnv("provision.env", cluster.UserOps)

	verifyUnits(t)
}

// verifyUnits runs systemd-analyze verify on copies of the units whose
// binaries are /bin/true, where systemd-analyze is installed: it knows
// every directive of the systemd that runs here.
func verifyUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze: the units are checked by parsing only")
		return
	}
	tmp := t.TempDir()
	units, err := filepath.Glob(filepath.Join(opsSystemdDir, "*.service"))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"verify", "--man=no"}
	for _, file := range units {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		b = regexp.MustCompile(`/usr/local/bin/(skein|nats-server)`).ReplaceAll(b, []byte("/bin/true"))
		name := filepath.Base(file)
		if err := os.WriteFile(filepath.Join(tmp, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "@.service") {
			instance := strings.Replace(name, "@", "@n1", 1)
			if err := os.Symlink(name, filepath.Join(tmp, instance)); err != nil {
				t.Fatal(err)
			}
			name = instance
		}
		args = append(args, filepath.Join(tmp, name))
	}
	cmd := exec.Command(analyze, args...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_LEVEL=warning")
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
