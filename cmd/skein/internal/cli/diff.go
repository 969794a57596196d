package cli

import (
	"fmt"
	"strings"
)

// fileDiff is a tool call's diff content: a file's text before (empty for
// a new file) and after.
type fileDiff struct {
	path             string
	oldText, newText string
}

// maxDiffCells bounds the line comparison (old lines × new lines): a
// larger diff is summarised by its line counts alone.
const maxDiffCells = 1 << 20

// compact returns the diff as a header "path +A -R" followed by at most
// n changed lines, "- old" and "+ new" in order, and "…" when more were
// left out. Unchanged lines are not shown.
func (d fileDiff) compact(n int) []string {
	oldLines, newLines := splitLines(d.oldText), splitLines(d.newText)
	var changes []string
	if len(oldLines)*len(newLines) <= maxDiffCells {
		changes = lineDiff(oldLines, newLines)
	} else {
		for _, l := range oldLines {
			changes = append(changes, "- "+l)
		}
		for _, l := range newLines {
			changes = append(changes, "+ "+l)
		}
	}
	added, removed := 0, 0
	for _, c := range changes {
		if strings.HasPrefix(c, "+") {
			added++
		} else {
			removed++
		}
	}
	header := fmt.Sprintf("%s +%d -%d", orDefault(d.path, "(file)"), added, removed)
	if d.oldText == "" && d.newText != "" {
		header += " (new)"
	}
	lines := []string{header}
	if len(changes) > n {
		return append(append(lines, changes[:n]...), fmt.Sprintf("… %d more changed lines", len(changes)-n))
	}
	return append(lines, changes...)
}

// splitLines splits text into lines, without a last empty one.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// lineDiff returns the lines removed from a ("- line") and added in b
// ("+ line"), in order, from a longest common subsequence of lines.
func lineDiff(a, b []string) []string {
	// lcs[i][j] is the length of the LCS of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i++
			j++
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			out = append(out, "- "+a[i])
			i++
		default:
			out = append(out, "+ "+b[j])
			j++
		}
	}
	return out
}
