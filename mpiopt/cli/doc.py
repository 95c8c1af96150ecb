"""The command reference page, generated from the commands' own argparse parsers.

    python -m mpiopt.cli.doc                                   # print the page
    python -m mpiopt.cli.doc --write docs/reference/cli.md     # rewrite it
    python -m mpiopt.cli.doc --check docs/reference/cli.md     # exit 1 if it is stale

The page is made from the parsers `mpiopt` itself runs (mpiopt.cli.main.build_parser), so a
command, an option or a help line changes in one place and the reference follows; the
docs tests fail while the page differs from what this prints.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

WIDTH = 88            # usage lines wrapped alike on every terminal
HEADER = """# Commands

Every `mpiopt` command, its arguments and what they do. This page is generated from the
commands' own definitions (`python -m mpiopt.cli.doc --write docs/reference/cli.md`), so
it says what `mpiopt COMMAND --help` says.

Commands that read a database take `--storage URL`; without it they use
`$MPIOPT_STORAGE`, then the spec's `storage` (where a spec is given), then
`sqlite:///mpiopt.db` in the current directory. Query commands open the database
read-only and work while a study runs; `--format json` prints JSON for scripts
(strict JSON: a NaN or an infinity is `null`, as `jq` and `JSON.parse` read it).
"""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """[(name, one-line help, parser)] of the parser's subcommands, in declaration order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _arguments(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            metavar = action.metavar or (action.dest.upper() if action.nargs != 0 else "")
            if action.choices and not action.metavar:
                metavar = "{" + ",".join(map(str, action.choices)) + "}"
            name = ", ".join(f"{o} {metavar}".strip() for o in action.option_strings)
        else:
            name = action.metavar or action.dest
        meaning = action.help or ""
        if (action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0
                and "default" not in meaning):
            meaning += f" (default: `{action.default}`)"
        if action.required and action.option_strings:
            meaning += " (required)"
        rows.append(f"| `{name}` | {_cell(meaning)} |")
    if not rows:
        return []
    return ["| argument | meaning |", "|---|---|", *rows, ""]


def _section(path: str, summary: str, parser: argparse.ArgumentParser,
             level: int = 2) -> list[str]:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    lines = [f"{'#' * level} `{path}`", ""]
    about = parser.description or summary
    if about:
        lines += [_cell(about[:1].upper() + about[1:]), ""]
    lines += ["```text", parser.format_usage().strip(), "```", ""]
    lines += _arguments(parser)
    for name, help_, sub in _subcommands(parser):
        lines += _section(f"{path} {name}", help_, sub, level + 1)
    return lines


def page() -> str:
    """The whole reference page (Markdown)."""
    from mpiopt.cli.main import build_parser

    root = build_parser()
    lines = [HEADER, "```text", _usage(root), "```", ""]
    lines += ["| command | what it does |", "|---|---|"]
    commands = _subcommands(root)
    lines += [f"| [`mpiopt {n}`](#mpiopt-{n}) | {_cell(h)} |" for n, h, _ in commands] + [""]
    for name, help_, sub in commands:
        lines += _section(f"mpiopt {name}", help_, sub)
    return "\n".join(lines).rstrip() + "\n"


def _usage(parser: argparse.ArgumentParser) -> str:
    parser.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=WIDTH)
    return parser.format_usage().strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mpiopt.cli.doc",
                                     description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="FILE", type=Path, help="rewrite FILE")
    group.add_argument("--check", metavar="FILE", type=Path, help="exit 1 if FILE is stale")
    args = parser.parse_args(argv)
    fresh = page()
    if args.check:
        same = args.check.exists() and args.check.read_text(encoding="utf-8") == fresh
        print(f"{args.check}: command reference {'up to date' if same else 'out of date'}")
        return 0 if same else 1
    if args.write:
        old = args.write.read_text(encoding="utf-8") if args.write.exists() else None
        args.write.write_text(fresh, encoding="utf-8")
        print(f"{args.write}: command reference {'unchanged' if old == fresh else 'rewritten'}")
        return 0
    sys.stdout.write(fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
