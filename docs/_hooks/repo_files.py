"""mkdocs hook: publishes the repository files the documentation links to.

Pages link to benchmark scripts and results, examples and deployment files as
``repo/<path in the repository>`` (e.g. ``repo/benchmarks/README.md``). This hook adds those
files to the build under ``repo/``, so the links resolve and ``mkdocs build --strict`` checks
them like any other link. Markdown files become pages; everything else is copied as is.
"""

from __future__ import annotations

import os

from mkdocs.structure.files import File, InclusionLevel

#: Repository folders whose files the documentation may link to.
FOLDERS = ("benchmarks", "examples", "deploy")
SKIP_DIRS = {"__pycache__", ".pytest_cache"}


def on_files(files, config):
    root = os.path.dirname(config["config_file_path"])
    for folder in FOLDERS:
        top = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                if name.endswith(".pyc"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                file = File.generated(config, f"repo/{rel}", abs_src_path=path,
                                      inclusion=InclusionLevel.NOT_IN_NAV)
                files.append(file)
    return files
