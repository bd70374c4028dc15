#!/usr/bin/env python3
"""scripts/deps.table is what a fresh machine gets: nothing the build, a test
or a script asks for may be missing from it (issue 61: a find_program(...
REQUIRED) the table did not know broke `make run` on a fresh Debian 13).

    deps_table.py SOURCE_DIR

Fails, naming the file and line, when
  - CMake asks for a package, pkg-config module, program or library with
    REQUIRED that no row's probe names;
  - a test, bench or script imports a Python module that is neither the
    standard library's, the project's own, nor a row's `pymod:` (and a test
    imports an optional one outside a try that takes its ImportError);
  - a shell line of a test, of CI, of a script or of the Makefile runs a
    program that a minimal Debian root (debootstrap --variant=minbase: the
    packages of priority "required") lacks, and that no row names, by its
    program or by the package that brings it here;
  - a path under /usr/share that the code or a test reads has no `file:` row;
  - after install-deps.sh (make test runs it first), a build/test/run row's
    probe does not hold on this machine, or its package for this system's
    column is not installed: the table's names are true here.
"""
import ast
import os
import re
import shutil
import subprocess
import sys

PARTS = {"build", "test", "run", "python", "bench", "fuzz", "check", "optional"}
SKIP_DIRS = {".git", ".deps", "build", "python/build", "runs", "shmrun-logs"}


def read_table(path):
    rows, columns, problems = [], [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.startswith("# need "):
                columns = line[1:].split()
                continue
            if line.startswith("#") or not line.strip():
                continue
            cells = line.split()
            if len(cells) != len(columns):
                problems.append(f"{path}:{number}: {len(cells)} cells, the header has {len(columns)}")
                continue
            row = dict(zip(columns, cells))
            row["line"] = number
            kind = row["probe"].split(":", 1)[0]
            if kind not in ("program", "pkgconfig", "cmake", "library", "pymod", "file") or ":" not in row["probe"]:
                problems.append(f"{path}:{number}: probe '{row['probe']}' is not KIND:NAME")
            if row["part"] not in PARTS:
                problems.append(f"{path}:{number}: part '{row['part']}' is not one of {sorted(PARTS)}")
            rows.append(row)
    return rows, columns[3:], problems


def source_files(root, predicate):
    for top, dirs, files in os.walk(root):
        rel_top = os.path.relpath(top, root)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel_top, d)) not in SKIP_DIRS
                   and not d.startswith("build")]
        for name in files:
            rel = os.path.normpath(os.path.join(rel_top, name))
            if predicate(rel):
                yield rel


def cmake_requirements(root):
    """(probe, where) for every REQUIRED find in the CMake files."""
    found = []
    for rel in source_files(root, lambda r: r.endswith("CMakeLists.txt") or r.endswith(".cmake")):
        text = open(os.path.join(root, rel)).read()
        for m in re.finditer(r"\b(find_package|pkg_check_modules|find_program|find_library)\s*\(([^)]*)\)", text):
            call, args = m.group(1), re.sub(r"#[^\n]*", "", m.group(2)).split()
            if "REQUIRED" not in args:
                continue
            where = f"{rel}:{text.count(chr(10), 0, m.start()) + 1}"
            words = [a for a in args[1:] if a not in ("REQUIRED", "IMPORTED_TARGET", "QUIET", "NAMES", "CONFIG")
                     and not re.match(r"^[A-Z_]+$", a) and not a.startswith("$")]
            if call == "find_package":
                found.append((f"cmake:{args[0]}", where))
            elif call == "pkg_check_modules":
                found += [(f"pkgconfig:{re.split(r'[<>=]', w)[0]}", where) for w in words]
            elif call == "find_program":
                found.append((f"program:{words[0]}", where))
            else:
                found.append((f"library:{words[0]}", where))
    return found


def guarded(node, parents):
    """Is the import inside a try whose handler takes ImportError (an
    optional module: the file goes on, or skips, without it)?"""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Try) and node in parent.body:
            for h in parent.handlers:
                names = [h.type] if not isinstance(h.type, ast.Tuple) else h.type.elts
                if h.type is None or any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError",
                                                                               "Exception") for n in names):
                    return True
        node = parent
    return False


def python_imports(root):
    """(module, file, line, guarded) for every import of the project's Python files."""
    local = {os.path.splitext(os.path.basename(r))[0] for r in source_files(root, lambda r: r.endswith(".py"))}
    local |= {d for d in os.listdir(os.path.join(root, "python")) if os.path.isdir(os.path.join(root, "python", d))}
    out = []
    for rel in source_files(root, lambda r: r.endswith(".py")):
        tree = ast.parse(open(os.path.join(root, rel)).read(), rel)
        parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in local and top != "__future__":
                    out.append((top, rel, node.lineno, guarded(node, parents)))
    return out


COMMAND_AT = re.compile(r"(?:^|[|;&(`]|\$\(|\b(?:then|do|else|exec|time|!)\s)\s*([a-z][a-z0-9_.+-]*)(?=\s|$|;|\))")


def shell_lines(root):
    """(text, file, line) of each shell line: tests' and scripts' .sh files,
    .ci/run, the Makefile's recipes; heredocs (another language) left out."""
    files = list(source_files(root, lambda r: r.endswith(".sh") and not r.startswith("tests/fuzz/corpus")))
    files += [".ci/run", "Makefile"]
    for rel in files:
        path = os.path.join(root, rel)
        if not os.path.exists(path):
            continue
        heredoc = None
        for number, line in enumerate(open(path, errors="replace"), 1):
            text = line.rstrip("\n")
            if heredoc:
                if text.strip() == heredoc:
                    heredoc = None
                continue
            m = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", text)
            if m:
                heredoc = m.group(1)
            if rel == "Makefile" and not text.startswith("\t"):
                continue
            code = re.sub(r"(^|\s)#.*$", "", text)
            code = re.sub(r"'[^']*'|\"(?:[^\"\\\\]|\\\\.)*\"", lambda q: " " if "$(" not in q.group(0) else q.group(0), code)
            yield code, rel, number


def package_of(program_path):
    """The package that ships the program (through /etc/alternatives and
    the /bin -> /usr/bin merge), or None."""
    real = os.path.realpath(program_path)
    for p in (real, program_path):
        for name in (p, p[4:] if p.startswith("/usr/") else "/usr" + p):
            r = subprocess.run(["dpkg", "-S", name], capture_output=True, text=True)
            owners = [line.split(":", 1)[0] for line in r.stdout.splitlines() if not line.startswith("diversion")]
            if r.returncode == 0 and owners:
                return owners[0].split(",")[0].strip()
    return None


def priority(package):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Priority}", package], capture_output=True, text=True)
    return r.stdout.strip()


def column_here(columns):
    info = {}
    if os.path.exists("/etc/os-release"):
        for line in open("/etc/os-release"):
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                info[k] = v.strip('"')
    col = f"{info.get('ID', '')}-{info.get('VERSION_ID', '')}"
    return col if col in columns else None


def packages_in(cell):
    return {p for alt in cell.split("|") for p in alt.split(",") if p != "-" and ":" not in p}


def probe_holds(probe):
    kind, name = probe.split(":", 1)
    if kind == "program":
        return shutil.which(name) is not None
    if kind == "pkgconfig":
        return subprocess.run(["pkg-config", "--exists", name]).returncode == 0
    if kind == "file":
        return os.path.exists(name) if name.startswith("/") else True
    if kind == "library":
        r = subprocess.run(["sh", "-c", f"ls /usr/lib/lib{name}.* /usr/lib/*/lib{name}.* /lib/*/lib{name}.* 2>/dev/null"],
                           capture_output=True, text=True)
        return bool(r.stdout.strip())
    return True  # cmake: CMake found it, or this build would not exist; pymod: optional parts only


def main():
    root = os.path.abspath(sys.argv[1])
    rows, columns, problems = read_table(os.path.join(root, "scripts", "deps.table"))
    probes = {r["probe"]: r for r in rows}
    col = column_here(columns)
    table_packages = {p for r in rows for c in columns for p in packages_in(r[c])}

    for probe, where in cmake_requirements(root):
        if probe not in probes:
            problems.append(f"{where}: CMake requires {probe}, which scripts/deps.table does not list")

    for module, rel, line, is_guarded in python_imports(root):
        row = probes.get(f"pymod:{module}")
        if not row:
            problems.append(f"{rel}:{line}: imports {module}, which scripts/deps.table does not list (pymod:{module})")
        elif row["part"] == "optional" and rel.startswith("tests/") and not is_guarded:
            problems.append(f"{rel}:{line}: imports the optional {module} outside a try that takes its ImportError "
                            "(a skip, exit 77, or a check left out)")

    data = re.compile(r"/usr/share/[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*")
    files = [r["probe"][5:] for r in rows if r["probe"].startswith("file:/")]
    for rel in source_files(root, lambda r: r.split("/")[0] in ("src", "tests", "bench", "launcher", "scripts", ".ci")
                            or r in ("Makefile",)):
        if "/fuzz/corpus/" in rel or "/fuzz/regressions/" in rel or rel.endswith(".table"):
            continue
        try:
            text = open(os.path.join(root, rel)).read()
        except UnicodeDecodeError:
            continue
        for m in data.finditer(text):
            if not any(m.group(0).startswith(f) for f in files) and not m.group(0).startswith("/usr/share/openmpi"):
                problems.append(f"{rel}:{text.count(chr(10), 0, m.start()) + 1}: reads {m.group(0)}, "
                                "which no file: row of scripts/deps.table lists")

    have_dpkg = shutil.which("dpkg") is not None
    checked = set()
    if have_dpkg:
        programs = {r["probe"][8:] for r in rows if r["probe"].startswith("program:")}
        for code, rel, line in shell_lines(root):
            for m in COMMAND_AT.finditer(code):
                word = m.group(1)
                if word in programs or word in checked:
                    continue
                path = shutil.which(word)
                if not path or not path.startswith(("/usr/", "/bin/", "/sbin/")):
                    continue  # a builtin, a function, the project's own or a venv's (not here)
                if subprocess.run(["bash", "-c", f"type -t {word}"], capture_output=True, text=True).stdout.strip() in (
                        "builtin", "keyword"):
                    continue
                pkg = package_of(path)
                checked.add(word)
                if pkg and (priority(pkg) == "required" or pkg in table_packages):
                    continue
                problems.append(f"{rel}:{line}: runs {word} ({pkg or 'no package'}), which a minimal root lacks "
                                "and scripts/deps.table does not list")

    if col:
        for r in rows:
            if r["part"] not in ("build", "test", "run"):
                continue
            if not probe_holds(r["probe"]):
                problems.append(f"scripts/deps.table:{r['line']}: {r['need']}: {r['probe']} does not hold here "
                                f"after install-deps.sh ({col})")
            if have_dpkg and r["need"] != "onednn":
                for p in packages_in(r[col].split("|")[0]):
                    if priority(p) == "" :
                        problems.append(f"scripts/deps.table:{r['line']}: {r['need']}: package {p} ({col}) "
                                        "is not installed here")

    for p in problems:
        print(p)
    print(f"deps_table: {len(rows)} rows, {len(cmake_requirements(root))} CMake requirements, "
          f"{len(python_imports(root))} imports, {len(checked)} programs traced to packages"
          f"{'' if have_dpkg else ' (no dpkg here: programs not traced)'}, column {col or 'none for this system'}: "
          f"{len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
