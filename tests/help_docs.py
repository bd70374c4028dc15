#!/usr/bin/env python3
"""Every option a program's --help names is in its man page's OPTIONS and in
its docs' option table, and every option those define is in --help.

    help_docs.py PROGRAM MAN_PAGE DOCS_MD TABLE_HEADING

--help's usage block (the lines before its first "topic:" heading) is left
out: it names the subcommands' options.  An entry of the man page is the
line after .TP; an entry of the table is a row's first cell.  --help and
--version are everywhere and not counted.
"""
import re
import subprocess
import sys

OPTION = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*")
ALWAYS = {"--help", "--version"}


def from_help(program):
    text = subprocess.run([program, "--help"], capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    first = next((i for i, l in enumerate(lines) if re.match(r"^[a-z][a-z ,()-]*:$", l)), None)
    if first is None:
        sys.exit(f"help_docs: {program} --help has no 'topic:' heading")
    return set(OPTION.findall("\n".join(lines[first:])))


def from_man(path):
    lines = open(path).read().splitlines()
    start = lines.index(".SH OPTIONS")
    found = set()
    for i in range(start + 1, len(lines) - 1):
        if lines[i].startswith(".SH"):
            break
        if lines[i] == ".TP":
            found |= set(OPTION.findall(lines[i + 1].replace("\\-", "-")))
    return found


def from_table(path, heading):
    text = open(path).read()
    if heading not in text:
        sys.exit(f"help_docs: {path} has no '{heading}'")
    section = text[text.index(heading) + len(heading):]
    section = section[: section.find("\n## ")] if "\n## " in section else section
    found = set()
    for line in section.splitlines():
        if line.startswith("| `-"):
            found |= set(OPTION.findall(re.split(r"(?<!\\)\|", line)[1]))
    return found


def main():
    program, man, docs, heading = sys.argv[1:5]
    named = {"--help": from_help(program), man: from_man(man), f"{docs} ({heading})": from_table(docs, heading)}
    failed = False
    for a, sa in named.items():
        for b, sb in named.items():
            missing = sorted((sa - sb) - ALWAYS)
            if a != b and missing:
                print(f"FAIL: in {a}, not in {b}: {' '.join(missing)}")
                failed = True
    counts = ", ".join(f"{k}: {len(v - ALWAYS)}" for k, v in named.items())
    print(("FAIL " if failed else "ok   ") + f"{program}: options named ({counts})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
