#!/usr/bin/python3
"""test_check_layers.py: scripts/check-layers.py on small trees made for it, so the
check_layers test is known to fail when it should. Each case writes a tree with the
module folders, compiles its C files into the object folders of a build tree as
CMake lays them out (CMakeFiles/ringvit_objects.dir/..., ringvit_cli.dir/...), runs
the check and compares its exit status and the finding keys it prints:

  - two files of encoder that call each other: a symbol cycle naming both;
  - kernels calling a function encoder defines: a symbol layer fault;
  - kernels including a header of encoder, encoder one of apps, comm one of
    kernels' backend (side by side): include layer faults;
  - two headers including each other: an include cycle;
  - a tree that only depends downwards (comm on kernels' rv_status.h, encoder on
    kernels' functions and headers, apps on encoder): no finding, exit 0;
  - the allow-list: an expected cycle passes, a stale entry fails, --list exits 0.

Usage: test_check_layers.py CHECK_SCRIPT CC NM (ctest passes them)."""

import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = sys.argv[1:4] + [os.path.join(HERE, "..", "..", "scripts", "check-layers.py"), "cc",
                        "nm"][len(sys.argv[1:4]):]
SCRIPT, CC, NM = ARGS
MODULES = ("kernels", "comm", "ingest", "tokenize", "encoder", "apps")


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


class Tree:
    """A source tree and a build tree in one temporary folder."""

    def __init__(self, files, build=True):
        self.tmp = tempfile.TemporaryDirectory(prefix="check-layers-")
        self.root = os.path.join(self.tmp.name, "src")
        self.build = os.path.join(self.tmp.name, "build")
        for m in MODULES:
            os.makedirs(os.path.join(self.root, m), exist_ok=True)
        for rel, text in files.items():
            write(self.root, rel, text)
        inc = ["-I" + os.path.join(self.root, m) for m in MODULES]
        for rel in files:
            if not build or not rel.endswith(".c"):
                continue
            target = "ringvit_cli" if rel.startswith("apps/") else "ringvit_objects"
            obj = os.path.join(self.build, "CMakeFiles", target + ".dir", rel + ".o")
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            subprocess.run([CC, "-c"] + inc + ["-o", obj, os.path.join(self.root, rel)],
                           check=True)

    def check(self, *args, build=True):
        cmd = [sys.executable, SCRIPT, "--root", self.root, "--nm", NM] + list(args)
        if build:
            cmd += ["--build", self.build]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True)
        keys = re.findall(r"^(?:finding|expected): (.+)$", r.stdout, re.M)
        return r.returncode, keys, r.stdout

    def close(self):
        self.tmp.cleanup()


class CheckLayers(unittest.TestCase):
    def run_tree(self, files, *args, build=True):
        t = Tree(files, build)
        try:
            return t.check(*args, build=build) + (t,)
        finally:
            t.close()

    def test_symbol_cycle(self):
        rc, keys, out, _ = self.run_tree({
            "encoder/a.c": "int b_fn(int);\nint a_fn(int x) { return x ? b_fn(x - 1) : 0; }\n",
            "encoder/b.c": "int a_fn(int);\nint b_fn(int x) { return x ? a_fn(x - 1) : 1; }\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertIn("symbol-cycle encoder/a.c encoder/b.c", keys, out)
        self.assertIn("encoder/a.c -> encoder/b.c: b_fn", out)
        self.assertIn("encoder/b.c -> encoder/a.c: a_fn", out)

    def test_cycle_through_three_files(self):
        rc, keys, out, _ = self.run_tree({
            "apps/x.c": "int y_fn(void);\nint x_fn(void) { return y_fn(); }\n",
            "apps/y.c": "int z_fn(void);\nint y_fn(void) { return z_fn(); }\n",
            "apps/z.c": "int x_fn(void);\nint z_fn(void) { return x_fn() + 1; }\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertEqual(keys, ["symbol-cycle apps/x.c apps/y.c apps/z.c"], out)

    def test_symbol_of_a_higher_module(self):
        rc, keys, out, _ = self.run_tree({
            "kernels/k.c": "int enc_fn(void);\nint k_fn(void) { return enc_fn(); }\n",
            "encoder/e.c": "int enc_fn(void) { return 3; }\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertEqual(keys, ["symbol-layer kernels/k.c -> encoder/e.c"], out)
        self.assertIn("enc_fn", out)

    def test_symbols_side_by_side(self):
        rc, keys, out, _ = self.run_tree({
            "comm/c.c": "int k_fn(void);\nint c_fn(void) { return k_fn(); }\n",
            "kernels/k.c": "int k_fn(void) { return 2; }\n",
        })
        self.assertEqual(rc, 1, out)
        self.assertEqual(keys, ["symbol-layer comm/c.c -> kernels/k.c"], out)

    def test_include_of_a_higher_module(self):
        rc, keys, out, _ = self.run_tree({
            "kernels/k.c": '#include "rv_top.h"\nint k_fn(void) { return TOP; }\n',
            "encoder/rv_top.h": "#define TOP 1\n",
            "encoder/e.c": '#include "apps.h"\nint e_fn(void) { return APP; }\n',
            "apps/apps.h": "#define APP 2\n",
            "comm/c.c": '#include "rv_backend.h"\nint c_fn(void) { return BE; }\n',
            "kernels/rv_backend.h": "#define BE 3\n",
        }, build=False)
        self.assertEqual(rc, 1, out)
        self.assertEqual(sorted(keys), ["include-layer comm/c.c -> kernels/rv_backend.h",
                                        "include-layer encoder/e.c -> apps/apps.h",
                                        "include-layer kernels/k.c -> encoder/rv_top.h"], out)

    def test_include_cycle(self):
        rc, keys, out, _ = self.run_tree({
            "tokenize/x.h": '#include "y.h"\n',
            "tokenize/y.h": '#include "x.h"\n',
            "tokenize/t.c": '#include "x.h"\n',
        }, build=False)
        self.assertEqual(rc, 1, out)
        self.assertEqual(keys, ["include-cycle tokenize/x.h tokenize/y.h"], out)

    def test_downward_tree_is_clean(self):
        rc, keys, out, _ = self.run_tree({
            "kernels/rv_status.h": "int rv_ok(void);\n",
            "kernels/rv_status.c": '#include "rv_status.h"\nint rv_ok(void) { return 0; }\n',
            "kernels/rv_backend.h": '#include "rv_status.h"\nint k_fn(void);\n',
            "kernels/cpu/k.c": '#include "../rv_backend.h"\nint k_fn(void) { return rv_ok(); }\n',
            "comm/c.c": '#include "rv_status.h"\nint c_fn(void) { return rv_ok(); }\n',
            "encoder/model/e.c": '#include "rv_backend.h"\nint e_fn(void) { return k_fn(); }\n',
            "apps/main.c": "int e_fn(void);\nint c_fn(void);\n"
                           "int main(void) { return e_fn() + c_fn(); }\n",
        })
        self.assertEqual(rc, 0, out)
        self.assertEqual(keys, [], out)
        self.assertIn("check-layers: OK", out)

    def test_allow_list(self):
        files = {
            "encoder/a.c": "int b_fn(void);\nint a_fn(void) { return b_fn(); }\n",
            "encoder/b.c": "int a_fn(void);\nint b_fn(void) { return a_fn(); }\n",
        }
        t = Tree(files)
        try:
            allow = os.path.join(t.tmp.name, "allow")
            write(t.tmp.name, "allow", "# being removed\nsymbol-cycle encoder/a.c encoder/b.c\n")
            rc, keys, out = t.check("--allow", allow)
            self.assertEqual(rc, 0, out)
            self.assertIn("expected: symbol-cycle encoder/a.c encoder/b.c", out)
            write(t.tmp.name, "allow", "symbol-cycle encoder/a.c encoder/b.c\n"
                                       "symbol-cycle encoder/gone.c encoder/b.c\n")
            rc, keys, out = t.check("--allow", allow)
            self.assertEqual(rc, 1, out)
            self.assertIn("stale allow-list entry", out)
            rc, keys, out = t.check("--list")
            self.assertEqual(rc, 0, out)
            self.assertEqual(keys, ["symbol-cycle encoder/a.c encoder/b.c"], out)
        finally:
            t.close()

    def test_no_objects_is_an_error(self):
        rc, keys, out, _ = self.run_tree({"encoder/e.h": "#define E 1\n"})
        self.assertEqual(rc, 2, out)
        self.assertIn("no object files", out)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
