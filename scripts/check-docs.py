#!/usr/bin/python3
"""check-docs.py [FILE.md ...]: every relative link of the documentation resolves.

Reads README.md, docs/*.md and apps/python/README.md (or the files named) and
checks each Markdown link [text](target) outside code: a relative target must
name an existing file or folder (relative to the page), and a #fragment must
be the anchor of a heading of the target page as GitHub makes it (lower case,
punctuation dropped, spaces to hyphens, -1, -2 ... for repeated headings).
Links to http(s) and mailto are not followed. Prints each broken link with its
file and line; exit status 1 when there is one, else 0. Run from anywhere.
"""
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]*(?:\([^()]*\)[^()\s]*)*)\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    fenced = False
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield no, line


def slug(heading):
    """GitHub's anchor of a heading's text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link's text only
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen, out = {}, set()
        for _, line in prose_lines(path):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
        _anchors[path] = out
    return _anchors[path]


def check(page):
    bad = []
    for no, line in prose_lines(page):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # http:, https:, mailto:
            file_part, _, frag = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                bad.append((no, target, "no such file"))
            elif frag and dest.is_file() and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append((no, target, f"no heading #{frag} in {dest.relative_to(ROOT)}"))
    return bad


def main(argv):
    pages = [Path(a).resolve() for a in argv] or (
        [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md")) + [ROOT / "apps/python/README.md"])
    broken = 0
    links = 0
    for page in pages:
        for no, target, why in check(page):
            print(f"{page.relative_to(ROOT)}:{no}: {target}: {why}")
            broken += 1
        links += sum(len(LINK.findall(CODE_SPAN.sub("", l))) for _, l in prose_lines(page))
    print(f"check-docs: {len(pages)} pages, {links} links, {broken} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
