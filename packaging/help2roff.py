#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write a man page (roff, man macros) from a program's --help text.

    help2roff.py --section N --out FILE [--summary TEXT] [--version V]
                 [--sub CMD]... [--commands] [--see-also NAME(N)]... PROGRAM

kvtier's help texts come in two shapes, and both are read here:

  * man-like: column-0 headings in capitals (NAME, SYNOPSIS, OPTIONS, ...),
    text indented by four spaces (kvtierd, kvtier and its commands);
  * usage-first: "usage: ..." lines, prose at column 0, lowercase headings
    ending in ':' ("options:", "input:"), options indented by two
    (kvtier-bench).

Within a section, an option line ("-x, --long ARG   what it does"; lines
indented deeper continue it) becomes a tagged paragraph, as does a command
line under a COMMANDS heading; a paragraph indented deeper than the section's
text (an example) is kept as it is, as are SYNOPSIS and EXAMPLES; the rest is
filled prose.

Each --sub CMD adds `PROGRAM CMD --help` as a section of the page, and
--commands does so for each command the help text lists, so one page documents
a program and its commands. The page carries no date: the same help
text always gives the same bytes."""

import argparse
import re
import subprocess
import sys

CAPS_HEAD = re.compile(r"^[A-Z][A-Z0-9 ]*[A-Z0-9]$")
COLON_HEAD = re.compile(r"^[a-z].*:$")
GAP = re.compile(r"^(\S.*?)(?:\s{2,}(\S.*))?$")
LITERAL_SECTIONS = {"SYNOPSIS", "EXAMPLES", "EXAMPLE"}
TAG_SECTIONS = {"COMMANDS", "COMMAND", "ENVIRONMENT"}  # "NAME   what" lines


def esc(text):
    """One line of text, escaped for roff."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def indent(line):
    return len(line) - len(line.lstrip(" "))


def run_help(argv):
    res = subprocess.run(argv + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         check=False, text=True)
    if res.returncode != 0 or not res.stdout.strip():
        sys.exit("help2roff: '%s --help' exited %d: %s"
                 % (" ".join(argv), res.returncode, res.stderr.strip()))
    return [l.rstrip() for l in res.stdout.expandtabs().splitlines()]


def sections(lines):
    """Split a help text into (title, kind, lines); kind is "caps" for a
    capital heading, "colon" for a "name:" heading, "usage" for the usage
    lines, and "" for text before any heading."""
    out = [["", "", []]]
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.lower().startswith("usage:"):
            width = len(line) - len(line[6:].lstrip())
            usage = [line[6:].strip()]
            while i < len(lines) and lines[i].strip() and indent(lines[i]) >= width - 1:
                usage.append(lines[i].strip())
                i += 1
            out.append(["SYNOPSIS", "usage", usage])
            out.append(["DESCRIPTION", "", []])
        elif CAPS_HEAD.match(line):
            out.append([line, "caps", []])
        elif COLON_HEAD.match(line) and i < len(lines) and indent(lines[i]) > 0:
            out.append([line[:-1], "colon", []])
        else:
            out[-1][2].append(line)
    return [s for s in out if s[2] or s[1] in ("caps", "colon")]


def paragraphs(lines):
    para = []
    for line in lines:
        if line.strip():
            para.append(line)
        elif para:
            yield para
            para = []
    if para:
        yield para


class Page:
    def __init__(self):
        self.out = []

    def emit(self, *lines):
        self.out.extend(lines)

    def literal(self, lines, shift=True):
        cut = min(indent(l) for l in lines if l.strip())
        body = [".nf", *[esc(l[cut:]) for l in lines], ".fi"]
        self.emit(".PP", *([".RS 4", *body, ".RE"] if shift else body))

    def section(self, title, kind, lines, macro):
        if kind == "colon":
            self.emit('.SS "%s"' % esc(title[0].upper() + title[1:]))
        else:
            self.emit('%s "%s"' % (macro, esc(title)))
        if kind == "usage" or title in LITERAL_SECTIONS:
            if lines:
                self.literal(lines, shift=title not in ("SYNOPSIS",))
            return
        base = None
        for para in paragraphs(lines):
            base = self.paragraph(para, title.upper() in TAG_SECTIONS, base)

    def paragraph(self, para, tagged, base):
        """Render one paragraph; returns the section's prose indent."""
        item_at = desc_at = None
        prose = False
        i = 0
        while i < len(para):
            line, ind = para[i].strip(), indent(para[i])
            i += 1
            # options without a short form sit a few columns right of those
            # with one; an item's next lines sit further right still
            new_option = not prose and line.startswith("-") and \
                (item_at is None or ind <= item_at + 4)
            if item_at is not None and ind > item_at and not new_option:
                self.emit(esc(line))               # an item's next line
                continue
            tag, desc = GAP.match(line).group(1, 2)
            if desc is None and desc_at and len(para[i - 1]) > desc_at and \
                    para[i - 1][desc_at - 1] == " " and para[i - 1][desc_at] != " ":
                # a tag too long for the column, one space before its text
                tag, desc = para[i - 1][:desc_at].strip(), para[i - 1][desc_at:]
            if ind > 0 and (new_option or (tagged and desc and item_at in (None, ind))):
                # a tag list broken over lines: "--a N, --b N," then "--c N  what"
                while desc is None and tag.endswith(",") and i < len(para) and \
                        indent(para[i]) == ind and para[i].strip().startswith("-"):
                    more, desc = GAP.match(para[i].strip()).group(1, 2)
                    tag += " " + more
                    i += 1
                self.emit(".TP", "\\fB%s\\fR" % esc(tag))
                if desc:
                    self.emit(esc(desc))
                    desc_at = len(para[i - 1]) - len(desc)
                item_at = ind if item_at is None else min(item_at, ind)
                prose = False
                continue
            if base is None:
                base = ind
            if ind > base and not prose:
                self.literal(para[i - 1:])         # an example: kept as it is
                return base
            if not prose:
                self.emit(".PP")
                prose, item_at = True, None
            self.emit(esc(line))
        return base


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--section", required=True, help="manual section: 1, 8, ...")
    ap.add_argument("--out", required=True, help="page to write")
    ap.add_argument("--summary", help="NAME line when the help text has no NAME section")
    ap.add_argument("--version", default="", help="shown in the page footer")
    ap.add_argument("--sub", action="append", default=[], help="a command to add a section for")
    ap.add_argument("--commands", action="store_true",
                    help="add a section for each command the help text lists")
    ap.add_argument("--see-also", action="append", default=[], metavar="NAME(N)")
    ap.add_argument("program")
    a = ap.parse_args()

    name = a.program.rsplit("/", 1)[-1]
    secs = sections(run_help([a.program]))
    page = Page()
    page.emit('.\\" Generated from `%s --help` by packaging/help2roff.py; do not edit.' % name,
              '.TH "%s" "%s" "" "kvtier %s" "kvtier manual"'
              % (esc(name.upper()), a.section, esc(a.version)),
              ".nh", ".ad l")  # paths and options read better unbroken and unstretched
    if not any(kind == "caps" and title == "NAME" for title, kind, _ in secs):
        if not a.summary:
            sys.exit("help2roff: '%s --help' has no NAME section: pass --summary" % name)
        page.emit(".SH NAME", esc("%s - %s" % (name, a.summary)))
    for title, kind, lines in secs:
        if title == "NAME":
            page.emit(".SH NAME", esc(" ".join(l.strip() for l in lines if l.strip())))
        else:
            page.section(title, kind, lines, ".SH")
    subs = list(a.sub)
    if a.commands:
        for title, kind, lines in secs:
            if title.upper() in ("COMMANDS", "COMMAND"):
                subs += [l.split()[0] for l in lines if indent(l) > 0 and GAP.match(l.strip()).group(2)]
        if not subs:
            sys.exit("help2roff: '%s --help' lists no commands" % name)
    for sub in subs:
        page.emit('.SH "%s"' % esc(("%s %s" % (name, sub)).upper()))
        for title, kind, lines in sections(run_help([a.program, sub])):
            if title == "NAME":
                page.emit(".PP", esc(" ".join(l.strip() for l in lines if l.strip())))
            else:
                page.section(title, kind, lines, ".SS")
    if a.see_also:
        refs = []
        for ref in a.see_also:
            m = re.match(r"^(.+)\((\w+)\)$", ref)
            refs.append("\\fB%s\\fR(%s)" % (esc(m.group(1)), m.group(2)) if m else esc(ref))
        page.emit(".SH \"SEE ALSO\"", ",\n".join(refs))
    with open(a.out, "w", encoding="utf-8") as f:
        f.write("\n".join(page.out) + "\n")


if __name__ == "__main__":
    main()
