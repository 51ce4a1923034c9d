#!/usr/bin/python3
"""check-layers.py: checks ringvit's module layering and that no files form a cycle.

Two graphs of files, each checked for the same two faults:

  includes  every `#include "..."` of the C, CUDA and header files of the modules,
            resolved as the compiler does (the including file's folder, then the
            module roots and their role folders, as CMakeLists.txt sets them; a
            header generated at configure time resolves to its `.in` template);
  symbols   (with --build) the object files of ringvit_objects and ringvit_cli in
            the build tree: a file that references a global symbol (`nm`: U)
            another file defines (T, D, B, R, ...) depends on that file.

Faults:
  layer     a file depends on a file of a module above its own. The order, bottom
            up: kernels and comm (neither on the other), ingest, tokenize, encoder,
            apps; nothing stands on apps. kernels' rv_status, rv_clock, rv_api and
            rv_version are the bottom of the stack (DESIGN.md): every module may use
            them, and they use no other file of kernels. tests/ and scripts/ are
            not checked (they stand on everything).
  cycle     files that depend on each other, directly or round a loop (a strongly
            connected component of more than one file), named with the symbols or
            includes of every edge inside it.

Modes: strict (the default) prints every finding, marks those of the allow-list
(--allow: one finding key a line, `#` comments) as expected, and exits 1 when a
finding is not allowed or an allow-list entry matches nothing (delete it); --list
prints the findings and exits 0. Each finding's first line starts with its key, the
text an allow-list names.

Usage: check-layers.py --root SRC [--build BUILD] [--allow FILE] [--list] [--nm NM]
Python 3 standard library only."""

import argparse
import os
import re
import subprocess
import sys

# Module -> level; a file may depend on files of its own module or of a lower level.
LEVELS = {"kernels": 1, "comm": 1, "ingest": 2, "tokenize": 3, "encoder": 4, "apps": 5}
# The bottom of the stack inside kernels/ (level 0, module "base").
BASE = {"kernels/rv_status.h", "kernels/rv_status.c", "kernels/rv_clock.h",
        "kernels/rv_clock.c", "kernels/rv_api.h", "kernels/rv_version.h.in"}
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cc", ".cpp", ".hpp", ".h.in")
# The targets whose objects make the symbol graph.
TARGETS = ("ringvit_objects", "ringvit_cli")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
# nm's types of a global definition (uppercase; U is a reference; W, V weak).
STRONG_DEFS = set("ABCDGRSTI")
WEAK_DEFS = set("WV")


def module_of(rel):
    """(module, level) of a path relative to the root; None outside the modules."""
    if rel in BASE:
        return ("base", 0)
    top = rel.split("/", 1)[0]
    if top in LEVELS and "/" in rel:
        if top == "apps" and rel.startswith("apps/python/"):
            return None  # the Python package: not a C module's file
        return (top, LEVELS[top])
    return None


def layer_fault(a, b):
    """Why file a may not depend on file b, or None when it may."""
    ma, mb = module_of(a), module_of(b)
    if ma is None or mb is None or ma[0] == mb[0]:
        return None
    if mb[1] < ma[1]:
        return None
    if mb[1] == ma[1]:
        return "%s and %s are side by side: neither stands on the other" % (ma[0], mb[0])
    return "%s may not stand on %s, a module above it" % (ma[0], mb[0])


def source_files(root):
    """Every C, CUDA and header file of the modules, relative to root."""
    out = []
    for top in sorted(LEVELS):
        base = os.path.join(root, top)
        for d, dirs, files in os.walk(base):
            dirs.sort()
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                if f.endswith(SOURCE_EXT) and module_of(rel) is not None:
                    out.append(rel)
    return out


def include_dirs(root):
    """The folders a quoted include is looked up in after the file's own: every
    module root and its immediate subfolders (the role folders)."""
    dirs = []
    for top in sorted(LEVELS):
        base = os.path.join(root, top)
        if not os.path.isdir(base):
            continue
        dirs.append(top)
        for sub in sorted(os.listdir(base)):
            if os.path.isdir(os.path.join(base, sub)):
                dirs.append(top + "/" + sub)
    return dirs


def resolve(root, rel, name, dirs):
    """The file (relative to root) `#include "name"` in file rel reaches, or None."""
    here = os.path.dirname(rel)
    for d in [here] + dirs:
        for cand in (name, name + ".in"):
            p = os.path.normpath(os.path.join(d, cand)).replace(os.sep, "/")
            if os.path.isfile(os.path.join(root, p)):
                return p
    return None


def include_graph(root):
    """{file: {included file: [the include's text]}} and the unresolved includes."""
    files = source_files(root)
    dirs = include_dirs(root)
    graph, unresolved = {}, []
    for rel in files:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        edges = graph.setdefault(rel, {})
        for name in INCLUDE_RE.findall(text):
            dst = resolve(root, rel, name, dirs)
            if dst is None:
                unresolved.append((rel, name))
            elif dst != rel:
                edges.setdefault(dst, []).append(name)
    return graph, unresolved


def object_files(build, root):
    """{source file relative to the source root: object path} of the targets; an
    object whose source is gone (a file removed since the build) is left out."""
    out = {}
    for t in TARGETS:
        base = os.path.join(build, "CMakeFiles", t + ".dir")
        for d, dirs, files in os.walk(base):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(".o"):
                    path = os.path.join(d, f)
                    src = os.path.relpath(path, base)[: -len(".o")].replace(os.sep, "/")
                    if os.path.isfile(os.path.join(root, src)):
                        out[src] = path
    return out


def read_symbols(nm, objs):
    """{source: (defined strong, defined weak, undefined)} from `nm -P -A`."""
    table = {src: (set(), set(), set()) for src in objs}
    by_path = {path: src for src, path in objs.items()}
    paths = sorted(by_path)
    for i in range(0, len(paths), 64):
        chunk = paths[i:i + 64]
        r = subprocess.run([nm, "-P", "-A"] + chunk, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True)
        if r.returncode != 0:
            raise RuntimeError("%s failed: %s" % (nm, r.stderr.strip()))
        for line in r.stdout.splitlines():
            head, sep, rest = line.partition(": ")
            if not sep or head not in by_path:
                continue
            fields = rest.split()
            if len(fields) < 2:
                continue
            name, kind = fields[0], fields[1]
            strong, weak, undef = table[by_path[head]]
            if kind == "U":
                undef.add(name)
            elif kind in STRONG_DEFS:
                strong.add(name)
            elif kind in WEAK_DEFS:
                weak.add(name)
    return table


def symbol_graph(nm, objs):
    """{file: {file it references: [symbols]}} over the objects."""
    table = read_symbols(nm, objs)
    strong, weak = {}, {}
    for src, (s, w, _) in table.items():
        for name in s:
            strong.setdefault(name, []).append(src)
        for name in w:
            weak.setdefault(name, []).append(src)
    graph = {}
    for src, (_, _, undef) in sorted(table.items()):
        edges = graph.setdefault(src, {})
        for name in sorted(undef):
            owners = strong.get(name) or weak.get(name) or []
            if len(owners) != 1 or owners[0] == src:
                continue  # outside the objects, or inline copies in several files
            edges.setdefault(owners[0], []).append(name)
    return graph


def components(graph):
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = sorted(set(graph) | {d for e in graph.values() for d in e})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, {})))))
                    advanced = True
                    break
                if nxt in on:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def short(items, n=4):
    items = sorted(set(items))
    more = " and %d more" % (len(items) - n) if len(items) > n else ""
    return ", ".join(items[:n]) + more


def findings(graph, kind, verb):
    """[(key, text)] of graph's layer faults and cycles; kind: "include" or "symbol"."""
    out = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            why = layer_fault(a, b)
            if why:
                out.append(("%s-layer %s -> %s" % (kind, a, b),
                            "%s %s %s (%s): %s" % (a, verb, b, short(graph[a][b]), why)))
    for comp in components(graph):
        inside = set(comp)
        lines = ["  %s -> %s: %s" % (a, b, short(graph[a][b]))
                 for a in comp for b in sorted(graph.get(a, {})) if b in inside]
        out.append(("%s-cycle %s" % (kind, " ".join(comp)),
                    "%d files depend on each other:\n%s" % (len(comp), "\n".join(lines))))
    return out


def read_allow(path):
    keys = []
    if path:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    keys.append(" ".join(line.split()))
    return keys


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the source tree")
    ap.add_argument("--build", help="a build tree: check the objects' symbols too")
    ap.add_argument("--allow", help="expected findings, one key a line")
    ap.add_argument("--list", action="store_true", help="print the findings, exit 0")
    ap.add_argument("--nm", default="nm", help="the nm program (default: nm)")
    a = ap.parse_args(argv)
    root = os.path.abspath(a.root)
    if not all(os.path.isdir(os.path.join(root, m)) for m in ("kernels", "encoder")):
        print("check-layers: %s is not a ringvit source tree" % root, file=sys.stderr)
        return 2
    inc, unresolved = include_graph(root)
    found = findings(inc, "include", "includes")
    summary = "%d files, %d includes" % (len(inc), sum(len(e) for e in inc.values()))
    if a.build:
        objs = object_files(os.path.abspath(a.build), root)
        if not objs:
            print("check-layers: no object files of %s under %s/CMakeFiles (build it first)"
                  % (" or ".join(TARGETS), a.build), file=sys.stderr)
            return 2
        try:
            sym = symbol_graph(a.nm, objs)
        except (OSError, RuntimeError) as e:
            print("check-layers: %s" % e, file=sys.stderr)
            return 2
        found += findings(sym, "symbol", "uses")
        summary += ", %d objects, %d file edges" % (len(objs), sum(len(e) for e in sym.values()))
    allow = read_allow(a.allow)
    bad = 0
    for key, text in found:
        expected = key in allow
        bad += not expected
        tag = "expected" if expected and not a.list else "finding"
        print("%s: %s\n  %s" % (tag, key, text.replace("\n", "\n  ")))
    stale = [k for k in allow if k not in {key for key, _ in found}]
    for k in stale:
        print("stale allow-list entry (it matches nothing: delete it from %s): %s" % (a.allow, k))
    for rel, name in unresolved:
        print("note: %s includes \"%s\", not a file of the tree (a system header?)" % (rel, name))
    if a.list:
        print("check-layers: %d findings (%s)" % (len(found), summary))
        return 0
    if bad or stale:
        print("check-layers: FAILED: %d findings not on the allow-list, %d stale entries (%s)"
              % (bad, len(stale), summary))
        return 1
    print("check-layers: OK (%s; %d expected findings)" % (summary, len(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
