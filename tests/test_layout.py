"""The suite's own layout: no test module imports another. Shared cases and helpers live in
modules of their own (``tests/fuzz.py``, ``tests/integration/bad_input_cases.py``, ...), so
a test module's tests run once, where they are, and its fixtures stay its own."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imports_of_test_modules(source: str) -> list[str]:
    """The imports in ``source`` that name a ``test_*`` module, absolute or relative."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            sep = "" if base.endswith(".") else "."
            names = [base] + [f"{base}{sep}{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names
                  if any(part.startswith("test_") for part in name.split("."))]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {str(path.relative_to(TESTS)): found for path in sorted(TESTS.rglob("*.py"))
                 if (found := imports_of_test_modules(path.read_text()))}
    assert offenders == {}


def test_the_finder_sees_every_form_of_import() -> None:
    source = """
import tests.integration.test_lifecycle
from tests.integration import test_bad_input, helpers
from tests.integration.test_openapi import CHECKS
from .test_client import x
from . import test_messages
from tests.integration.helpers import register
from tests.fuzz import check_problem
"""
    assert imports_of_test_modules(source) == [
        "tests.integration.test_lifecycle",
        "tests.integration.test_bad_input",
        "tests.integration.test_openapi",
        "tests.integration.test_openapi.CHECKS",
        ".test_client",
        ".test_client.x",
        ".test_messages",
    ]


# unit tests of project files, not of a module: the compose file and the deploy/ configs,
# the Makefile and its system-deps script
PROJECT_FILE_TESTS = {"test_compose.py", "test_deploy.py", "test_makefile.py"}


def test_unit_tests_mirror_the_tree() -> None:
    """``tests/unit/<package>/test_<module>.py`` tests ``app/<package>/<module>.py`` (and
    ``tests/unit/test_<module>.py`` a module of ``app`` itself): a maintainer finds a
    module's unit tests where the module is, and a test left behind by a move fails here."""
    app = TESTS.parent / "app"
    unit = TESTS / "unit"
    strays = [str(path.relative_to(unit)) for path in sorted(unit.rglob("test_*.py"))
              if path.name not in PROJECT_FILE_TESTS
              and not (app / path.relative_to(unit).parent
                       / f"{path.stem.removeprefix('test_')}.py").is_file()]
    assert strays == []
    assert {p.name for p in unit.glob("test_*.py")} >= PROJECT_FILE_TESTS


def test_the_development_guide_names_every_module() -> None:
    """``docs/development.md`` is where a maintainer learns what each module holds and may
    import: a module added without a line there fails here."""
    root = TESTS.parent
    guide = (root / "docs" / "development.md").read_text()
    unnamed = [str(path.relative_to(root))
               for package in ("app", "checker", "spark_outbox")
               for path in sorted((root / package).rglob("*.py"))
               if path.name != "__init__.py" and path.name not in guide]
    assert unnamed == []


def test_integration_tests_sit_in_the_folder_of_what_they_exercise() -> None:
    """tests/integration/ holds folders (api/, domain/, storage/, ...) and shared helpers;
    no test module sits loose beside them, and no module defines a ``settings`` fixture
    of its own (a ``@pytest.mark.settings(...)`` mark sets a module's)."""
    integration = TESTS / "integration"
    assert sorted(p.name for p in integration.glob("test_*.py")) == []
    redefined = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py")
                 if "\ndef settings(" in p.read_text()]
    assert redefined == []
