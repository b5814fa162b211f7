#!/usr/bin/env python3
"""check_layers.py: the library layering of src/ (docs/architecture.md "Map") as a test.

The libraries form one line: base (src/*.c) -> kernels -> model; data on base only; dist on
base (and MPI) only; train on model, data and dist. This script reads every #include "..." of
src/ and fails, naming the file, the line and the header, when one crosses the line the wrong
way, and when an include does not name its folder: headers of src/kernels, src/model,
src/data, src/dist and src/train are included as "folder/name.h" everywhere (bt_base's, in
src/ itself, by name), so a reader sees which library a name comes from.
A command-line program (a file with main) may also include the libraries below the ones it
links (bt-data reads a model config). No file but src/settings.c calls getenv, setenv or
exec (the environment is read once, there). With a build directory as argument it also checks that
the data library's test binaries link neither oneDNN nor OpenBLAS (ldd).

    python3 tests/check_layers.py [BUILD_DIR]
Exit 0 when the layering holds, 1 otherwise.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
# what each layer may include (besides itself)
ALLOWED = {
    "base": {"base"},
    "kernels": {"base", "kernels"},
    "model": {"base", "kernels", "model"},
    "data": {"base", "data"},
    "dist": {"base", "dist"},
    "train": {"base", "kernels", "model", "data", "dist", "train"},
}
CLI_EXTRA = {"data": {"kernels", "model"}, "model": set(), "train": set()}
GENERATED = {"bt_config.h"}  # the build's configuration header (meson.build)


def layer_of_dir(d):
    return "base" if d == "" else d


def main():
    headers = {}  # bare name -> layer (the two config.h: model/ and train/, by folder)
    files = []
    for dirpath, _, names in os.walk(SRC):
        rel = os.path.relpath(dirpath, SRC)
        d = "" if rel == "." else rel
        if d not in ("",) and d not in ALLOWED:
            continue
        for n in names:
            if n.endswith((".c", ".h", ".inc")):
                files.append((layer_of_dir(d), os.path.join(dirpath, n)))
                if n.endswith((".h", ".inc")):
                    headers[n] = layer_of_dir(d)
    bad = 0
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
    for layer, path in sorted(files):
        text = open(path, encoding="utf-8").read()
        is_cli = re.search(r"^int main\(", text, re.M) is not None
        allowed = ALLOWED[layer] | (CLI_EXTRA.get(layer, set()) if is_cli else set())
        for lineno, line in enumerate(text.splitlines(), 1):
            m = inc.match(line)
            if not m:
                continue
            name = m.group(1)
            if name in GENERATED:
                continue
            if "/" in name:
                folder, base = name.split("/", 1)
                target = layer_of_dir(folder) if folder in ALLOWED else None
            elif os.path.exists(os.path.join(os.path.dirname(path), name)):
                target = layer  # a quoted include finds the including file's folder first
            else:
                target = headers.get(name)
            if "/" not in name and target not in (None, "base"):
                print(f"{os.path.relpath(path, ROOT)}:{lineno}: #include \"{name}\": "
                      f"name its folder (#include \"{target}/{name}\")")
                bad += 1
            if target is None:
                print(f"{os.path.relpath(path, ROOT)}:{lineno}: #include \"{name}\": no such "
                      f"header in src/")
                bad += 1
            elif target not in allowed:
                print(f"{os.path.relpath(path, ROOT)}:{lineno}: #include \"{name}\": {layer} "
                      f"may not include {target} (allowed: {', '.join(sorted(allowed))})")
                bad += 1
    # the environment is read in one place (src/settings.h)
    env_call = re.compile(
        r"\b(getenv|secure_getenv|setenv|unsetenv|putenv|execv|execvp|execl)\s*\(")
    for layer, path in sorted(files):
        if os.path.relpath(path, SRC) == "settings.c":
            continue
        for lineno, line in enumerate(open(path, encoding="utf-8").read().splitlines(), 1):
            code = line.split("//")[0]
            if env_call.search(code) and not code.lstrip().startswith(("*", "/*")):
                print(f"{os.path.relpath(path, ROOT)}:{lineno}: {env_call.search(code).group(1)}: "
                      f"the environment is read and written in src/settings.c alone")
                bad += 1
    if len(sys.argv) > 1:
        tests = os.path.join(sys.argv[1], "tests")
        data_tests = ["test_manifest", "test_sampler", "test_loader", "test_data_bad",
                      "test_shards", "test_image", "test_image_bad", "test_image_formats",
                      "test_image_formats_bad", "test_tokenizer", "test_tokenizer_bad"]
        for t in data_tests:
            exe = os.path.join(tests, t)
            if not os.path.exists(exe):
                print(f"{exe}: missing (build it first)")
                bad += 1
                continue
            out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
            for lib in ("libdnnl", "libopenblas"):
                if lib in out:
                    print(f"{exe}: links {lib}: the data tests must link bt_base only")
                    bad += 1
    n = len(files)
    print(f"{n} files checked, {bad} layering error(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
