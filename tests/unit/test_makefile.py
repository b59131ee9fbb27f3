"""The Makefile and scripts/ensure-system-deps.sh: `make demo` installs the virtualenv and
what its Spark step needs (Java, the JDBC drivers), not the test suite's services
(Chromium, promtool, Patroni, etcd, HAProxy), which `make test` installs."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure-system-deps.sh"
TEST_ONLY = ("chromium", "prometheus", "patroni", "etcd-server", "haproxy")


def planned(target: str, tmp_path: Path) -> list[str]:
    """The commands ``make -n TARGET`` would run (a fresh virtualenv in ``tmp_path``)."""
    # --no-print-directory: under another make (CI's `make test`), make prints where it is
    done = subprocess.run(["make", "-n", "--no-print-directory", target,
                           f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


def test_make_demo_installs_the_virtualenv_and_the_spark_deps_only(tmp_path: Path) -> None:
    commands = planned("demo", tmp_path)
    assert any("pip install" in c for c in commands)
    deps = [c for c in commands if "ensure-system-deps.sh" in c]
    assert deps == ["./scripts/ensure-system-deps.sh spark"]
    assert commands[-1].endswith("-m scripts.demo")


def test_make_test_installs_every_system_dependency(tmp_path: Path) -> None:
    commands = planned("test", tmp_path)
    assert "./scripts/ensure-system-deps.sh all" in commands
    assert any("pytest" in c for c in commands)


def installed_by(mode: str, tmp_path: Path) -> list[str]:
    """The packages the script asks apt-get for on a machine that has none of them (a PATH
    of stand-ins: root, and an apt-get that records its arguments)."""
    shims, record = tmp_path / f"shims-{mode}", tmp_path / f"apt-{mode}.log"
    shims.mkdir()
    (shims / "id").write_text("#!/bin/sh\necho 0\n")
    (shims / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    for shim in shims.iterdir():
        shim.chmod(0o755)
    done = subprocess.run(["/bin/bash", str(SCRIPT), mode], capture_output=True, text=True,
                          timeout=60, check=False,
                          env={"PATH": str(shims), "TXMSG_SKIP_POSTGRES": "1"})
    assert done.returncode == 0, done.stderr
    calls = record.read_text().splitlines() if record.exists() else []
    return [word for call in calls if call.startswith("install")
            for word in call.split() if not word.startswith("-") and word != "install"]


def test_the_spark_mode_installs_java_and_nothing_for_the_tests(tmp_path: Path) -> None:
    spark = installed_by("spark", tmp_path)
    assert "openjdk-17-jre-headless" in spark
    assert not any(name in spark for name in TEST_ONLY)
    everything = installed_by("all", tmp_path)
    assert "openjdk-17-jre-headless" in everything
    assert {"prometheus", "patroni", "etcd-server", "haproxy"} <= set(everything)
