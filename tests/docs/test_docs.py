"""The repository's docs stand alone and stay true to the tree.

- docs/ARCHITECTURE.md's map (its first code block) names only folders that exist, and
  names every folder under src/ and every top-level folder;
- every bench/results path a doc under docs/ cites exists;
- DESIGN.md, FEATURES.md and H3_MODEL.md are cited under docs/, and nothing points at a
  steering folder outside the repository;
- code, scripts and docs carry no internal run numbers ("session 41", "call 3"): dates and
  GPUs instead; nor do result file names (date, GPU, and a UTC time where two would collide;
  bench/results/LOG.md and README.md, the lab record, keep the old names in their prose).

Plain Python, no compiled module: scripts/test.sh runs `python3 tests/docs/test_docs.py`;
pytest collects it too.
"""

import glob
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THIS = os.path.relpath(os.path.abspath(__file__), REPO)


def tracked_files():
    """Repository-relative paths of the tracked files (a walk outside a git checkout)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True,
                             check=True).stdout.decode()
        files = [f for f in out.split("\0") if f]
        if files:
            return [f for f in files if os.path.exists(os.path.join(REPO, f))]
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for root, dirs, names in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build", "__pycache__")) and d != "out"]
        files += [os.path.relpath(os.path.join(root, n), REPO) for n in names]
    return files


def read(rel):
    with open(os.path.join(REPO, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def architecture_map():
    """{path: entry text} of docs/ARCHITECTURE.md's first code block: an entry is a line that
    starts with a repository path, plus the indented lines after it."""
    text = read("docs/ARCHITECTURE.md")
    block = text.split("```", 2)[1]
    entries, current = {}, None
    for line in block.splitlines()[1:]:
        m = re.match(r"([A-Za-z][\w.-]*(?:/[\w.-]+)*)\s+\S", line)
        if m:
            current = m.group(1)
            assert current not in entries, f"the map names {current} twice"
            entries[current] = line
        elif current and line.startswith(" "):
            entries[current] += "\n" + line
    assert entries, "docs/ARCHITECTURE.md has no map (a code block of 'path  what' lines)"
    return entries


def test_every_folder_the_map_names_exists():
    missing = [p for p in architecture_map() if not os.path.isdir(os.path.join(REPO, p))]
    assert not missing, f"docs/ARCHITECTURE.md's map names folders that do not exist: {missing}"


def test_every_src_folder_and_top_level_folder_is_in_the_map():
    entries = architecture_map()
    folders = {os.path.dirname(f) for f in tracked_files()}
    folders |= {os.path.dirname(f) for f in set(folders)}  # folders of folders too
    unnamed = []
    for top in sorted({f.split("/")[0] for f in folders if f and not f.startswith(".")}):
        if not any(p == top or p.startswith(top + "/") for p in entries):
            unnamed.append(top)
    for folder in sorted(f for f in folders if f == "src" or f.startswith("src/")):
        if folder == "src" or folder in entries:
            continue
        # A nested folder is named as "name/" inside its nearest ancestor's entry.
        parts = folder.split("/")
        anchor = next(("/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)
                       if "/".join(parts[:i]) in entries), None)
        rest = parts[len(anchor.split("/")):] if anchor else parts
        if anchor is None or not all(re.search(r"(?<![\w/])" + re.escape(p) + "/",
                                               entries[anchor]) for p in rest):
            unnamed.append(folder)
    assert not unnamed, ("docs/ARCHITECTURE.md's map does not name these folders (add an "
                         f"entry, or 'name/' in the parent's entry): {unnamed}")


def _expand_braces(path):
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(","):
        out += _expand_braces(path[:m.start()] + alt + path[m.end():])
    return out


# Filled by scripts/headline-device.sh; the docs name it before its first run.
PENDING = ("bench/results/headline/",)


def test_every_result_file_the_docs_cite_exists():
    missing = []
    for doc in sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))):
        text = read(os.path.relpath(doc, REPO))
        for ref in re.findall(r"bench/results/(?:[^\s`'\",(){}<>]|\{[^}\s]*\})+", text):
            ref = ref.rstrip(".;:")
            if ref.startswith(PENDING) or ref.endswith("/"):
                continue
            for path in _expand_braces(ref):
                if not glob.glob(os.path.join(REPO, path)):
                    missing.append(f"{os.path.basename(doc)}: {path}")
    assert not missing, f"docs cite result files that do not exist: {missing}"


TEXT = re.compile(r"\.(md|txt|py|sh|cpp|hpp|h|cu|cuh|cmake|toml|json|in)$|CMakeLists\.txt$")


def _text_files(prefixes):
    return [f for f in tracked_files()
            if f != THIS and TEXT.search(f) and (f.startswith(prefixes) or "/" not in f)]


def test_design_features_and_model_are_cited_in_docs_and_nothing_outside():
    outside = re.compile("/".join(["", "work", "shared"]) + r"|\.\./" + "shared")
    bare = re.compile(r"(?<![\w/])(DESIGN|FEATURES|H3_MODEL)\.md")
    bad = []
    for f in _text_files(("src/", "tools/", "tests/", "scripts/", "integrations/", "python/",
                          "docs/", "include/", "examples/", "fuzz/", "bench/")):
        for n, line in enumerate(read(f).splitlines(), 1):
            if outside.search(line):
                bad.append(f"{f}:{n}: points outside the repository")
            for m in bare.finditer(line):
                before = line[:m.start()]
                if not (before.endswith("docs/") or before.endswith('"docs", "')):
                    bad.append(f"{f}:{n}: cites {m.group(0)} without docs/")
    assert not bad, "\n".join(bad)


def test_no_internal_run_numbers_outside_the_results_log():
    run = re.compile(r"\b[Ss]essions? \d|\bdevice calls? \d|\b[Cc]alls? \d+\b(?! *(?:rows|keys))"
                     r"|(?<![\w/.-])s[1-9]\d? call\b")
    bad = []
    for f in _text_files(("src/", "tools/", "tests/", "scripts/", "integrations/", "python/",
                          "docs/", "include/", "examples/", "fuzz/")):
        if f.startswith("bench/"):
            continue  # bench/results/LOG.md and README.md map and keep the old names
        for n, line in enumerate(read(f).splitlines(), 1):
            if run.search(line):
                bad.append(f"{f}:{n}: {line.strip()[:100]}")
    assert not bad, "internal run numbers (say the date and GPU):\n" + "\n".join(bad)


def test_no_result_file_name_carries_a_run_number():
    run = re.compile(r"(?:^|_)(?:s(?:1\d|[2-4]\d)|calls?\d[\d_-]*)(?=[_.]|$)|ptx80call")
    bad = [f for f in tracked_files()
           if f.startswith("bench/results/") and run.search(os.path.basename(f))]
    assert not bad, "result files named by session or call (name them by date and GPU):\n" + \
        "\n".join(bad[:20])


def test_every_result_file_the_kernel_table_cites_exists():
    """src/backend/cuda/kernel_choice.hpp names the result file behind each choice (C++ string
    literals, adjacent ones joined)."""
    text = read("src/backend/cuda/kernel_choice.hpp")
    joined = re.sub(r'"\s*\n\s*"', "", text)
    names = set(re.findall(r"[\w.*{},-]+\.(?:jsonl|json|txt|csv)\b", joined))
    assert names, "kernel_choice.hpp cites no result file"
    missing = [n for n in sorted(names)
               if not any(glob.glob(os.path.join(REPO, "bench", "results", p))
                          for p in _expand_braces(n))]
    assert not missing, f"kernel_choice.hpp cites result files that do not exist: {missing}"


if __name__ == "__main__":
    failed = 0
    for name, fn in sorted(globals().items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                print(f"PASS {name}")
            except AssertionError as e:
                failed += 1
                print(f"FAIL {name}: {e}")
    sys.exit(1 if failed else 0)
