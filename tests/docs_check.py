"""What docs/ and the README name must exist: every --flag is an option of
some ktune command (its --help says so), every environment variable is in
`ktune --help`'s table and in docs/cli.md's (and the two tables agree),
every column named in docs/cache.md's schema section is a column (or a
table, a view, a status) of a cache the build makes. Prints what does not
hold, one per line; exits 1 when anything does not.

usage: docs_check.py KTUNE_BINARY"""
import glob
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

# Flags of other programs that the docs quote (NVRTC, compute-sanitizer, pip, torchrun, XLA).
FOREIGN = {"--pch", "--no-cache", "--use_fast_math", "--gpu-architecture", "--include-path", "--pre-include", "--tool", "--racecheck-report", "--error-exitcode",
           "--no-index", "--no-build-isolation", "--system-site-packages", "--cflags", "--libs", "--nproc-per-node",
           "--xla_gpu_enable_command_buffer"}
# The test programs' own option (build/ktune-test, build/ktune-gpu-test, tests/python/test_ops.py).
TESTS = {"--part"}
COMMANDS = ["compile", "tune", "bench", "key", "lint", "demo", "info", "list", "show", "export", "import", "gc"]


def run(args, env=None):
    return subprocess.run(args, capture_output=True, text=True, env=env).stdout


def docs():
    return {p: open(p).read() for p in sorted(glob.glob("docs/*.md")) + ["README.md"]}


def check_flags(binary, texts, bad):
    helps = run([binary, "--help"]) + "".join(run([binary, c, "--help"]) for c in COMMANDS)
    # python -m ktune.prewarm's options too (argparse prints them without torch).
    env = dict(os.environ, PYTHONPATH=os.path.join("tools", "python"))
    helps += run([sys.executable, "-m", "ktune.prewarm", "--help"], env=env)
    known = set(re.findall(r"--[a-z][a-z0-9_-]*", helps))
    for path, text in texts.items():
        for flag in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", text))):
            if flag not in known and flag not in FOREIGN and flag not in TESTS:
                bad.append("%s: %s is no option of any ktune command" % (path, flag))


def env_table(text):
    return set(re.findall(r"^\s*\|?\s*`?((?:KTUNE_[A-Z_]+)|CUDA_HOME)`?\s", text, re.M))


def check_env(binary, texts, bad):
    help_vars = set(re.findall(r"^  ((?:KTUNE_[A-Z_]+)|CUDA_HOME) ", run([binary, "--help"]), re.M))
    cli_section = texts["docs/cli.md"].split("## Environment", 1)
    doc_vars = env_table(cli_section[1]) if len(cli_section) > 1 else set()
    if help_vars != doc_vars:
        bad.append("ktune --help lists %s, docs/cli.md's Environment table %s" % (sorted(help_vars), sorted(doc_vars)))
    for path, text in texts.items():
        for v in sorted(set(re.findall(r"\b(KTUNE_[A-Z_]+|CUDA_HOME)\b", text))):
            if v not in help_vars:
                bad.append("%s: %s is not in ktune --help's table of variables" % (path, v))


def schema_names(binary):
    with tempfile.TemporaryDirectory() as d:
        return schema_names_in(binary, os.path.join(d, "c.db"))


def schema_names_in(binary, path):
    subprocess.run([binary, "import", "-", "--cache", path], check=True, capture_output=True,
                   input=b'{"format": "ktune-cache", "version": 1, "configs": []}')
    db = sqlite3.connect(path)
    names = set()
    for (kind, name) in db.execute("SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view')"):
        names.add(name)
        names.update(r[1] for r in db.execute("PRAGMA table_info(%s)" % name))
    names.update(r[0] for r in db.execute("SELECT name FROM meta"))
    for (sql,) in db.execute("SELECT sql FROM sqlite_master WHERE name = 'trials'"):
        names.update(re.findall(r"'([a-z_]+)'", sql))  # the status values
    db.close()
    return names


def check_columns(binary, texts, bad):
    section = texts["docs/cache.md"].split("## Schema", 1)[1].split("\n## ", 1)[0]
    names = schema_names(binary)
    for word in sorted(set(re.findall(r"`([a-z_]+)`", section))):
        if word not in names:
            bad.append("docs/cache.md: schema: `%s` is no table, view, column or status of the cache" % word)


def main():
    binary = sys.argv[1]
    texts, bad = docs(), []
    check_flags(binary, texts, bad)
    check_env(binary, texts, bad)
    check_columns(binary, texts, bad)
    for b in bad:
        print(b)
    print("%d claims that do not hold" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
