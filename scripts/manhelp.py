#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""manhelp.py - one source for a tool's --help text and its man page.

    manhelp.py --version V --header OUT.h --man OUT.8 SRC.help

SRC.help (docs/man/TOOL.help) is the --help text, verbatim, between a few
directives:

    .name TOOL            the tool's name (first line)
    .summary TEXT         one line for NAME in the man page
    @BLOCK                (a line of its own) the lines from here to the next
                          @-line also form the string TOOL_HELP_BLOCK (the
                          help of a subcommand); a lone "@" ends a block
    .man                  everything after this line is for the man page
                          only (more sections, in the same markup)

The header defines TOOL_HELP (the whole text, directives removed) and one
TOOL_HELP_BLOCK per block, as C string literals.  The man page is made by
these rules, which the help text follows:

    usage: ...            the first lines, up to a blank line: SYNOPSIS
    unindented text       a paragraph (of DESCRIPTION at first)
    a line "heading:"     unindented and ending with ':': a section named
                          after it (.SH, upper case)
    "  TERM  TEXT"        indented by two, two spaces or more before TEXT:
                          a tagged paragraph (.TP); a line of its own when
                          TEXT is empty; deeper indented lines continue it
    "    text"            (deeper indented, outside an entry) kept as is

No dependency but Python 3 (which runs meson itself).
"""
import argparse
import datetime
import os
import re
import sys


def c_string(text):
    out = []
    for line in text.splitlines(keepends=True):
        s = line.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        out.append('\t"%s"' % s)
    return " \\\n".join(out) if out else '\t""'


def roff_text(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    if s.startswith(".") or s.startswith("'"):
        s = "\\&" + s
    return s


def roff_term(s):
    # option names and words in upper case (metavariables) as in man(7):
    # bold for what is typed literally, italic for what is replaced
    words = re.split(r"(\s+|[\[\]|,=]+)", s)
    out = []
    for w in words:
        if not w:
            continue
        if re.fullmatch(r"\s+|[\[\]|,=]+", w):
            out.append(roff_text(w))
        elif re.fullmatch(r"[A-Z][A-Z0-9_-]*(\.\.\.)?", w) and len(w) > 1:
            out.append("\\fI" + roff_text(w) + "\\fR")
        else:
            out.append("\\fB" + roff_text(w) + "\\fR")
    return "".join(out)


def parse(path):
    name = summary = None
    help_lines, man_lines = [], []
    blocks = {}
    cur_block = None
    in_man = False
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            if line.startswith(".name "):
                name = line[6:].strip()
                continue
            if line.startswith(".summary "):
                summary = line[9:].strip()
                continue
            if line == ".man":
                in_man = True
                cur_block = None
                continue
            if in_man:
                man_lines.append(line)
                continue
            if line.startswith("@"):
                cur_block = line[1:].strip() or None
                if cur_block:
                    blocks[cur_block] = []
                continue
            help_lines.append(line)
            if cur_block:
                blocks[cur_block].append(line)
    if not name or not summary:
        sys.exit("%s: .name and .summary are required" % path)
    return name, summary, help_lines, blocks, man_lines


def to_roff(lines, in_synopsis_first=True):
    """the body of a man page from help lines"""
    out = []
    i = 0
    n = len(lines)
    if in_synopsis_first:
        out.append(".SH SYNOPSIS")
        out.append(".nf")
        while i < n and lines[i].strip():
            s = re.sub(r"^(usage:)?\s*", "", lines[i])
            out.append(roff_term(s))
            i += 1
        out.append(".fi")
        out.append(".SH DESCRIPTION")
    para_open = False
    entry_open = False  # inside a .TP entry: deeper lines continue it
    pre_open = False
    while i < n:
        line = lines[i]
        i += 1
        if not line.strip():
            if pre_open:
                out.append(".fi")
                pre_open = False
            para_open = False
            entry_open = False
            continue
        indent = len(line) - len(line.lstrip(" "))
        text = line.strip()
        if indent == 0 and text.endswith(":") and not para_open:
            if pre_open:
                out.append(".fi")
                pre_open = False
            # "filesystem commands (also ...):" -> FILESYSTEM COMMANDS,
            # the parenthesis a paragraph below it
            head, _, rest = text[:-1].partition(" (")
            out.append(".SH " + roff_text(head.upper()))
            if rest:
                out.append(roff_text("(" + rest))
            entry_open = False
            continue
        if indent == 0:
            if pre_open:
                out.append(".fi")
                pre_open = False
            if not para_open:
                out.append(".PP")
                para_open = True
            entry_open = False
            out.append(roff_text(text))
            continue
        m = re.match(r"^  (\S(?:.*?\S)?)(?:\s{2,}(\S.*))?$", line)
        if indent == 2 and m:
            if pre_open:
                out.append(".fi")
                pre_open = False
            para_open = False
            out.append(".TP")
            out.append(roff_term(m.group(1)))
            if m.group(2):
                out.append(roff_text(m.group(2)))
            entry_open = True
            continue
        if entry_open:
            out.append(roff_text(text))
            continue
        if not pre_open:
            out.append(".PP")
            out.append(".nf")
            pre_open = True
            para_open = False
        out.append(roff_text(line))
    if pre_open:
        out.append(".fi")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", required=True)
    ap.add_argument("--header")
    ap.add_argument("--man")
    ap.add_argument("--section", default="8")
    ap.add_argument("src")
    a = ap.parse_args()
    name, summary, help_lines, blocks, man_lines = parse(a.src)
    ident = re.sub(r"[^A-Za-z0-9]", "_", name).upper()

    if a.header:
        text = "\n".join(help_lines).rstrip("\n") + "\n"
        h = ["/* generated by scripts/manhelp.py from %s: edit that */"
             % os.path.basename(a.src),
             "#define %s_HELP \\" % ident, c_string(text)]
        for b, bl in blocks.items():
            bt = "\n".join(bl).strip("\n") + "\n"
            h.append("#define %s_HELP_%s \\" % (ident,
                     re.sub(r"[^A-Za-z0-9]", "_", b).upper()))
            h.append(c_string(bt))
        with open(a.header, "w", encoding="utf-8") as f:
            f.write("\n".join(h) + "\n")

    if a.man:
        # reproducible: SOURCE_DATE_EPOCH, else the source's mtime
        epoch = int(os.environ.get("SOURCE_DATE_EPOCH",
                                   os.stat(a.src).st_mtime))
        date = datetime.datetime.fromtimestamp(
            epoch, datetime.timezone.utc).strftime("%Y-%m-%d")
        out = ['.\\" generated by scripts/manhelp.py from %s: edit that'
               % os.path.basename(a.src),
               '.TH %s %s "%s" "arborfs %s" "System Administration"'
               % (roff_text(name.upper()), a.section, date, a.version),
               ".SH NAME",
               "%s \\- %s" % (roff_text(name), roff_text(summary))]
        out += to_roff(help_lines)
        if man_lines:
            out += to_roff(man_lines, in_synopsis_first=False)
        with open(a.man, "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
