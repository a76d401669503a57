#!/usr/bin/env python3
"""The Docker build context as the Dockerfile copies it, installed and smoke-tested.

No Docker engine runs in CI, so this reproduces what `docker build` would see: it reads the
Dockerfile's WORKDIR, COPY and ADD instructions (never a hard-coded list, so that a new package
directory the Dockerfile forgets is caught), filters the sources through `.dockerignore` with
Docker's own matching rules, lays the copies out as the image's file system in a temporary
directory, then runs `.ci/smoke_install.py` on the directory that the Dockerfile's
`RUN pip install` installs from.

It also fails when `.dockerignore` excludes a tracked file that a COPY names, so the image never
silently lacks what the checkout has.

    python3 .ci/docker_context.py
"""

from __future__ import annotations

import glob
import json
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import smoke_install  # noqa: E402  (a sibling script, not a package)

REPO = Path(__file__).resolve().parents[1]


class ContextError(Exception):
    """The Dockerfile or .dockerignore cannot produce a context that installs; one line says why."""


@dataclass(frozen=True)
class Copy:
    """One COPY/ADD from the build context: its sources (context-relative) and image destination."""

    sources: tuple[str, ...]
    dest: str  # absolute in the image; a trailing "/" kept, it means "into this directory"
    line: int


@dataclass(frozen=True)
class Install:
    """The `RUN pip install <target>` and the image directory it runs in."""

    target: str
    workdir: str
    line: int


def instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments), with comments dropped and `\\` continuations joined."""
    out: list[tuple[int, str, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # Docker drops comment lines inside a continuation
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((start, word.upper(), rest.strip()))
    return out


def _arguments(rest: str) -> list[str]:
    """Shell form (`a b c`) or JSON form (`["a", "b", "c"]`), with --flags removed."""
    words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
    return [word for word in words if not word.startswith("--")]


def parse_dockerfile(path: Path) -> tuple[list[Copy], Install]:
    """The COPY/ADD set from the build context and the pip install, with WORKDIR applied."""
    workdir, copies, install = "/", [], None
    for line, word, rest in instructions(path.read_text()):
        if word == "FROM":
            workdir = "/"
        elif word == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, rest))
        elif word in ("COPY", "ADD"):
            if "--from=" in rest:
                continue  # from another stage or image, not from the context
            *sources, dest = _arguments(rest)
            if not sources:
                raise ContextError(f"{path.name}:{line}: {word} without a source")
            for source in (*sources, dest):
                if "$" in source or "://" in source:
                    raise ContextError(f"{path.name}:{line}: cannot reproduce {word} {source!r} (variables or URLs)")
            absolute = posixpath.join(workdir, dest)
            absolute = posixpath.normpath(absolute) + ("/" if dest.endswith("/") or dest in (".", "./") else "")
            copies.append(Copy(tuple(sources), absolute, line))
        elif word == "RUN" and install is None:
            found = re.search(r"\bpip3?\s+install\s+(?:-\S+\s+)*(?P<target>[^\s&;|]+)", rest)
            if found:
                install = Install(found["target"], workdir, line)
    if install is None:
        raise ContextError(f"{path.name}: no `RUN pip install <path>` to reproduce")
    if not copies:
        raise ContextError(f"{path.name}: copies nothing from the build context")
    return copies, install


# --------------------------------------------------------------------------- .dockerignore


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """Docker's (moby/patternmatcher) translation: `**` spans directories, `*` and `?` stay
    within one, `\\` escapes; the pattern is anchored at the context root."""
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if pattern[i + 1 : i + 2] == "*":
                i += 1
                if pattern[i + 1 : i + 2] == "/":
                    i += 1
                out += ".*" if i + 1 >= len(pattern) else "(.*/)?"
            else:
                out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        elif ch == "[":
            end = pattern.find("]", i + 1)
            out += pattern[i : end + 1] if end > i else re.escape(ch)
            i = end if end > i else i
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out + "$")


@dataclass(frozen=True)
class DockerIgnore:
    """`.dockerignore` rules in order; the last pattern that matches a path or a parent decides."""

    rules: tuple[tuple[bool, re.Pattern[str], str], ...]  # (exclude?, regex, original line)

    @classmethod
    def read(cls, path: Path) -> DockerIgnore:
        rules = []
        text = path.read_text() if path.is_file() else ""
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            exclude = not line.startswith("!")
            pattern = posixpath.normpath(line.lstrip("!").strip()).lstrip("/")
            rules.append((exclude, _pattern_regex(pattern), line))
        return cls(tuple(rules))

    def excluded_by(self, relpath: str) -> str | None:
        """The pattern that keeps `relpath` out of the context, or None when it is sent."""
        parts = relpath.split("/")
        prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        decided: str | None = None
        for exclude, regex, line in self.rules:
            if any(regex.match(prefix) for prefix in prefixes):
                decided = line if exclude else None
        return decided


# --------------------------------------------------------------------------- the context


@dataclass
class Context:
    """The checkout seen as a Docker build context."""

    root: Path

    @cached_property
    def ignore(self) -> DockerIgnore:
        return DockerIgnore.read(self.root / ".dockerignore")

    def sources(self, copy: Copy) -> list[str]:
        """Each source of a COPY, its wildcards expanded, as context-relative paths."""
        found: list[str] = []
        for source in copy.sources:
            pattern = posixpath.normpath(source).lstrip("/")
            matches = sorted(glob.glob(pattern, root_dir=self.root)) if glob.has_magic(pattern) else [pattern]
            matches = [m for m in matches if (self.root / m).exists() and not self.ignore.excluded_by(m)]
            if not matches:
                raise ContextError(
                    f"Dockerfile:{copy.line}: COPY source {source!r} is not in the build context"
                    + (
                        f" (.dockerignore: {self.ignore.excluded_by(pattern)})"
                        if self.ignore.excluded_by(pattern)
                        else ""
                    )
                )
            found += matches
        return found

    def files_under(self, relpath: str) -> list[str]:
        """Files under a context path that Docker would send (not excluded by .dockerignore)."""
        path = self.root / relpath
        if path.is_file():
            return [relpath]
        files = (p.relative_to(self.root).as_posix() for p in sorted(path.rglob("*")) if p.is_file())
        return [f for f in files if not self.ignore.excluded_by(f)]

    def tracked_but_ignored(self, copies: list[Copy]) -> list[str]:
        """Tracked files under the COPY sources that .dockerignore would leave out of the image."""
        names = [source for copy in copies for source in copy.sources]
        listed = subprocess.run(
            ["git", "-C", str(self.root), "ls-files", "-z", "--", *names], capture_output=True, text=True, check=True
        ).stdout
        return [
            f"{name} ({self.ignore.excluded_by(name)})"
            for name in listed.split("\0")
            if name and self.ignore.excluded_by(name)
        ]

    def reproduce(self, copies: list[Copy], image: Path) -> None:
        """Lay the copies out under `image` as the image's file system would have them."""
        for copy in copies:
            sources = self.sources(copy)
            into_dir = copy.dest.endswith("/") or len(sources) > 1
            for source in sources:
                for relfile in self.files_under(source):
                    inner = posixpath.relpath(relfile, source) if (self.root / source).is_dir() else None
                    if inner is not None:
                        target = posixpath.join(copy.dest, inner)  # a directory's contents go into dest
                    elif into_dir:
                        target = posixpath.join(copy.dest, posixpath.basename(relfile))
                    else:
                        target = copy.dest
                    out = image / target.lstrip("/")
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(self.root / relfile, out)


def main() -> int:
    context = Context(REPO)
    image = Path(tempfile.mkdtemp(prefix="rca-docker-context-"))
    try:
        copies, install = parse_dockerfile(REPO / "Dockerfile")
        dropped = context.tracked_but_ignored(copies)
        if dropped:
            raise ContextError(f".dockerignore excludes tracked files the Dockerfile copies: {', '.join(dropped)}")
        context.reproduce(copies, image)
        source = image / posixpath.join(install.workdir, install.target).lstrip("/")
        copied = sorted(p.relative_to(image).as_posix() for p in image.rglob("*") if p.is_file())
        print(
            f"docker context: {len(copies)} COPY instructions -> {len(copied)} files; "
            f"RUN pip install {install.target} in {install.workdir} (Dockerfile:{install.line})",
            flush=True,
        )
        return smoke_install.main(["--source", str(source), "--label", "Docker build context"])
    except ContextError as exc:
        print(f"docker context: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(image, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
