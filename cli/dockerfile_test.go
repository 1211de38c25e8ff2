package cli_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The Dockerfile at the repository's root: read everywhere, built and run
// where a Docker engine answers.

// dockerStage is one FROM of a Dockerfile: its name (AS ...) and its
// instructions, each upper-cased keyword and the rest of the line.
type dockerStage struct {
	name, from string
	steps      [][2]string
}

// parseDockerfile splits text into stages, joining lines that end in a
// backslash and dropping # comments.
func parseDockerfile(text string) []dockerStage {
	var stages []dockerStage
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) {
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		if line == "" || line[0] == '#' {
			continue
		}
		kw, rest, _ := strings.Cut(line, " ")
		kw, rest = strings.ToUpper(kw), strings.TrimSpace(rest)
		if kw == "FROM" {
			f := strings.Fields(rest)
			st := dockerStage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].steps = append(stages[len(stages)-1].steps, [2]string{kw, rest})
		}
	}
	return stages
}

// last returns the rest of the stage's last instruction kw, or "".
func (s dockerStage) last(kw string) string {
	v := ""
	for _, st := range s.steps {
		if st[0] == kw {
			v = st[1]
		}
	}
	return v
}

// checkDockerfile returns a problem for each rule text breaks: a build
// stage that runs `make build` (the Makefile's ldflags) with CGO_ENABLED=0,
// and final stages (every other one; the last is the default image) that
// copy its binary to /usr/local/bin/ffctl, run as a user other than root
// and have ffctl as their ENTRYPOINT.
func checkDockerfile(text string) []string {
	stages := parseDockerfile(text)
	if len(stages) < 2 {
		return []string{fmt.Sprintf("Dockerfile: %d stages, want a build stage and a final one", len(stages))}
	}
	var problems []string
	build := stages[0]
	if !slices.Contains(build.steps, [2]string{"ENV", "CGO_ENABLED=0"}) {
		problems = append(problems, "Dockerfile: the build stage does not set ENV CGO_ENABLED=0 (a static binary)")
	}
	if !strings.Contains(build.last("RUN"), "make build") {
		problems = append(problems, fmt.Sprintf("Dockerfile: the build stage's last RUN is %q, not make build (whose ldflags stamp the binary)", build.last("RUN")))
	}
	for _, st := range stages[1:] {
		if !slices.Contains(st.steps, [2]string{"COPY", "--from=" + build.name + " /out/ffctl /usr/local/bin/ffctl"}) {
			problems = append(problems, fmt.Sprintf("Dockerfile: stage %s does not copy the build's /out/ffctl to /usr/local/bin/ffctl", st.name))
		}
		if u, _, _ := strings.Cut(st.last("USER"), ":"); u == "" || u == "root" || u == "0" {
			problems = append(problems, fmt.Sprintf("Dockerfile: stage %s runs as %q, want a non-root USER", st.name, st.last("USER")))
		}
		if ep := st.last("ENTRYPOINT"); ep != `["/usr/local/bin/ffctl"]` {
			problems = append(problems, fmt.Sprintf("Dockerfile: stage %s has ENTRYPOINT %s, want [\"/usr/local/bin/ffctl\"]", st.name, ep))
		}
	}
	return problems
}

// TestDockerfileBuildsFfctlLikeMakeBuild: the Dockerfile keeps every rule
// of checkDockerfile, and .dockerignore keeps .git and bin/ out of the
// context.
func TestDockerfileBuildsFfctlLikeMakeBuild(t *testing.T) {
	t.Parallel()
	for _, p := range checkDockerfile(readDoc(t, docsRoot, "Dockerfile")) {
		t.Error(p)
	}
	ignored := strings.Fields(readDoc(t, docsRoot, ".dockerignore"))
	for _, want := range []string{".git", "bin", ".flowforge-state"} {
		if !slices.Contains(ignored, want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}

	good := readDoc(t, docsRoot, "Dockerfile")
	for _, tc := range []struct{ from, to, want string }{
		{"ENV CGO_ENABLED=0", "ENV CGO_ENABLED=1", "does not set ENV CGO_ENABLED=0"},
		{"RUN make build BIN=/out/ffctl", "RUN go build -o /out/ffctl ./cli/ffctl && true", "not make build"},
		{"USER 10001:10001", "USER root", `stage runtime runs as "root"`},
		{"USER 65532:65532", "", `stage static runs as ""`},
		{`ENTRYPOINT ["/usr/local/bin/ffctl"]` + "\nCMD [\"--help\"]\n\n# The default", `ENTRYPOINT ["/bin/sh"]` + "\nCMD [\"--help\"]\n\n# The default", `stage static has ENTRYPOINT ["/bin/sh"]`},
	} {
		if !strings.Contains(good, tc.from) {
			t.Fatalf("the Dockerfile has no %q to replace", tc.from)
		}
		got := strings.Join(checkDockerfile(strings.Replace(good, tc.from, tc.to, 1)), "\n")
		if !strings.Contains(got, tc.want) {
			t.Errorf("%q -> %q: got %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
}

// TestDockerImageRunsFfctl builds both images of the Dockerfile (the
// default and --target static) where a Docker engine answers, and runs
// `ffctl version -o json` in each: the stamp given as build args, a
// non-root user.
func TestDockerImageRunsFfctl(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: no image build")
	}
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker command here: the Dockerfile is checked by TestDockerfileBuildsFfctlLikeMakeBuild only")
	}
	if out, err := exec.CommandContext(t.Context(), docker, "info").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (docker info: %v; %s): the Dockerfile is checked by TestDockerfileBuildsFfctlLikeMakeBuild only", err, lastLine(string(out)))
	}
	root, err := filepath.Abs(docsRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"runtime", "static"} {
		tag := fmt.Sprintf("flowforge-ffctl-test:%s-%d", target, time.Now().UnixNano())
		build := exec.CommandContext(t.Context(), docker, "build", "--target", target, "-t", tag,
			"--build-arg", "VERSION=v0.0.0-docker-test", "--build-arg", "COMMIT=feedface", "--build-arg", "BUILD_DATE=2026-01-02T03:04:05Z", root)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("docker build --target %s: %v\n%s", target, err, out)
		}
		t.Cleanup(func() { _ = exec.Command(docker, "rmi", "-f", tag).Run() })
		out, err := exec.CommandContext(t.Context(), docker, "run", "--rm", tag, "version", "-o", "json").Output()
		if err != nil {
			t.Fatalf("docker run %s version: %v\n%s", tag, err, out)
		}
		var v struct {
			Version   string  `json:"version"`
			Commit    *string `json:"commit"`
			BuildDate *string `json:"build_date"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("%s: version -o json: %v\n%s", tag, err, out)
		}
		if v.Version != "v0.0.0-docker-test" || v.Commit == nil || *v.Commit != "feedface" || v.BuildDate == nil || *v.BuildDate != "2026-01-02T03:04:05Z" {
			t.Errorf("%s: version %s, want the build args' stamp", tag, out)
		}
		user, err := exec.CommandContext(t.Context(), docker, "image", "inspect", "-f", "{{.Config.User}}", tag).Output()
		if u, _, _ := strings.Cut(strings.TrimSpace(string(user)), ":"); err != nil || u == "" || u == "0" || u == "root" {
			t.Errorf("%s runs as %q (%v), want a non-root user", tag, user, err)
		}
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
