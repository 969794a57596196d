package layout

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The map's limits: a page a person reads in ten minutes.
const (
	maxMapLines     = 450
	maxMapProseLine = 120
)

// repoRoot returns the directory holding go.work, above the test's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test's directory")
		}
		dir = parent
	}
}

// packages returns every directory of the repository that holds a Go
// package, relative to root and slash-separated, with the package's name
// (a directory of tests alone has the name of the package they test).
// It skips what the go command skips: testdata, and names starting with
// "." or "_".
func packages(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		pkg := f.Name.Name
		if strings.HasSuffix(name, "_test.go") {
			pkg = strings.TrimSuffix(pkg, "_test")
			if _, ok := out[rel]; ok {
				return nil // the package's own files name it
			}
		}
		out[rel] = pkg
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mapRows returns the rows of the map's package table: the directory in
// the first column, the package name in the second.
func mapRows(t *testing.T, doc string) map[string]string {
	t.Helper()
	rows := map[string]string{}
	in := false
	for line := range strings.Lines(doc) {
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Packages"
		case in && strings.HasPrefix(line, "| `"):
			cells := strings.Split(line, "|")
			if len(cells) < 4 {
				t.Errorf("ARCHITECTURE.md: a package row without its columns: %q", line)
				continue
			}
			dir, pkg := strings.Trim(strings.TrimSpace(cells[1]), "`"), strings.Trim(strings.TrimSpace(cells[2]), "`")
			if _, dup := rows[dir]; dup {
				t.Errorf("ARCHITECTURE.md names %s twice", dir)
			}
			rows[dir] = pkg
		}
	}
	return rows
}

// TestArchitectureMapsEveryPackage: docs/ARCHITECTURE.md's package table
// names every package of the repository, by its directory and its name,
// and nothing that is not one.
func TestArchitectureMapsEveryPackage(t *testing.T) {
	root := repoRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	have, mapped := packages(t, root), mapRows(t, string(doc))
	if len(mapped) == 0 {
		t.Fatal(`ARCHITECTURE.md has no package table under "## Packages"`)
	}
	var missing, gone []string
	for dir, pkg := range have {
		switch got, ok := mapped[dir]; {
		case !ok:
			missing = append(missing, "| `"+dir+"` | `"+pkg+"` | … |")
		case got != pkg:
			t.Errorf("ARCHITECTURE.md calls package %s %q; its files say %q", dir, got, pkg)
		}
	}
	for dir := range mapped {
		if _, ok := have[dir]; !ok {
			gone = append(gone, dir)
		}
	}
	slices.Sort(missing)
	slices.Sort(gone)
	if len(missing) > 0 {
		t.Errorf("ARCHITECTURE.md's package table lacks %d packages; add a row for each, with its one job (or move it up from \"Packages landing\"):\n%s", len(missing), strings.Join(missing, "\n"))
	}
	if len(gone) > 0 {
		t.Errorf("ARCHITECTURE.md's package table names directories that hold no Go package: %s", strings.Join(gone, ", "))
	}
}

// TestArchitectureIsAMap: docs/ARCHITECTURE.md stays a page read in ten
// minutes: at most maxMapLines lines, and no line of prose (outside code
// blocks and tables) longer than maxMapProseLine characters.
func TestArchitectureIsAMap(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot(t), "docs", "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n, code := 0, false
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			code = !code
			continue
		}
		if !code && !strings.HasPrefix(line, "|") && len([]rune(line)) > maxMapProseLine {
			t.Errorf("ARCHITECTURE.md:%d is %d characters; prose lines are at most %d", n, len([]rune(line)), maxMapProseLine)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n > maxMapLines {
		t.Errorf("ARCHITECTURE.md has %d lines; a map has at most %d (move the detail to docs/design/ or a package doc)", n, maxMapLines)
	}
}
