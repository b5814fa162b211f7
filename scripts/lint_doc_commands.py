#!/usr/bin/env python3
"""lint_doc_commands.py: checks, without running them, that the commands in README.md and
docs/*.md can run as written: the programs they name exist, and every option they pass is one
the program accepts. scripts/check_doc_commands.sh runs the commands of the README and the
guides for real; those of docs/benchmarks.md are benchmarks and runs of minutes or hours, so
this is what keeps them from rotting when a flag or a file changes.

Convention: commands are in ```sh (or ```bash) blocks; a ``` block is output, a ```text block
a synopsis (options in brackets, names in capitals). A ``` block whose first line reads like a
command, or any "$ "-prompted line outside a ```sh block, is an error (put the command in a
```sh block), so no command escapes the check by its fence.

Checked for every simple command of a ```sh block (continuation lines joined, split at &&, ||,
;, |, with leading VAR=value, env, time, sudo and `for ... do` stripped):
  - no placeholder: a token such as [--flag], isa_<level>, ... or a name in capitals
    (MODEL_DIR) (write the command a reader can paste; say the alternatives in the text, or
    put the general form in a ```text synopsis);
  - the input a bt program or script is given (--config, --data, --model) is in the
    repository (or, for --config, a name under configs/) or is made by an earlier command
    of the same file: a path that an earlier command names (not as its input), or a path
    inside a folder that one writes (--out, --local-dir, --save, --output, output.dir=, or
    the output.dir of the run config given to bt-train);
  - no path of one machine (/work/..., /root/...);
  - build/PROG, ./build-NAME/PROG: the program is one the build makes (looked up in --build);
    a build directory other than build/ must be set up (`meson setup build-NAME`) earlier in
    the same file;
  - bt-* (an installed program): one the build makes;
  - every --option given to one of bt's programs appears in that program's --help, which
    every bt program prints (and every one refuses an option it does not know, exit 2);
  - scripts/X (run by bash, python3 or /usr/bin/python3, or directly): the file exists, and
    every --option given to it appears in its source;
  - mpirun: the options before the program are mpirun's own and not checked; the program
    after them is checked as above;
  - ninja -C DIR: DIR is build/ or set up earlier in the same file;
  - meson test -C DIR NAME...: every NAME is a registered test or benchmark, every --suite a
    suite (meson introspect of --build).
Inline `code` in prose is often notation (`bt-data synth`, `FD_EPS=<ε>`): only a span that
names a command in full (build/src/..., build/tests/..., scripts/..., meson test, after any
VAR=value) is checked, and only for its names: the program, script, test or suite exists and
takes the options given. A program under build/tests/ that is not a benchmark (a test, or a
test's helper) has no --help: its options are looked up in the C sources it is built from.
Not checked: what a command does when it runs.

Usage: python3 scripts/lint_doc_commands.py [--build DIR] [FILE.md ...]
         (default: README.md and docs/*.md; exit 1 with file:line and the reason per finding)
       python3 scripts/lint_doc_commands.py --list FILE.md ...
         (prints "file:line<TAB>command" for every command of their ```sh blocks, continuation
          lines joined, and a `for ...; do` loop over several lines as one command: what
          scripts/check_doc_commands.sh runs)
       python3 scripts/lint_doc_commands.py --build DIR --selftest FIXTURE.md
         (each line of FIXTURE.md that ends with "# lint: TEXT" must give a finding that
          contains TEXT, and no other line may give one: this shows each rule can fail)
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND_START = re.compile(
    r"^(\./)?(build[\w-]*/|bash |meson |ninja |python3 |/usr/bin/python3 |mpirun |bt-\w+ |"
    r"[A-Z][A-Z0-9_]*=\S|scripts/|git |cd |mkdir |for \w+ in )")
# [--flag], [--flag VALUE] (two tokens), isa_<level>, ...; not the test command's [ and ]
PLACEHOLDER = re.compile(r"^\[(?!\[)\S|\S(?<!\])\]$|<[\w|. -]+>|^\.\.\.$|^[A-Z][A-Z0-9_]+$")
# inline `code` that names a command in full: a program under a build directory, a script,
# or meson test
INLINE_COMMAND = re.compile(r"^([A-Z][A-Z0-9_]*=\S+ )*((\./)?build[\w-]*/(src|tests)/\S+|"
                            r"(bash |python3 |/usr/bin/python3 )?scripts/\S+|meson test)( |$)")
# the options whose value is an input that must exist before the command runs
INPUT_OPTIONS = ("--config", "--data", "--model")
# the options whose value is a folder the command writes into
OUTPUT_OPTIONS = ("--out", "--local-dir", "--save", "--output")
MACHINE_PATH = re.compile(r"^/(work|root|home)/")
WRAPPERS = {"env", "time", "sudo", "exec", "nice"}
SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")"}


class Build:
    """What the build directory makes: programs, tests and suites, each program's --help."""

    def __init__(self, path):
        self.path = path
        self.helps = {}
        self.sources = None  # executable -> its source files, read when first needed
        self.tests, self.suites = set(), set()
        for kind in ("--tests", "--benchmarks"):
            try:
                out = subprocess.run(["meson", "introspect", path, kind], capture_output=True,
                                     text=True, check=True).stdout
            except (OSError, subprocess.CalledProcessError) as e:
                sys.exit(f"lint_doc_commands: cannot read the tests of {path}: {e}")
            for t in json.loads(out):
                self.tests.add(t["name"])
                self.suites.update(s.split(":")[-1] for s in t["suite"])
                self.suites.update(t["suite"])

    def program(self, rel):
        """rel is a path under the build directory (tests/bench_step); None if not built."""
        p = os.path.join(self.path, rel)
        return p if os.path.isfile(p) and os.access(p, os.X_OK) else None

    def sources_text(self, exe):
        """The text of the C sources an executable is built from (meson introspect)."""
        if self.sources is None:
            self.sources = {}
            out = subprocess.run(["meson", "introspect", self.path, "--targets"],
                                 capture_output=True, text=True, check=True).stdout
            for t in json.loads(out):
                srcs = [f for ts in t.get("target_sources", []) for f in ts.get("sources", [])]
                for f in t.get("filename", []):
                    self.sources[os.path.realpath(f)] = srcs
        text = ""
        for f in self.sources.get(os.path.realpath(exe), []):
            with open(f, encoding="utf-8", errors="replace") as fh:
                text += fh.read()
        return text

    def installed(self, name):
        hits = glob.glob(os.path.join(self.path, "src", "*", name))
        return hits[0] if hits else None

    def help_text(self, prog):
        if prog not in self.helps:
            env = dict(os.environ, OMP_NUM_THREADS="1", BT_CONFIGS=os.path.join(ROOT, "configs"))
            r = subprocess.run([prog, "--help"], capture_output=True, text=True, env=env,
                               timeout=60, errors="replace")
            self.helps[prog] = (r.returncode, r.stdout + r.stderr)
        return self.helps[prog]


def read_text(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def fenced_blocks(text):
    """(language, [(line number, line)]) for every fenced block."""
    blocks, lang, body = [], None, []
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            if lang is None:
                lang, body = line[3:].strip(), []
            else:
                blocks.append((lang, body))
                lang = None
            continue
        if lang is not None:
            body.append((n, line))
    return blocks


def prose_lines(text):
    """(line number, line) for every line outside the fenced blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            out.append((n, line))
    return out


def joined_lines(body):
    """Lines with their continuations joined: (first line number, text)."""
    out, cur, start = [], "", 0
    for n, line in body:
        if not cur and not line.strip():
            continue
        if not cur:
            start = n
        cur += line.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        out.append((start, cur))
        cur = ""
    return out


def simple_commands(line):
    """Token lists of the simple commands of one shell line (comments dropped)."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
    lex.whitespace_split = True
    lex.commenters = "#"
    raw = shlex.shlex(line, posix=False, punctuation_chars=";&|()")
    raw.whitespace_split = True
    raw.commenters = "#"
    tokens, raws = list(lex), list(raw)
    if len(tokens) != len(raws):  # quoting the two lexers see differently: keep the posix view
        raws = tokens
    cmds, cur = [], []
    for tok, r in zip(tokens, raws):
        if tok in SEPARATORS:
            if cur:
                cmds.append(cur)
            cur = []
        else:
            cur.append((tok, r))
    if cur:
        cmds.append(cur)
    result = []
    for c in cmds:
        words = [t for t, _ in c]
        if words and words[0] == "for":  # for VAR in WORDS; do CMD; done: CMD is the next one
            continue
        while words and words[0] in ("do", "then", "else", "done", "fi"):
            words, c = words[1:], c[1:]
        if words:
            result.append(c)
    return result


def strip_prefix(cmd):
    """Drops VAR=value assignments and wrappers (env, time, sudo, timeout N) in front."""
    i = 0
    while i < len(cmd):
        tok = cmd[i][0]
        if re.match(r"^[A-Za-z_]\w*=", tok) or tok in WRAPPERS:
            i += 1
        elif tok == "timeout" and i + 1 < len(cmd):
            i += 2
        elif tok.startswith("-") and i > 0 and cmd[i - 1][0] == "env":
            i += 1
        else:
            break
    return cmd[i:]


def made_by(words):
    """What a command may make: (paths, folders). Paths: its words (and the values of
    key=value words), except the inputs it is given. Folders, whose files it may write: the
    values of its output options, of output.dir=, and the output.dir of a run config it is
    given."""
    paths, folders = set(), set()
    for i, w in enumerate(words):
        prev = words[i - 1] if i > 0 else ""
        if prev in INPUT_OPTIONS:
            if prev == "--config" and w.endswith(".json") and \
                    os.path.isfile(os.path.join(ROOT, w)):
                try:
                    d = json.loads(read_text(os.path.join(ROOT, w)))
                    folders.add(str(d.get("output", {}).get("dir", "")))
                except (ValueError, AttributeError):
                    pass
            continue
        paths.add(w)
        if "=" in w:
            paths.add(w.split("=", 1)[1])
        if prev in OUTPUT_OPTIONS:
            folders.add(w)
        elif w.startswith("output.dir="):
            folders.add(w.split("=", 1)[1])
    return paths - {""}, {f.rstrip("/") for f in folders} - {""}


def options_of(args):
    """The --options among the arguments (--name=value gives --name)."""
    return [a.split("=", 1)[0] for a in args if a.startswith("--") and len(a) > 2]


class Linter:
    def __init__(self, build):
        self.build = build
        self.findings = []

    def find(self, where, msg):
        self.findings.append((where, msg))

    def lint_file(self, path):
        rel = os.path.relpath(path, ROOT)
        set_up, named = {"build"}, (set(), set())
        text = read_text(path)
        for lang, body in fenced_blocks(text):
            if lang in ("sh", "bash"):
                for n, line in joined_lines(body):
                    self.lint_line(f"{rel}:{n}", line, set_up, named)
                continue
            lines = [(n, l) for n, l in body if l.strip()]
            for n, l in lines:
                if l.startswith("$ "):
                    self.find(f"{rel}:{n}", "a prompted command in an output block: put the "
                              "command in a ```sh block and its output in a ``` block")
            if lang == "" and lines and not lines[0][1].startswith("$ ") and \
                    COMMAND_START.match(lines[0][1]):
                self.find(f"{rel}:{lines[0][0]}", "a command in a ``` block: mark the block "
                          "```sh so that it is checked (``` blocks are output)")
        # inline `code` naming a command in full (prose also uses notation such as
        # `bt-data synth` or `FD_EPS=<ε>`: only the names are checked, see the module text)
        for n, line in prose_lines(text):
            for m in re.finditer(r"`([^`]+)`", line):
                span = m.group(1)
                if INLINE_COMMAND.match(span) and "*" not in span and "..." not in span:
                    self.lint_line(f"{rel}:{n}", span, None, None)

    def lint_line(self, where, line, set_up, named):
        """One line; set_up: the build directories set up so far in the file, named: what its
        earlier commands may have made (made_by: paths, folders). Both None: an inline
        `code` span, whose names alone are checked (no placeholder, input or set-up rule)."""
        inline = set_up is None
        try:
            cmds = simple_commands(line)
        except ValueError as e:
            self.find(where, f"the shell cannot read this line ({e})")
            return
        for cmd in cmds:
            for tok, raw in [] if inline else cmd:
                if PLACEHOLDER.search(raw) and not raw.startswith(("'", '"')):
                    self.find(where, f"a placeholder, not a command a reader can paste: {raw}")
                if MACHINE_PATH.match(tok):
                    self.find(where, f"a path of one machine: {tok}")
            words = [t for t, _ in strip_prefix(cmd)]
            if not inline:
                self.lint_inputs(where, words, named)
                paths, folders = made_by(words)
                named[0].update(paths)
                named[1].update(folders)
            if not words:
                continue
            if words[:2] == ["meson", "setup"]:
                dirs = [w for w in words[2:] if not w.startswith("-")]
                if dirs and not inline:
                    set_up.add(dirs[0].rstrip("/"))
                continue
            if words[0] == "ninja" and "-C" in words[:-1]:
                bdir = words[words.index("-C") + 1].rstrip("/")
                if not inline and bdir not in set_up:
                    self.find(where, f"ninja -C {bdir}: {bdir}/ is not set up before this "
                              f"command in this file (add `meson setup {bdir}` or use build/)")
                continue
            if words[:2] == ["meson", "test"]:
                self.lint_meson_test(where, words[2:])
                continue
            if words[0] == "mpirun":
                words = self.after_mpirun(words[1:])
                if not words:
                    self.find(where, "mpirun without a program of bt's after its options")
                    continue
            if words[0] in ("bash", "sh", "python3", "/usr/bin/python3") and len(words) > 1 \
                    and words[1].startswith("scripts/"):
                self.lint_script(where, words[1], words[2:])
            elif words[0].startswith("scripts/"):
                self.lint_script(where, words[0], words[1:])
            else:
                self.lint_program(where, words[0], words[1:], set_up)

    def lint_inputs(self, where, words, named):
        """The inputs of a bt program or script exist, or an earlier command names them
        (an absolute path is left to the machine-path rule)."""
        if not any(re.match(r"^((\./)?build[\w-]*/|bt-[\w-]+$|scripts/)", w) for w in words):
            return
        for opt, val in zip(words, words[1:]):
            if opt not in INPUT_OPTIONS or val.startswith(("-", "$")) or "{" in val:
                continue
            made = val in named[0] or any(val == f or val.startswith(f + "/") for f in named[1])
            in_repo = os.path.exists(os.path.join(ROOT, val)) or (
                opt == "--config" and os.path.exists(os.path.join(ROOT, "configs", val)))
            if not made and not in_repo and not os.path.isabs(val):
                self.find(where, f"{opt} {val}: not in the repository and not made by an "
                          "earlier command of this file")

    def after_mpirun(self, words):
        for i, w in enumerate(words):
            if re.match(r"^(\./)?build[\w-]*/", w) or re.match(r"^bt-[\w-]+$", w):
                return words[i:]
        return []

    def lint_program(self, where, prog, args, set_up):
        m = re.match(r"^(\./)?(build[\w-]*)/(.+)$", prog)
        if m:
            bdir, rel = m.group(2), m.group(3)
            if set_up is not None and bdir not in set_up:
                self.find(where, f"{bdir}/ is not set up before this command in this file "
                          f"(add `meson setup {bdir}` or use build/)")
            exe = self.build.program(rel)
            if exe is None:
                self.find(where, f"{prog}: the build makes no program {rel}")
                return
        elif re.match(r"^bt-[\w-]+$", prog):
            exe = self.build.installed(prog)
            if exe is None:
                self.find(where, f"{prog}: not one of bt's programs")
                return
        else:
            return  # a system command: only the token rules apply
        if re.match(r"^tests/(?!bench_)", rel if m else ""):
            # a test program (or a test's helper): no --help; its arguments are in its source
            self.options_in_text(where, args, self.build.sources_text(exe),
                                 f"{prog}: option {{}} is not in its source")
            return
        rc, text = self.build.help_text(exe)
        if rc != 0:
            self.find(where, f"{prog} --help exits {rc}: every bt program prints its options")
            return
        for opt in options_of(args):
            if not re.search(re.escape(opt) + r"(?![\w-])", text):
                self.find(where, f"{prog}: option {opt} is not in its --help")

    def lint_script(self, where, script, args):
        path = os.path.join(ROOT, script)
        if not os.path.isfile(path):
            self.find(where, f"{script}: no such script")
            return
        self.options_in_text(where, args, read_text(path),
                             f"{script}: option {{}} is not in the script")

    def options_in_text(self, where, args, text, message):
        """Each --option among args appears in text (a script or a test's C sources) as a
        whole word; message has {} for the option."""
        for opt in options_of(args):
            if not re.search(re.escape(opt) + r"(?![\w-])", text):
                self.find(where, message.format(opt))

    def lint_meson_test(self, where, words):
        i = 0
        while i < len(words):
            w = words[i]
            if w in ("-C", "--setup", "--num-processes", "--repeat", "--timeout-multiplier",
                     "--test-args", "--wrapper", "--suite", "--no-suite"):
                if w in ("--suite", "--no-suite") and i + 1 < len(words) and \
                        words[i + 1] not in self.build.suites:
                    self.find(where, f"meson test: no suite '{words[i + 1]}'")
                i += 2
                continue
            if not w.startswith("-") and w not in self.build.tests:
                self.find(where, f"meson test: no test '{w}'")
            i += 1


def selftest(linter, fixture):
    expected = {}
    for n, line in enumerate(read_text(fixture).split("\n"), 1):
        m = re.search(r"# lint: (.+)$", line)
        if m:
            expected[n] = m.group(1).strip()
    linter.lint_file(fixture)
    got = {}
    for where, msg in linter.findings:
        got.setdefault(int(where.rsplit(":", 1)[1]), []).append(msg)
    bad = 0
    for n, text in sorted(expected.items()):
        if not any(text in msg for msg in got.get(n, [])):
            print(f"selftest: line {n}: expected a finding with '{text}', got {got.get(n)}")
            bad += 1
    for n, msgs in sorted(got.items()):
        if n not in expected:
            print(f"selftest: line {n}: unexpected finding {msgs}")
            bad += 1
    print(f"lint_doc_commands selftest: {len(expected)} expected finding(s), "
          f"{'ok' if bad == 0 else f'{bad} wrong'}")
    return 1 if bad else 0


def loops_joined(lines):
    """Lines with each `for ...; do` written over several lines, down to its `done`, joined
    into one command (`for X in A B; do CMD1; CMD2; done`): (first line number, text)."""
    out, parts, depth, start = [], [], 0, 0
    for n, line in lines:
        text = " ".join(line.split())
        opens = text.startswith("for ") and text.endswith("do")
        if not depth and not opens:
            out.append((n, text))
            continue
        if not depth:
            start = n
        depth += 1 if opens else 0
        depth -= 1 if text == "done" else 0
        parts.append(text)
        if not depth:
            joined = parts[0]
            for prev, cur in zip(parts, parts[1:]):
                joined += (" " if prev.endswith("do") else "; ") + cur
            out.append((start, joined))
            parts = []
    out.extend((start, p) for p in parts)  # a loop left open: its lines as they are
    return out


def list_commands(files):
    for path in files:
        rel = os.path.relpath(os.path.abspath(path), ROOT)
        for lang, body in fenced_blocks(read_text(path)):
            if lang in ("sh", "bash"):
                for n, line in loops_joined(joined_lines(body)):
                    print(f"{rel}:{n}\t{line}")
    return 0


def main():
    if sys.argv[1:2] == ["--list"]:
        return list_commands(sys.argv[2:])
    args, build, fixture = sys.argv[1:], os.path.join(ROOT, "build"), None
    files = []
    while args:
        a = args.pop(0)
        if a in ("--build", "--selftest") and not args:
            print(f"lint_doc_commands: {a} needs a value (--build DIR, --selftest FIXTURE.md)",
                  file=sys.stderr)
            return 2
        if a == "--build":
            build = args.pop(0)
        elif a == "--selftest":
            fixture = args.pop(0)
        else:
            files.append(a)
    linter = Linter(Build(os.path.abspath(build)))
    if fixture:
        return selftest(linter, fixture)
    if not files:
        files = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs",
                                                                                  "*.md")))
    for f in files:
        linter.lint_file(f)
    for where, msg in linter.findings:
        print(f"{where}: {msg}")
    print(f"lint_doc_commands: {len(files)} file(s), {len(linter.findings)} finding(s)")
    return 1 if linter.findings else 0


if __name__ == "__main__":
    sys.exit(main())
