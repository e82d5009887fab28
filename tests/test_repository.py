"""The repository's promises: the README's commands are the ones CI runs."""

import ast
import doctest
import importlib
import importlib.metadata
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_commands():
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)


def test_readme_opens_with_two_commands():
    commands = readme_commands()
    assert len(commands) >= 2
    setup, tests = commands[0], commands[1]
    assert "pip install -q torch==2.13.0" in setup and "skcontrast" in setup
    # `pytest`, not `python -m pytest`: the latter puts the source tree first on sys.path
    assert tests.rstrip().endswith("&& pytest") and "python -m build" in tests


def test_ci_runs_the_readme_test_command_verbatim():
    test_command = readme_commands()[1].strip()
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_command in ci_lines


def test_torch_is_installed_before_the_package_everywhere():
    setup, tests = readme_commands()[:2]
    assert setup.index("torch==2.13.0") < setup.index("pip install -q -e")
    assert tests.index("torch==2.13.0") < tests.index("dist/*.whl")


def test_the_demo_run_time_is_stated_the_same_everywhere():
    """README, quickstart and ``skcontrast demo --help`` say one measured thing."""
    from skcontrast._cli import build_parser

    said = "about three minutes"
    help_text = " ".join(build_parser().format_help().split())
    sources = {"README.md": (ROOT / "README.md").read_text(),
               "docs/quickstart.rst": (ROOT / "docs" / "quickstart.rst").read_text(),
               "skcontrast --help": help_text}
    for where, text in sources.items():
        assert said in " ".join(text.lower().split()), where


def test_the_readme_and_quick_start_show_the_summary_the_demo_writes():
    """docs/_static/demo_table.txt is ``skcontrast-demo/table.txt`` of a full
    ``skcontrast demo`` (copy it there after a change that moves the numbers): the
    README shows it verbatim and the quick start includes that file; the demo's quick
    run (tests/test_cli_examples.py) checks that it still prints these columns."""
    stored = (ROOT / "docs" / "_static" / "demo_table.txt").read_text().rstrip("\n")
    assert f"```\n{stored}\n```" in (ROOT / "README.md").read_text()
    assert "literalinclude:: _static/demo_table.txt" in \
        (ROOT / "docs" / "quickstart.rst").read_text()


def test_the_suite_tests_the_installed_package_unless_it_is_an_editable_install():
    """Under .ci/run the wheel is installed and the tests import it, not the source."""
    import importlib.metadata
    import json
    import sysconfig

    import skcontrast

    installed = list(importlib.metadata.distributions(
        name="skcontrast", path=[sysconfig.get_paths()["purelib"]]))
    if not installed:
        pytest.skip("skcontrast is not installed in this environment (the source tree)")
    direct = json.loads(installed[0].read_text("direct_url.json") or "{}")
    if direct.get("dir_info", {}).get("editable", False):
        pytest.skip("an editable install (the inner loop): the source tree is the package")
    assert not Path(skcontrast.__file__).resolve().is_relative_to(ROOT / "skcontrast")
    assert (Path(skcontrast.__file__).parent / "py.typed").is_file()


def package_modules():
    """Every module of the imported package (under CI the installed wheel, not the source
    tree), but ``__main__``, which runs the command line when it is imported."""
    import skcontrast

    return ["skcontrast", *(info.name for info in
                            pkgutil.walk_packages(skcontrast.__path__, "skcontrast.")
                            if info.name.rpartition(".")[2] != "__main__")]


def extra_installing(module):
    """The extra of skcontrast's metadata that installs the top-level ``module`` (a
    feature's extra rather than ``test``, which lists them all), or ``None``."""
    wanted = module.split(".")[0].replace("_", "-").lower()
    extras = []
    for requirement in importlib.metadata.requires("skcontrast") or []:
        name = re.split(r"[^A-Za-z0-9._-]", requirement, maxsplit=1)[0]
        extra = re.search(r'extra == "([^"]+)"', requirement)
        if extra and name.replace("_", "-").lower() == wanted:
            extras.append(extra.group(1))
    return next((e for e in extras if e != "test"), extras[0] if extras else None)


def test_a_missing_optional_dependency_is_told_by_its_extra():
    assert extra_installing("igraph") == "graph"
    assert extra_installing("sentence_transformers.losses") == "sentence-transformers"
    assert extra_installing("numpy") is None  # required: its absence is a failure


@pytest.mark.parametrize("name", package_modules())
def test_every_docstring_example_runs(name):
    """The ``>>>`` examples of every docstring of the package show what they give. A
    module that needs an optional dependency which is not installed is skipped, saying
    which extra installs it; any other import error fails."""
    import torch

    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        extra = extra_installing(error.name or "")
        if extra is None:
            raise
        pytest.skip(f"{name} needs {error.name}, which skcontrast[{extra}] installs")
    runner, report = doctest.DocTestRunner(), []
    threads = torch.get_num_threads()
    # the examples are tiny: a pool of threads only waits on shared cores (one example
    # took 23 s with two threads on a busy two-core machine, 1 s with one)
    torch.set_num_threads(1)
    try:
        for test in doctest.DocTestFinder().find(module, name):
            runner.run(test, out=report.append)
    finally:
        torch.set_num_threads(threads)
    assert not runner.failures, "".join(report)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports: at the top, inside functions and for
    type checkers only (under ``if TYPE_CHECKING:``: a type checker follows them, and a
    cycle there is one a reader has to untangle too). ``from p import m``, ``m`` a
    module, imports ``m``; ``from p import name`` of anything else imports ``p``."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = here[:len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules
                           else module for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
        graph[name] = found
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph``: its strongly connected components of two or more
    modules (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_package_has_no_import_cycle():
    """No cycle, the imports for type checkers included (``_checks``, ``_data`` and
    ``_items`` were one, through ``View``; the package and its self-check another)."""
    graph = import_graph(ROOT / "skcontrast")
    assert "skcontrast.losses._objects" in graph["skcontrast.losses._registry"]
    assert strongly_connected(graph) == []
    # the checker finds the cycle the loss package had: through the registry, every
    # registered loss's module (read from the registry, so a new loss adds itself)
    from skcontrast.losses._registry import REGISTERED

    graph["skcontrast.losses._batched"].add("skcontrast.losses._registry")
    modules = {cls.__module__ for cls in REGISTERED}
    assert strongly_connected(graph) == [sorted(modules | {
        "skcontrast.losses._batched", "skcontrast.losses._objects",
        "skcontrast.losses._registry", "skcontrast.losses._softmax"})]


def private_imports_across_packages(package: Path) -> list[str]:
    """``importer: target`` for every private module, or private name, that a module
    imports from another package of ``package``. The top-level internal modules
    (``skcontrast._validation``, ``skcontrast._batch``, ...) are shared by every package
    and documented as such; a package's own private modules are its business."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def private(segment: str) -> bool:
        return segment.startswith("_") and not segment.startswith("__")

    found = []
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        own = ".".join(here)
        tree = ast.parse(path.read_text())
        aliases = {}  # names bound to another module of the package
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.level or (
                    node.module or "").startswith(package.name)):
                continue
            base = here[:len(here) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            aliases.update({alias.asname or alias.name: f"{module}.{alias.name}"
                            for alias in node.names
                            if f"{module}.{alias.name}" in modules})
            for target in [module] + [f"{module}.{alias.name}" for alias in node.names]:
                parts = target.split(".")
                # the package a private segment belongs to, and the segment
                for depth in range(1, len(parts)):
                    if private(parts[depth]):
                        owner = ".".join(parts[:depth])
                        outside = owner != package.name and not (own + ".").startswith(
                            owner + ".")
                        if outside:
                            found.append(f"{name}: {target}")
                        break
        for node in ast.walk(tree):  # geometry._unit_rows(...) through an imported module
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    node.value.id in aliases and private(node.attr) and \
                    aliases[node.value.id] != name:
                found.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return sorted(set(found))


def test_no_private_name_is_imported_across_packages():
    """What two packages share is public in one of them (``skcontrast.losses.STRUCTURES``,
    ``Loss.score_batches``) or a top-level internal module; the checker finds the imports
    the package had."""
    import tempfile

    assert private_imports_across_packages(ROOT / "skcontrast") == []

    with tempfile.TemporaryDirectory() as folder:
        fake = Path(folder) / "skcontrast"
        (fake / "losses").mkdir(parents=True)
        (fake / "selectors").mkdir()
        for part in ("__init__.py", "losses/__init__.py", "losses/_objects.py",
                     "selectors/__init__.py", "selectors/_base.py", "_validation.py"):
            (fake / part).write_text("")
        (fake / "selectors" / "_jest.py").write_text(
            "from ..losses._objects import loss_name\nfrom ..losses import _hidden\n"
            "from .._validation import describe\nfrom ._base import partition\n")
        (fake / "geometry.py").write_text("")
        (fake / "metrics.py").write_text("from . import geometry\ngeometry._unit_rows(1)\n")
        assert private_imports_across_packages(fake) == [
            "skcontrast.metrics: skcontrast.geometry._unit_rows",
            "skcontrast.selectors._jest: skcontrast.losses._hidden",
            "skcontrast.selectors._jest: skcontrast.losses._objects",
            "skcontrast.selectors._jest: skcontrast.losses._objects.loss_name"]


def test_the_public_namespace_is_the_api():
    import skcontrast

    names = dir(skcontrast)
    assert "Any" not in names and "annotations" not in names
    assert {"ContrastiveEmbedder", "SupConEmbedder", "load", "losses", "selectors"} <= set(names)
    for name in names:
        getattr(skcontrast, name)  # every listed name resolves


def test_licence_citation_and_version_agree():
    import yaml

    import skcontrast

    assert "BSD 3-Clause" in (ROOT / "LICENSE").read_text()
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["license"] == "BSD-3-Clause"
    assert citation["version"] == skcontrast.__version__
    assert len(citation["references"]) >= 5
    assert f"\n{skcontrast.__version__}" in (ROOT / "docs" / "changes.rst").read_text()


@pytest.mark.slow
def test_the_type_checker_passes_on_the_package_and_sees_the_estimators_parameters(
        tmp_path):
    """One run of mypy: the package passes, and a snippet that gives ``max_epochs`` a
    string is flagged, while skorch-style nested parameters pass. The ``__init__`` is
    made from the parameters' annotated declarations, which editors and type checkers
    read through ``dataclass_transform`` (PEP 681); a table read at import time, as
    once, no editor or type checker sees."""
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from skcontrast import ContrastiveEmbedder, SupConEmbedder\n"
        "ContrastiveEmbedder(max_epochs=10, precision='bfloat16', selection_pass='cached')\n"
        "ContrastiveEmbedder(max_epochs='ten')\n"
        "SupConEmbedder(precision='float64')\n"
        "ContrastiveEmbedder(None, view_split=3, module__dropout=0.1)\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "skcontrast", str(snippet)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    # mypy's cache may report a snippet of the same content by the path it had in an
    # earlier session (another tmp_path), so the file is recognised by its name
    assert all(Path(line.split(":")[0]).name == snippet.name for line in errors), \
        done.stdout[-4000:]
    assert len(errors) == 2, done.stdout[-4000:]
    assert 'snippet.py:3: error: Argument "max_epochs" to "ContrastiveEmbedder" has ' \
           'incompatible type "str"; expected "int"' in errors[0]
    assert 'snippet.py:4: error: Argument "precision" to "SupConEmbedder"' in errors[1]


@pytest.mark.slow
def test_the_distributions_metadata_renders(tmp_path):
    dist = sorted((ROOT / "dist").glob("skcontrast-*")) if (ROOT / "dist").is_dir() else []
    if not dist:  # built by the README's test command; else build here
        built = subprocess.run([sys.executable, "-m", "build", "-q", "--outdir", str(tmp_path),
                                str(ROOT)], capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stderr[-3000:]
        dist = sorted(tmp_path.glob("skcontrast-*"))
    assert {p.suffix for p in dist} >= {".whl", ".gz"}
    done = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                           *map(str, dist)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_public_api_is_fully_annotated():
    import importlib
    import inspect

    modules = ["skcontrast", "skcontrast.losses", "skcontrast.selectors", "skcontrast.metrics",
               "skcontrast.geometry", "skcontrast.datasets", "skcontrast.memory",
               "skcontrast.model_selection", "skcontrast.simulation", "skcontrast.selftest"]
    missing = []
    for name in modules:
        module = importlib.import_module(name)
        for public in getattr(module, "__all__", [n for n in dir(module) if n[0] != "_"]):
            obj = getattr(module, public)
            if not getattr(obj, "__module__", "").startswith("skcontrast"):
                continue
            functions = [(public, obj)] if inspect.isfunction(obj) else [
                (f"{public}.{attr}", f) for attr, f in vars(obj).items()
                if inspect.isfunction(f) and (attr[0] != "_" or attr == "__init__")
            ] if inspect.isclass(obj) else []
            for label, function in functions:
                signature = inspect.signature(function)
                if signature.return_annotation is inspect.Signature.empty or any(
                        p.annotation is inspect.Parameter.empty
                        for p in signature.parameters.values() if p.name not in ("self", "cls")):
                    missing.append(f"{name}.{label}")
    assert missing == []


def test_papers_are_cited_by_authors_and_year_never_by_an_internal_number():
    """A user cannot resolve "seed 002": the package, the guide, the README, the examples
    and the benchmarks cite papers as authors and year, with the references' links."""
    import re

    pattern = re.compile(r"\b[Ss]eeds?\s*0\d\d\b|seed_?0\d\d")  # across line breaks too
    paths = [ROOT / "README.md"] + [
        path for folder in ("skcontrast", "docs", "examples", "benchmarks")
        for path in (ROOT / folder).rglob("*")
        if path.suffix in (".py", ".rst", ".md", ".txt") and "_build" not in path.parts]
    found = [f"{path.relative_to(ROOT)}: {match.group()!r}" for path in paths
             for match in pattern.finditer(path.read_text(encoding="utf-8"))]
    assert not found, found
    references = (ROOT / "docs" / "references.rst").read_text(encoding="utf-8")
    for link in ("2307.05906", "2112.11743", "2306.07960", "2405.18045", "7n2dNATSHeQ"):
        assert link in references


def test_the_readme_tells_a_cpu_only_user_where_the_cpu_build_is():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "download.pytorch.org/whl/cpu" in readme


#: Test files about the repository rather than one module of the package.
REPOSITORY_SUBJECTS = {"repository", "docs", "examples"}


def test_every_test_file_is_named_after_the_module_it_tests():
    """``tests/test_<name>.py`` tests ``skcontrast/**/<name>.py`` (or ``_<name>.py``, or the
    package ``<name>``), so a reader finds a module's tests by its name, never by the issue
    or round that brought them."""
    package = ROOT / "skcontrast"
    modules = {p.stem.lstrip("_") for p in package.rglob("*.py")}
    modules |= {p.name.lstrip("_") for p in package.rglob("*") if p.is_dir()}
    orphans = sorted(p.name for p in (ROOT / "tests").glob("test_*.py")
                     if p.stem.removeprefix("test_") not in modules | REPOSITORY_SUBJECTS)
    assert orphans == []


def private_names_of_their_packages(package: Path) -> list[str]:
    """``module:line: name`` for every private name of skorch, torch or scikit-learn the
    package uses: imported from them (``sklearn.utils._set_output``), reached through
    them (``torch.nn.modules.batchnorm._BatchNorm``),
    or an attribute of their classes (``net._optimizers``, ``grad._indices()``,
    ``scaler._device``), read, set or overridden. An attribute the package gives its own
    objects (``self._table = ...``) is its own, whatever its name."""
    import torch
    import torch.utils.data
    from sklearn.base import BaseEstimator
    from skorch import NeuralNet
    from skorch.callbacks import Callback, PrintLog
    from skorch.history import History

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    weight = torch.zeros(1, requires_grad=True)
    kinds = [NeuralNet, Callback, PrintLog, History, torch.Tensor, torch.nn.Module,
             torch.optim.Optimizer, torch.amp.GradScaler, torch.utils.data.DataLoader,
             torch.utils.data.Sampler, torch.Generator,  # and instances, whose own
             torch.amp.GradScaler("cpu"), torch.optim.Adam([weight]),  # fields count
             torch.nn.Linear(1, 1), torch.utils.data.DataLoader([0])]
    theirs = {n for c in [*kinds, BaseEstimator] for n in dir(c) if private(n)}
    trees = {path: ast.parse(path.read_text()) for path in sorted(package.rglob("*.py"))}

    classes_of = [node for tree in trees.values() for node in ast.walk(tree)
                  if isinstance(node, ast.ClassDef)]
    derived = {"torch", "nn.", "NeuralNet", "Callback", "PrintLog", "Sampler", "Dataset",
               "Optimizer", "Adam", "Module"}
    while True:  # a class deriving from one of theirs, or from such a class of ours
        more = {cls.name for cls in classes_of if cls.name not in derived and any(
            word in ast.unparse(base) for base in cls.bases for word in derived)}
        if not more:
            break
        derived |= more

    def foreign(cls: ast.ClassDef) -> bool:
        return cls.name in derived
    own = {node.attr for tree in trees.values() for node in ast.walk(tree)
           if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)}
    own |= {item.name for cls in classes_of if not foreign(cls) for item in cls.body
            if isinstance(item, ast.FunctionDef)}
    overriding = {id(item) for cls in classes_of if foreign(cls) for item in cls.body
                  if isinstance(item, ast.FunctionDef)}
    found = []
    for path, tree in trees.items():
        where = path.relative_to(package.parent)
        roots = {"torch", "skorch", "sklearn"}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in roots:
                for name in [*node.module.split("."), *(a.name for a in node.names)]:
                    if private(name):
                        found.append(f"{where}:{node.lineno}: {node.module}.{name}")
            elif isinstance(node, ast.Import):
                roots |= {a.asname or a.name for a in node.names
                          if a.name.split(".")[0] in ("torch", "skorch", "sklearn")}
            elif isinstance(node, ast.Attribute):
                chain, inner = [node.attr], node.value
                while isinstance(inner, ast.Attribute):
                    chain.append(inner.attr)
                    inner = inner.value
                through = isinstance(inner, ast.Name) and inner.id in roots and any(
                    private(part) for part in chain)
                if through or (node.attr in theirs and node.attr not in own):
                    found.append(f"{where}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.FunctionDef) and node.name in theirs and \
                    id(node) in overriding:
                found.append(f"{where}:{node.lineno}: def {node.name} (overrides theirs)")
    return sorted(set(found))


def test_no_private_name_of_skorch_torch_or_scikit_learn_is_used():
    """Their private names change without notice between releases: the net overrode
    skorch's ``_set_training`` and ``_get_params_for_optimizer``, read
    ``net._optimizers`` and ``scaler._device``; LazyAdam read ``grad._indices()``; a
    memory overrode torch's ``_load_from_state_dict``; the estimators wrapped output
    through ``sklearn.utils._set_output`` and the balance search subclassed
    ``sklearn.model_selection._search.BaseSearchCV``. The checker finds such uses."""
    import tempfile

    assert private_names_of_their_packages(ROOT / "skcontrast") == []
    with tempfile.TemporaryDirectory() as folder:
        fake = Path(folder) / "skcontrast"
        fake.mkdir()
        (fake / "net.py").write_text(
            "import torch\nfrom skorch import NeuralNet\n"
            "class Net(NeuralNet):\n"
            "    def _set_training(self, training=True):\n"
            "        self._table = 1\n"
            "        return [self._optimizers, self._table]\n"
            "def rows(grad):\n"
            "    return grad._indices(), torch.nn.modules.batchnorm._BatchNorm\n"
            "from sklearn.utils._set_output import ADAPTERS_MANAGER\n")
        assert private_names_of_their_packages(fake) == [
            "skcontrast/net.py:4: def _set_training (overrides theirs)",
            "skcontrast/net.py:6: ._optimizers",
            "skcontrast/net.py:8: ._BatchNorm",
            "skcontrast/net.py:8: ._indices",
            "skcontrast/net.py:9: sklearn.utils._set_output._set_output"]


def test_no_value_passes_through_an_attribute_set_past_setattr():
    """The loss terms reached the step through ``object.__setattr__(net, "_batch_terms",
    ...)``: values pass as return values."""
    uses = [f"{path.relative_to(ROOT)}" for path in (ROOT / "skcontrast").rglob("*.py")
            if "object.__setattr__" in path.read_text()]
    assert uses == []


def test_every_parameter_of_both_estimators_is_declared_and_each_option_set_written_once():
    """Each ``__init__`` parameter has its accepted values in ``_parameter_constraints``
    (11 were checked by hand where read, or not at all); the option sets the checks
    take are the ``Literal`` aliases of the signatures, read back (not restated)."""
    import typing

    from skcontrast import ContrastiveEmbedder, SupConEmbedder
    from skcontrast._estimators import _params

    for cls in (ContrastiveEmbedder, SupConEmbedder):
        names = cls._get_param_names()
        assert [n for n in names if n not in cls._parameter_constraints] == [], cls
        assert set(cls._parameter_constraints) <= set(names), cls
    assert tuple(_params.OPTIMIZERS) == typing.get_args(_params.OptimizerName)
    from skcontrast._estimators._step import PRECISIONS

    assert tuple(PRECISIONS) == typing.get_args(_params.Precision)
    sources = "".join(p.read_text() for p in (ROOT / "skcontrast" / "_estimators").glob("*.py"))
    for alias in (_params.Precision, _params.Passes, _params.TransformFrom,
                  _params.TransformViews, _params.OptimizerName):
        spelled = ", ".join(repr(o) for o in typing.get_args(alias))
        # written once, as the alias (a Literal[...]); nowhere else as a list of options
        assert sources.count(spelled.replace("'", '"')) == 1, spelled


@pytest.mark.slow  # a fresh interpreter
def test_the_package_loads_what_is_used_and_a_fit_on_arrays_no_text_module():
    """``import skcontrast`` loads none of ``text``, ``integrations`` or ``datasets`` (nor
    torch); a fit on arrays loads no module of ``skcontrast.text`` (the optimiser's setup
    imported it, for the text encoder's sparse table), ``integrations`` or
    ``datasets`` (a saved model's recipe list imported them)."""
    script = (
        "import sys\n"
        "import skcontrast\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('skcontrast'))\n"
        "assert loaded == ['skcontrast', 'skcontrast._version'], loaded\n"
        "assert 'torch' not in sys.modules\n"
        "import numpy as np\n"
        "from skcontrast import ContrastiveEmbedder\n"
        "X = np.random.default_rng(0).normal(size=(32, 2, 4)).astype(np.float32)\n"
        "ContrastiveEmbedder(max_epochs=1).fit(X).transform(X)\n"
        "bad = [m for m in sys.modules if m.startswith(('skcontrast.text', "
        "'skcontrast.integrations', 'skcontrast.datasets'))]\n"
        "assert bad == [], bad\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_no_module_of_the_package_is_over_500_lines():
    """A module of 900 lines did several jobs (the net, saving, the estimators' base);
    each file now shows one part of the design."""
    long = {str(path.relative_to(ROOT)): n for path in (ROOT / "skcontrast").rglob("*.py")
            if (n := len(path.read_text().splitlines())) > 500}
    assert long == {}


def overridden(cls):
    """The methods of skorch's ``NeuralNet`` (and its bases) that ``cls`` overrides."""
    from skorch import NeuralNet

    own = {name for base in cls.__mro__[:cls.__mro__.index(NeuralNet)] for name in vars(base)
           if callable(vars(base)[name]) or isinstance(vars(base)[name], property)}
    skorch = {name for base in NeuralNet.__mro__[:-1] for name in vars(base)}
    return sorted(own & skorch)


def replaced(cls):
    """The overrides of skorch's methods in ``cls`` that do not call skorch's own."""
    import inspect

    return [name for name in overridden(cls)
            if "super()" not in inspect.getsource(getattr(cls, name))]


def test_the_net_extends_skorch_and_replaces_few_of_its_methods_none_private():
    """It overrode 19 (the epoch loop, partial_fit, notify, two private ones); now at
    most three overrides replace skorch's method instead of extending it (``super()``),
    each saying why skorch's own cannot serve (the epoch loop, the training step, the
    loss of unlabelled pairs), and none is private."""
    from skcontrast._estimators._net import SelectorNet

    names = overridden(SelectorNet)
    assert len(replaced(SelectorNet)) <= 3, replaced(SelectorNet)
    assert not [n for n in names if n.startswith("_") and not n.endswith("__")], names
    for name in replaced(SelectorNet):
        assert "skorch" in (getattr(SelectorNet, name).__doc__ or ""), name
