#!/usr/bin/env python3
"""tests/docs_commands.py — run every command the course marks runnable; check its numbers.

  tests/docs_commands.py SOURCE_DIR BUILD_DIR [FILE.md ...]   (ctest: docs_commands)
  tests/docs_commands.py SOURCE_DIR BUILD_DIR --list          the blocks, without running them
  tests/docs_commands.py --self-test                          the harness on made-up chapters
  tests/docs_commands.py --run KEY=VALUE... -- COMMAND ARGS   one command, judged the same way
                                                              (ctest entries of the examples)

A chapter marks a shell block runnable in its fence's info string, with the tolerance of
the checks it prints:

    ```sh runnable tolerance=0.01
    scripts/rgrun -n 2 build/bin/tp_from_scratch
    ```

Each such block (in docs/learn/*.md, or the files given) runs as one bash script
(`set -euo pipefail`) in a scratch folder whose entries link to the source tree's, with
`build` linking to BUILD_DIR — so `build/bin/…` and `scripts/…` mean what a learner's
checkout means by them, and whatever a command writes stays in the scratch folder. A
block fails when it exits non-zero, runs past its timeout, or prints a check outside its
tolerance. A check is a line

    CHECK <name> predicted=<number> measured=<number>

(the programs print them beside their human-readable tables); it holds when
|measured − predicted| <= tolerance · |predicted| (tolerance=, relative) or
<= abs (abs=, absolute). A block that states a tolerance must print at least one check,
and a block that prints checks must state its tolerance: neither can pass by accident.
Other keys: timeout=SECONDS (default 300); attempts=N (default 1) for a block whose checks
are timings on a shared machine: when it exits 0 but a check misses, it runs again, up to N
times in all, and passes if one run's checks all hold (a non-zero exit is never retried).
Prints one line per block and per check; ends with DOCS COMMANDS PASSED or exits 1.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

FENCE = re.compile(r"^```sh runnable(?P<keys>(?: +\w+=[^ ]+)*) *$")
CHECK = re.compile(r"^CHECK (\S+) predicted=(\S+) measured=(\S+)\s*$")
KEYS = {"tolerance", "abs", "timeout", "attempts"}


class Bad(Exception):
    """A malformed document: named by file and line."""


def blocks_of(path):
    """The runnable blocks of one Markdown file: (line, keys, text)."""
    found, inside, keys, start, text = [], False, None, 0, []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not inside:
                m = FENCE.match(line)
                if m:
                    keys = {}
                    for item in m.group("keys").split():
                        key, _, value = item.partition("=")
                        if key not in KEYS:
                            raise Bad(f"{path}:{number}: unknown key '{key}' (known: {sorted(KEYS)})")
                        try:
                            keys[key] = float(value)
                        except ValueError:
                            raise Bad(f"{path}:{number}: {key}={value} is not a number")
                        if key == "attempts" and (keys[key] < 1 or keys[key] != int(keys[key])):
                            raise Bad(f"{path}:{number}: attempts={value} is not a whole number >= 1")
                    inside, start, text = True, number, []
                elif line.startswith("```sh runnable"):
                    raise Bad(f"{path}:{number}: a malformed runnable fence: '{line}'")
            elif line.startswith("```"):
                found.append((start, keys, "\n".join(text)))
                inside = False
            else:
                text.append(line)
    if inside:
        raise Bad(f"{path}:{start}: a runnable block that is never closed")
    return found


def scratch_tree(source, build):
    """A folder whose entries link to the source tree's, and build/ to the build tree."""
    root = tempfile.mkdtemp(prefix="docs-commands-")
    for name in os.listdir(source):
        if name in (".git", "build") or name.startswith("build-"):
            continue
        os.symlink(os.path.join(source, name), os.path.join(root, name))
    os.symlink(os.path.abspath(build), os.path.join(root, "build"))
    return root


def judge(output, keys):
    """The problems with a block's checks ([] when they hold), and their report lines."""
    checks = [CHECK.match(line) for line in output.splitlines()]
    checks = [m for m in checks if m]
    rel, absolute = keys.get("tolerance"), keys.get("abs")
    problems, lines = [], []
    if checks and rel is None and absolute is None:
        problems.append("prints checks but states no tolerance= or abs=")
        return problems, lines
    if not checks and (rel is not None or absolute is not None):
        problems.append("states a tolerance but printed no CHECK line")
    for m in checks:
        name, predicted, measured = m.group(1), m.group(2), m.group(3)
        try:
            p, q = float(predicted), float(measured)
        except ValueError:
            problems.append(f"check {name}: '{predicted}' / '{measured}' are not numbers")
            continue
        diff = abs(q - p)
        ok = (absolute is not None and diff <= absolute) or (rel is not None and diff <= rel * abs(p))
        lines.append(f"    {'ok  ' if ok else 'FAIL'} {name}: predicted {p:g}, measured {q:g}")
        if not ok:
            limit = f"abs {absolute:g}" if absolute is not None else f"{rel:g} of the prediction"
            problems.append(f"check {name}: measured {q:g} is {diff:g} from {p:g} (allowed: {limit})")
    return problems, lines


def self_test():
    """The harness on made-up chapters: each verdict can say yes and no."""
    cases = [  # (markdown, expected exit status, what)
        ("```sh runnable tolerance=0.01\necho CHECK a predicted=100 measured=100.5\n```\n", 0,
         "a check within its tolerance"),
        ("```sh runnable tolerance=0.01\necho CHECK a predicted=100 measured=102\n```\n", 1,
         "a check outside its tolerance"),
        ("```sh runnable abs=0.05\necho CHECK b predicted=0.20 measured=0.24\n```\n", 0,
         "an absolute tolerance"),
        ("```sh runnable\necho CHECK a predicted=1 measured=1\n```\n", 1,
         "checks without a stated tolerance"),
        ("```sh runnable tolerance=0.1\necho no checks here\n```\n", 1,
         "a tolerance without checks"),
        ("```sh runnable\nfalse\necho CHECK a predicted=1 measured=1\n```\n", 1,
         "a failing command"),
        ("```sh runnable timeout=1\nsleep 5\n```\n", 1, "a command past its timeout"),
        ("```sh runnable\ntrue\n```\nplain text\n```sh\nfalse\n```\n", 0,
         "only runnable blocks run"),
        ("```sh runnable tolerance=abc\ntrue\n```\n", 1, "a tolerance that is not a number"),
        ("```sh runnable colour=red\ntrue\n```\n", 1, "an unknown key"),
        ("```sh runnable attempts=0\ntrue\n```\n", 1, "attempts that is not a whole number >= 1"),
        ("```sh runnable\ntrue\n", 1, "a block never closed"),
        ("no blocks at all\n", 1, "a chapter without runnable blocks"),
        ("```sh runnable abs=0.1 attempts=2\nif [ -e tried ]; then m=0.2; else m=0.9; touch tried; fi\n"
         "echo CHECK t predicted=0.2 measured=$m\n```\n", 0, "a timing that holds on its second attempt"),
        ("```sh runnable abs=0.1 attempts=3\necho CHECK t predicted=0.2 measured=0.9\n```\n", 1,
         "a timing that misses on every attempt"),
        ("```sh runnable abs=0.1 attempts=2\nif [ -e crashed ]; then exit 0; fi; touch crashed; exit 3\n```\n",
         1, "a failing command is not retried"),
    ]
    failures = 0
    source = tempfile.mkdtemp(prefix="docs-commands-self-test-")
    os.makedirs(os.path.join(source, "build"))
    for i, (markdown, want, what) in enumerate(cases):
        path = os.path.join(source, f"case{i}.md")
        with open(path, "w", encoding="utf-8") as f:
            f.write(markdown)
        run = subprocess.run([sys.executable, __file__, source, os.path.join(source, "build"), path],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ok = run.returncode == want and "Traceback" not in run.stdout
        failures += not ok
        print(f"{'ok     ' if ok else 'FAILED:'} {what} (exit {run.returncode}, expected {want})")
    runs = [  # (--run arguments, expected exit status, what)
        (["tolerance=0", "--", "echo", "CHECK a predicted=5 measured=5"], 0, "--run: a check that holds"),
        (["tolerance=0", "--", "echo", "CHECK a predicted=5 measured=6"], 1, "--run: a check that fails"),
        (["tolerance=0", "--", "echo", "no checks"], 1, "--run: a tolerance without checks"),
        (["--", "false"], 1, "--run: a failing command"),
    ]
    for args, want, what in runs:
        run = subprocess.run([sys.executable, __file__, "--run", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        ok = run.returncode == want and "Traceback" not in run.stdout
        failures += not ok
        print(f"{'ok     ' if ok else 'FAILED:'} {what} (exit {run.returncode}, expected {want})")
    print(f"docs_commands self-test: {failures} failed")
    if failures == 0:
        print("SELF-TEST PASSED")
    return 1 if failures else 0


def run_one(argv):
    """--run KEY=VALUE... -- COMMAND ARGS: one command judged as a runnable block is."""
    if "--" not in argv:
        print("docs_commands --run: expected KEY=VALUE... -- COMMAND ARGS", file=sys.stderr)
        return 2
    split = argv.index("--")
    keys = {}
    for item in argv[:split]:
        key, _, value = item.partition("=")
        if key not in KEYS:
            raise Bad(f"--run: unknown key '{key}' (known: {sorted(KEYS)})")
        try:
            keys[key] = float(value)
        except ValueError:
            raise Bad(f"--run: {key}={value} is not a number")
    command = argv[split + 1:]
    if not command:
        raise Bad("--run: no command after --")
    try:
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=keys.get("timeout", 300))
        output, status = run.stdout, run.returncode
    except subprocess.TimeoutExpired:
        output, status = "", f"timed out after {keys.get('timeout', 300):g} s"
    print(output, end="")
    problems, lines = judge(output, keys)
    if status != 0:
        problems.insert(0, f"exit status {status}")
    for report in lines:
        print(report)
    for p in problems:
        print(f"problem: {p}")
    print("CHECKS PASSED" if not problems else "CHECKS FAILED")
    return 1 if problems else 0


def main(argv):
    if len(argv) == 2 and argv[1] == "--self-test":
        return self_test()
    if len(argv) >= 2 and argv[1] == "--run":
        return run_one(argv[2:])
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    source, build, rest = os.path.abspath(argv[1]), os.path.abspath(argv[2]), argv[3:]
    listing = "--list" in rest
    files = [f for f in rest if f != "--list"]
    if not files:
        learn = os.path.join(source, "docs", "learn")
        files = sorted(os.path.join(learn, f) for f in os.listdir(learn) if f.endswith(".md"))
    todo = []
    for path in files:
        for line, keys, text in blocks_of(path):
            todo.append((os.path.relpath(path, source), line, keys, text))
    if listing:
        for path, line, keys, text in todo:
            print(f"{path}:{line} {keys}\n  " + text.replace("\n", "\n  "))
        return 0
    root = scratch_tree(source, build)
    failed = 0
    for path, line, keys, text in todo:
        timeout = keys.get("timeout", 300)
        attempts = max(1, int(keys.get("attempts", 1)))
        first = text.strip().splitlines()[0] if text.strip() else "(empty)"
        for attempt in range(1, attempts + 1):
            start = time.monotonic()
            try:
                run = subprocess.run(["bash", "-c", "set -euo pipefail\n" + text], cwd=root,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     timeout=timeout)
                output, status = run.stdout, run.returncode
            except subprocess.TimeoutExpired as e:
                output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
                status = f"timed out after {timeout:g} s"
            seconds = time.monotonic() - start
            problems, lines = judge(output, keys)
            if status != 0:
                problems.insert(0, f"exit status {status}")
            if not problems or status != 0 or attempt == attempts:
                break
            print(f"miss {path}:{line} ({seconds:.1f} s) attempt {attempt} of {attempts}: {problems[0]}")
        verdict = "FAIL" if problems else "ok  "
        tries = f", attempt {attempt} of {attempts}" if attempts > 1 else ""
        print(f"{verdict} {path}:{line} ({seconds:.1f} s{tries}) {first}")
        for report in lines:
            print(report)
        if problems:
            failed += 1
            for p in problems:
                print(f"    problem: {p}")
            print("    output (last 30 lines):")
            for out in output.splitlines()[-30:]:
                print("      " + out)
        sys.stdout.flush()
    print(f"{len(todo) - failed} of {len(todo)} runnable blocks passed")
    if failed == 0 and todo:
        print("DOCS COMMANDS PASSED")
        return 0
    if not todo:
        print("no runnable blocks found")
    return 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (Bad, OSError) as e:
        print(f"docs_commands: error: {e}", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # a bug here must still read as one line, not a traceback
        print(f"docs_commands: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
