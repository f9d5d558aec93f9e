package cli

//go:generate go run ./internal/gendoc ../docs/cli.md

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// referenceHeader opens docs/cli.md, ahead of the generated part.
const referenceHeader = `# CLI reference

<!-- Generated from the cobra commands by 'go generate ./cli'; do not edit.
     TestCLIDocsCurrent fails while this file is stale. -->

` + "`ebbtable`" + ` is both the server (` + "`ebbtable serve`" + `) and a set of small
clients that talk to a running server. ` + "`ebbtable COMMAND --help`" + ` prints
the section below for COMMAND.

Client commands find the server, project and instance as cbt does, from
flags, ~/.cbtrc and the environment: see [ebbtable](#ebbtable) below and
[cli-config.md](cli-config.md).

Shell completion: ` + "`ebbtable completion bash|zsh|fish --help`" + `.

Long work (` + "`backup create`, `restore`, `gc run`, `ttl run`, `replication diff`" + `)
shows a progress bar when stderr is a terminal, and otherwise a plain
progress line on stderr every few seconds (` + "`--progress`" + `).

`

// WriteReference writes the CLI reference, docs/cli.md: the header above,
// then every command's help as cobra's doc package renders it, with links
// between commands as anchors within the page.
func WriteReference(w io.Writer) error {
	root := newRootCmd(io.Discard, io.Discard)
	root.InitDefaultCompletionCmd()
	var buf bytes.Buffer
	buf.WriteString(referenceHeader)
	link := func(name string) string {
		return "#" + strings.ReplaceAll(strings.TrimSuffix(name, ".md"), "_", "-")
	}
	var walk func(c *cobra.Command) error
	walk = func(c *cobra.Command) error {
		if !c.IsAvailableCommand() && c != root {
			return nil
		}
		c.DisableAutoGenTag = true
		if err := doc.GenMarkdownCustom(c, &buf, link); err != nil {
			return fmt.Errorf("%s: %w", c.CommandPath(), err)
		}
		for _, sub := range c.Commands() {
			if err := walk(sub); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root); err != nil {
		return err
	}
	// Cobra ends some lines with spaces and the page with a blank line.
	out := strings.TrimRight(trimLineEnds(buf.String()), "\n") + "\n"
	_, err := io.WriteString(w, out)
	return err
}

func trimLineEnds(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}
