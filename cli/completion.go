package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// bashCompletion asks ffctl itself for candidates: urfave/cli answers
// "--generate-bash-completion" with the subcommands (or, after a "-", the
// flags) of the command line typed so far.
const bashCompletion = `# bash completion for ffctl. Load it with
#   source <(ffctl completion bash)
# or install it: ffctl completion bash > /etc/bash_completion.d/ffctl
_ffctl_complete() {
  local cur words
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  local opts
  if [[ "$cur" == -* ]]; then
    opts=$("${words[@]}" "$cur" --generate-bash-completion 2>/dev/null)
  else
    opts=$("${words[@]}" --generate-bash-completion 2>/dev/null)
  fi
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _ffctl_complete ffctl
`

// zshCompletion is the zsh twin of bashCompletion.
const zshCompletion = `#compdef ffctl
# zsh completion for ffctl. Load it with
#   source <(ffctl completion zsh)
# or install it as _ffctl in a directory of your $fpath.
_ffctl() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'ffctl' opts
  else
    _files
  fi
}
if [[ "$funcstack[1]" = "_ffctl" ]]; then
  _ffctl "$@"
else
  compdef _ffctl ffctl
fi
`

func completionCommand(env *Env) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script for bash, zsh or fish",
		UsageText: "ffctl completion bash|zsh|fish\n\nExample:\n  source <(ffctl completion bash)\n  ffctl completion fish > ~/.config/fish/completions/ffctl.fish",
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageError("completion takes one shell: bash, zsh or fish")
			}
			var script string
			switch sh := c.Args().First(); sh {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return failure(fmt.Errorf("fish completion: %w", err))
				}
				script = s
			default:
				return usageError("completion: unknown shell %q: want bash, zsh or fish", sh)
			}
			_, err := io.WriteString(env.Stdout, script)
			return err
		},
	}
}

func setCompletion(env *Env, c *cli.Command) {
	c.BashComplete = env.complete(c)
	for _, s := range c.Subcommands {
		setCompletion(env, s)
	}
}

// complete answers --generate-bash-completion for cmd (nil: the app): after
// a word starting with "-", the flags it may begin; otherwise the
// subcommands. It reads the command line from env.args, where urfave/cli's
// own completer reads os.Args and so cannot run in-process.
func (env *Env) complete(cmd *cli.Command) cli.BashCompleteFunc {
	return func(c *cli.Context) {
		flags, subs := c.App.Flags, c.App.Commands
		if cmd != nil {
			flags, subs = cmd.Flags, cmd.Subcommands
		}
		var last string
		if n := len(env.args); n > 2 {
			last = env.args[n-2]
		}
		w := c.App.Writer
		if strings.HasPrefix(last, "-") {
			typed := strings.TrimLeft(last, "-")
			for _, f := range flags {
				if b, ok := f.(*cli.BoolFlag); ok && b.Hidden {
					continue
				}
				for _, name := range f.Names() {
					dash := "--"
					if len(name) == 1 {
						dash = "-"
					}
					if strings.HasPrefix(name, typed) && (!slices.Contains(env.args, dash+name) || isRepeatable(f)) {
						fmt.Fprintln(w, dash+name)
					}
				}
			}
			return
		}
		for _, s := range subs {
			if !s.Hidden {
				fmt.Fprintln(w, s.Name)
			}
		}
	}
}

func isRepeatable(f cli.Flag) bool {
	_, ok := f.(*cli.StringSliceFlag)
	return ok
}
