"""Every install step prints only what its caller reads: a path, or nothing.

Callers read the scripts' stdout (`prometheus.sh bin prometheus` is a path a test executes; `chromium.sh` is
the browser playwright drives), so an installer's chatter there breaks them, and only on a machine where
the install really runs. Each script runs here in a sandbox where nothing is installed: its PATH holds the
few system tools the scripts use and stand-ins for apt-get, npm, mvn, go, java and node, each of which
writes noise on both stdout and stderr, as the real ones do. apt-get "installs" a package by running its
recipe below, which puts stand-ins of the package's programs in place. The scripts are copied into the
sandbox first (some derive their state folder from where they live), so nothing of the checkout is touched.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# What the scripts call besides the installers. `id` is a stand-in (the postgres user may not exist yet).
SYSTEM_TOOLS = (
    "bash", "cat", "chmod", "cmp", "cp", "cut", "date", "dirname", "basename", "flock", "grep", "head", "ls",
    "mkdir", "mv", "od", "readlink", "rm", "sed", "sleep", "sort", "stat", "tail", "timeout", "touch", "tr",
    "wc", "awk", "env", "find", "xargs",
)  # fmt: skip

NOISE = (
    'echo "Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB] ($(basename "$0") $*)"\n'
    'echo "W: $(basename "$0") on stderr" >&2\n'
)
MVN = (  # copy-dependencies: the broker's jar lands in -DoutputDirectory
    'for a in "$@"; do case $a in -DoutputDirectory=*) d=${a#*=};; esac; done\n'
    'mkdir -p "$d" && touch "$d/kafka_2.13-4.1.1.jar"\n'
)
NPM = (  # npm ci: the locked tree lands in ./node_modules
    'if [ "$1" = ci ]; then\n  mkdir -p node_modules/@asyncapi/parser\n'
    '  echo "{}" > node_modules/@asyncapi/parser/package.json\nfi\n'
)

# Stand-ins put in place by `apt-get install NAME`: {package: {program: body}}.
PACKAGES: dict[str, dict[str, str]] = {
    "prometheus": {"prometheus": NOISE, "promtool": NOISE},
    "openjdk-17-jre-headless": {"java": 'echo "    java.specification.version = 17" >&2\n'},
    "maven": {"mvn": NOISE + MVN},
    "nodejs": {"node": 'case "$*" in *process.versions*) echo 20;; *) echo 3.6.6;; esac\n'},
    "npm": {"npm": NOISE + NPM},
    "postgresql": {
        "initdb": 'echo "initdb (PostgreSQL) 15.18"\n',
        **dict.fromkeys(("pg_ctl", "postgres", "psql", "pg_isready"), NOISE),
    },
    "chromium": {"chromium": ""},
    "fonts-dejavu-core": {"DejaVuSerif.ttf": ""},
    "fonts-wqy-microhei": {"wqy-microhei.ttc": ""},
    "tesseract-ocr-eng": {"eng.traineddata": ""},
    "tesseract-ocr-chi-sim": {"chi_sim.traineddata": ""},
}


def _program(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class Sandbox:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "repo"
        shutil.copytree(ROOT / "scripts", self.root / "scripts")
        self.bin = tmp / "bin"
        self.bin.mkdir()
        for tool in SYSTEM_TOOLS:
            found = shutil.which(tool)
            assert found, f"{tool} is needed by the install scripts"
            (self.bin / tool).symlink_to(found)
        _program(self.bin / "id", "echo 0\n")  # the postgres system user exists
        self.pg_lib = tmp / "usr-lib-postgresql"
        self.chromium = tmp / "usr-bin" / "chromium"
        self.serif = tmp / "fonts" / "dejavu" / "DejaVuSerif.ttf"
        self.font = tmp / "fonts" / "wqy" / "wqy-microhei.ttc"
        self.tessdata = tmp / "tessdata"
        # Where each package's files go: Debian's postgresql puts its programs under
        # /usr/lib/postgresql/15/bin, not in PATH; the rest land in PATH unless the script looks elsewhere.
        destinations = {"postgresql": self.pg_lib / "15" / "bin", "chromium": self.chromium.parent,
                        "fonts-dejavu-core": self.serif.parent, "fonts-wqy-microhei": self.font.parent,
                        "tesseract-ocr-eng": self.tessdata, "tesseract-ocr-chi-sim": self.tessdata}  # fmt: skip
        # Staged packages: apt-get copies stage/NAME/* to the folder named in stage/NAME.dest.
        self.stage = tmp / "stage"
        for package, programs in PACKAGES.items():
            for name, body in programs.items():
                _program(self.stage / package / name, body)
            (self.stage / f"{package}.dest").write_text(str(destinations.get(package, self.bin)))
        install = (
            'for p in "$@"; do\n  case $p in -*|install) continue;; esac\n'
            f"  s={self.stage}/$p\n"
            '  [ -d "$s" ] || { echo "E: Unable to locate package $p" >&2; exit 100; }\n'
            '  mkdir -p "$(cat "$s.dest")" && cp -p "$s"/* "$(cat "$s.dest")"/\ndone\n'
        )
        _program(self.bin / "apt-get", NOISE + '[ "$1" = update ] && exit 0\n' + install)
        _program(self.bin / "go", NOISE + 'while [ $# -gt 0 ]; do [ "$1" = -o ] && touch "$2"; shift; done\n')

    def preinstall(self, *packages: str) -> None:
        subprocess.run([str(self.bin / "apt-get"), "install", *packages], env={"PATH": str(self.bin)}, check=True,
                       capture_output=True)  # fmt: skip

    def run(self, script: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": str(self.bin),
            "HOME": str(self.root.parent),
            "DOCSUM_STATE_DIR": str(self.root / ".run"),
            "DOCSUM_PG_LIB_ROOT": str(self.pg_lib),
            "DOCSUM_CHROMIUM": str(self.chromium),
            "DOCSUM_SERIF_FONT": str(self.serif),
            "DOCSUM_CJK_FONT": str(self.font),
            "DOCSUM_OCR_TESSDATA": str(self.tessdata),
        }
        return subprocess.run(
            [str(self.root / "scripts" / script), *args], env=env, capture_output=True, text=True, timeout=60
        )

    def lines(self, script: str, *args: str) -> list[str]:
        result = self.run(script, *args)
        assert result.returncode == 0, result.stderr
        assert "InRelease" in result.stderr or "on stderr" in result.stderr, "the installer did not run"
        return result.stdout.splitlines()


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the scripts install Debian packages only as root")


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def test_prometheus_bin_prints_only_the_path(sandbox: Sandbox) -> None:
    assert sandbox.lines("prometheus.sh", "bin", "prometheus") == [str(sandbox.bin / "prometheus")]
    # Installed now: the second call installs nothing and prints the same.
    assert sandbox.run("prometheus.sh", "bin", "promtool").stdout.splitlines() == [str(sandbox.bin / "promtool")]


def test_chromium_prints_only_the_browser(sandbox: Sandbox) -> None:
    assert sandbox.lines("chromium.sh") == [str(sandbox.chromium)]


def test_fonts_installs_both_scan_fonts_and_prints_nothing(sandbox: Sandbox) -> None:
    assert sandbox.lines("fonts.sh") == []
    assert sandbox.serif.exists() and sandbox.font.exists()
    # Installed now: the second call installs nothing.
    again = sandbox.run("fonts.sh")
    assert again.returncode == 0 and again.stdout == "" and "InRelease" not in again.stderr


def test_tesseract_installs_both_languages_and_prints_only_their_folder(sandbox: Sandbox) -> None:
    assert sandbox.lines("tesseract.sh") == [str(sandbox.tessdata)]
    assert sorted(p.name for p in sandbox.tessdata.iterdir()) == ["chi_sim.traineddata", "eng.traineddata"]
    # Installed now: the second call installs nothing and prints the same.
    again = sandbox.run("tesseract.sh")
    assert again.stdout.splitlines() == [str(sandbox.tessdata)] and "InRelease" not in again.stderr


def test_postgres_install_prints_nothing(sandbox: Sandbox) -> None:
    assert sandbox.lines("postgres.sh", "install") == []


def test_kafka_install_prints_nothing_and_libs_one_path(sandbox: Sandbox) -> None:
    assert sandbox.lines("kafka.sh", "install") == []
    libs = sandbox.run("kafka.sh", "libs").stdout.splitlines()
    assert libs == [str(sandbox.root / ".run" / "kafka" / "libs-4.1.1")]
    assert (Path(libs[0]) / "kafka_2.13-4.1.1.jar").exists()


def test_asyncapi_install_prints_nothing(sandbox: Sandbox) -> None:
    assert sandbox.lines("asyncapi.sh", "install") == []


def test_node_tools_install_print_nothing(sandbox: Sandbox) -> None:
    sandbox.preinstall("nodejs", "npm")
    assert sandbox.lines("keda-validate/install.sh") == []
    assert sandbox.lines("compose-config/install.sh") == []


def test_a_missing_package_fails_with_apt_s_reason(sandbox: Sandbox) -> None:
    """The stand-in is honest: it refuses what it does not know, and the script fails (no false green)."""
    shutil.rmtree(sandbox.stage / "prometheus")
    result = sandbox.run("prometheus.sh", "bin", "prometheus")
    assert result.returncode != 0
    assert result.stdout == ""
    assert "Unable to locate package prometheus" in result.stderr
