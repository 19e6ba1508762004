"""The image without Docker: its file set, its install, its environment.

`file_set` reads the Dockerfile's WORKDIR / COPY / RUN lines and lays out in
a folder what the image's WORKDIR would hold: the build context (after
.dockerignore, matched by the docker SDK's own `exclude_paths`, no daemon)
copied the way each COPY line says. `install` runs the Dockerfile's
`pip install` commands, in order, into a fresh virtualenv there. The other
RUN commands (useradd, mkdir, chown) only matter to a real container.

`compose_env` is docker-compose.yml's `x-app-env` with `${VAR:-default}`
substituted as compose does, and the required `${VAR:?...}` taken from what
the caller gives.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml
from docker.utils.build import exclude_paths

ROOT = Path(__file__).resolve().parents[2]
# The lock's wheels, kept by `make install` so that installing the pins again
# (here) needs no network: the same files pip would fetch from the index.
WHEELHOUSE = ROOT / ".venv" / "wheelhouse"


class DockerfileError(Exception):
    pass


@dataclass
class Image:
    root: Path  # stands for the image's /
    workdir: PurePosixPath = PurePosixPath("/")
    env: dict[str, str] = field(default_factory=dict)
    from_: str = ""
    pip_runs: list[tuple[PurePosixPath, list[str]]] = field(default_factory=list)

    def path(self, inside: PurePosixPath) -> Path:
        return self.root / str(inside).lstrip("/")

    @property
    def app(self) -> Path:
        return self.path(self.workdir)


def dockerignore_patterns(context: Path) -> list[str]:
    """As the docker SDK reads them (docker/api/build.py)."""
    path = context / ".dockerignore"
    if not path.exists():
        return []
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def context_files(context: Path) -> set[str]:
    """Files (not directories) the build context sends, relative to it."""
    sent = exclude_paths(str(context), dockerignore_patterns(context))
    return {p for p in sent if (context / p).is_file() and not (context / p).is_symlink()}


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    joined, pending = [], ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    out = []
    for line in joined:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def file_set(context: Path, dockerfile: Path, root: Path) -> Image:
    image = Image(root)
    files = context_files(context)
    for word, rest in instructions(dockerfile):
        if word == "FROM":
            image.from_ = rest.split()[0]
        elif word == "WORKDIR":
            image.workdir = image.workdir / rest
            image.app.mkdir(parents=True, exist_ok=True)
        elif word == "ENV":
            for item in shlex.split(rest):
                name, _, value = item.partition("=")
                image.env[name] = value
        elif word == "COPY":
            _copy(image, context, files, shlex.split(rest))
        elif word == "RUN":
            for command in re.split(r"\s*&&\s*", rest):
                args = shlex.split(command)
                if args[:2] == ["pip", "install"]:
                    image.pip_runs.append((image.workdir, args[2:]))
        elif word in {"ADD"}:
            raise DockerfileError(f"{word} is not modelled here: {rest}")
    return image


def _copy(image: Image, context: Path, files: set[str], args: list[str]) -> None:
    if any(a.startswith("--") for a in args):
        raise DockerfileError(f"COPY options are not modelled here: {args}")
    *sources, dest = args
    target = image.workdir / dest if not dest.startswith("/") else PurePosixPath(dest)
    into_dir = dest.endswith("/") or dest in {".", "./"} or len(sources) > 1
    for source in sources:
        if any(c in source for c in "*?["):
            raise DockerfileError(f"COPY globs are not modelled here: {source}")
        src = str(PurePosixPath(source)).strip("/")
        src = "" if src == "." else src
        if src in files:  # one file
            name = PurePosixPath(src).name
            _put(context / src, image.path(target / name if into_dir else target))
            continue
        inside = [f for f in files if not src or f.startswith(src + "/")]
        if not inside:
            # Docker fails the build when a source is missing from the context.
            raise DockerfileError(f"COPY {source}: not in the build context")
        for f in inside:
            relative = f[len(src) + 1 :] if src else f
            _put(context / f, image.path(target / relative))


def _put(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


def install(image: Image, venv: Path, log) -> None:
    """A fresh virtualenv with the Dockerfile's pip commands run in it."""
    major_minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    if f"python:{major_minor}" not in image.from_:
        raise DockerfileError(f"the image is {image.from_}; these tests run Python {major_minor}")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    ensure_wheelhouse(log)
    for workdir, args in image.pip_runs:
        # Only where pip fetches from changes (the lock pins every version).
        offline = ["--no-index", "--find-links", str(WHEELHOUSE)]
        command = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *args]
        log(f"$ (in {workdir}) pip install {' '.join(args)}")
        subprocess.run(
            command + offline, cwd=image.path(workdir), env=clean_env(image.env, venv), check=True
        )


def ensure_wheelhouse(log) -> None:
    marker = WHEELHOUSE / ".lock"
    lock = (ROOT / "requirements.lock").read_text()
    if marker.exists() and marker.read_text() == lock:
        return
    log(f"building {WHEELHOUSE} from requirements.lock (once per lock; needs the index)")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "-r", "requirements.lock"]
        + ["-w", str(WHEELHOUSE)],
        cwd=ROOT,
        check=True,
    )
    marker.write_text(lock)


def clean_env(extra: dict[str, str], venv: Path) -> dict[str, str]:
    """A process environment that knows nothing of this checkout or its venv."""
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "PIP_CERT", "SSL_CERT_FILE")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    env["VIRTUAL_ENV"] = str(venv)
    env.update(extra)
    return env


_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_]\w*)")


def substitute(value: str, given: dict[str, str]) -> str:
    """Compose's interpolation: ${X}, ${X:-default}, ${X-default}, ${X:?err},
    ${X?err}, $X, and $$ for a literal $."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        op, arg = match.group(2), match.group(3)
        value = given.get(name)
        if op in (":-", ":?"):
            missing = not value
        else:
            missing = value is None
        if not missing:
            return value
        if op in (":-", "-"):
            return arg
        if op in (":?", "?"):
            raise KeyError(f"{name}: {arg}")
        return ""

    return _VAR.sub(one, value)


def compose_file() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def required_variables(compose: dict) -> list[str]:
    names = set()
    for value in compose["x-app-env"].values():
        names.update(re.findall(r"\$\{([A-Za-z_]\w*):?\?", str(value)))
    return sorted(names)


def compose_env(compose: dict, given: dict[str, str], service: str | None = None) -> dict[str, str]:
    """x-app-env, or the environment one service gets (its anchors merged)."""
    raw = compose["services"][service]["environment"] if service else compose["x-app-env"]
    return {name: substitute(str(value), given) for name, value in raw.items()}
