"""The vLLM backend's contract (issue 43): every vLLM name it uses is declared in harness/sampling/vllm_api.py, and
the declared names exist, with the declared parameters, in the installed vLLM.

The first tests need vLLM (they are skipped where it does not import: `make install` leaves it out; install the
`vllm` extra, `pip install -e '.[vllm]'`, which takes torch 2.14.0 from PyPI, or run them in a side environment:
`/path/to/venv-vllm/bin/python -m pytest tests/harness/sampling/test_vllm_contract.py`). The others read sources
only. Nothing here imports a harness module that needs torch or transformers: vllm_api.py is loaded from its file.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BACKEND = ROOT / "harness" / "sampling" / "vllm_rollout.py"


def _load_api():
    spec = importlib.util.spec_from_file_location("regbench_vllm_api", ROOT / "harness" / "sampling" / "vllm_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


API = _load_api()


def _resolve(dotted: str):
    """The object a dotted name names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def _named_parameters(obj) -> set[str]:
    sig = inspect.signature(obj)
    return {p.name for p in sig.parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}


# -- against the installed vLLM ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def vllm():
    return pytest.importorskip("vllm")


def test_installed_vllm_is_at_least_the_declared_floor(vllm):
    def key(v):
        return tuple(int(x) for x in re.findall(r"\d+", v)[:3])

    print(f"vllm {vllm.__version__}")
    assert key(vllm.__version__) >= key(API.MIN_VERSION)


@pytest.mark.parametrize("name,params", API.CALLABLES, ids=[n for n, _ in API.CALLABLES])
def test_declared_callable_exists_and_takes_its_parameters(vllm, name, params):
    obj = _resolve(name)
    assert callable(obj), name
    missing = set(params) - _named_parameters(obj)
    assert not missing, f"{name} has no parameter(s) {sorted(missing)}"


@pytest.mark.parametrize("owner,attr,cls", API.ATTRIBUTES, ids=[f"{o}.{a}" for o, a, _ in API.ATTRIBUTES])
def test_declared_attribute_is_set_by_its_owner(vllm, owner, attr, cls):
    assert f"self.{attr} =" in inspect.getsource(_resolve(owner).__init__), f"{owner}.{attr}"
    assert inspect.isclass(_resolve(cls)), cls


@pytest.mark.parametrize("method,target", sorted(API.RPC_METHODS.items()))
def test_rpc_method_exists_on_the_worker(vllm, method, target):
    worker = _resolve("vllm.v1.worker.gpu_worker.Worker")
    assert callable(getattr(worker, method)), method
    assert set(dict(API.CALLABLES)[target]) <= _named_parameters(_resolve(target))


@pytest.mark.parametrize("where,values", API.VALUES, ids=[w for w, _ in API.VALUES])
def test_declared_values_are_accepted(vllm, where, values):
    obj = _resolve(where)
    if typing.get_origin(obj) is typing.Literal:
        assert set(values) <= set(typing.get_args(obj)), where
    else:
        source = inspect.getsource(obj)
        for v in values:
            assert f'"{v}"' in source or f"'{v}'" in source, f"{where} does not mention {v!r}"


# -- the backend uses only what is declared (no vLLM needed) -----------------------------------------------------

def _chain(node) -> list[str] | None:
    """['self', 'llm', 'sleep'] for self.llm.sleep; None if the chain does not end in a name."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(names)]
    return None


def _backend_uses():
    """(imported vllm names, calls of them, chains on the LLM object with their call nodes, attributes read in
    completion_token_ids) of the backend's source."""
    tree = ast.parse(BACKEND.read_text())
    imported, calls, llm_uses, output_attrs = {}, [], [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "vllm":
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        if isinstance(node, ast.Import):
            assert not any(a.name.split(".")[0] == "vllm" for a in node.names), "import vllm: use from-imports"
        if isinstance(node, ast.FunctionDef) and node.name == "completion_token_ids":
            output_attrs |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported:
            calls.append((imported[node.func.id], node))
        if isinstance(node, ast.Attribute) and not isinstance(parents.get(node), ast.Attribute):
            chain = _chain(node)
            if chain and chain[:2] == ["self", "llm"] and len(chain) > 2:
                call = parents.get(node)
                llm_uses.append((chain[2:], call if isinstance(call, ast.Call) and call.func is node else None))
    return imported, calls, llm_uses, output_attrs


def _keywords(call: ast.Call) -> set[str]:
    assert all(k.arg is not None for k in call.keywords), "no **kwargs into vLLM: every name must be checkable"
    return {k.arg for k in call.keywords}


def test_backend_imports_only_declared_names():
    imported, _, _, _ = _backend_uses()
    declared = {name for name, _ in API.CALLABLES}
    assert imported, "the backend imports nothing from vllm?"
    assert set(imported.values()) <= declared, set(imported.values()) - declared


def test_backend_calls_vllm_classes_with_declared_parameters():
    _, calls, _, _ = _backend_uses()
    declared = dict(API.CALLABLES)
    assert calls
    for name, call in calls:
        allowed = set(declared[name]) | (set(declared["vllm.EngineArgs"]) if name == "vllm.LLM" else set())
        assert not call.args, f"{name}: pass vLLM parameters by keyword"
        assert _keywords(call) <= allowed, f"{name}: {_keywords(call) - allowed} not declared"


def test_backend_uses_only_declared_methods_and_attributes_of_the_engine():
    _, _, uses, _ = _backend_uses()
    declared = dict(API.CALLABLES)
    attributes = {(o, a): c for o, a, c in API.ATTRIBUTES}
    assert uses
    for chain, call in uses:
        owner = "vllm.LLM"
        for attr in chain[:-1]:
            assert (owner, attr) in attributes, f"{owner}.{attr} is not declared"
            owner = attributes[(owner, attr)]
        name = f"{owner}.{chain[-1]}"
        assert name in declared, f"{name} is not declared in harness/sampling/vllm_api.py"
        if call is None:
            continue
        assert _keywords(call) <= set(declared[name]), f"{name}: {_keywords(call) - set(declared[name])}"
        if name == "vllm.LLM.collective_rpc":
            method = call.args[0] if call.args else None
            assert isinstance(method, ast.Constant) and method.value in API.RPC_METHODS, "RPC by a declared name"
            kwargs = next(k.value for k in call.keywords if k.arg == "kwargs")
            assert isinstance(kwargs, ast.Dict)
            keys = {k.value for k in kwargs.keys}
            target = API.RPC_METHODS[method.value]
            assert keys <= set(declared[target]), f"{target}: {keys - set(declared[target])}"


def test_backend_reads_only_declared_output_attributes():
    _, _, _, output_attrs = _backend_uses()
    assert output_attrs == set(API.OUTPUT_ATTRIBUTES)


def test_backend_no_longer_reaches_into_the_engine_internals():
    """The V0 path (llm_engine.model_executor.driver_worker.model_runner.model.load_weights) is gone: vLLM V1 has no
    model_executor on the LLM's engine when it runs its core in another process (huggingface/trl#3859)."""
    attrs = {n.attr for n in ast.walk(ast.parse(BACKEND.read_text())) if isinstance(n, ast.Attribute)}
    assert not attrs & {"model_executor", "driver_worker", "model_runner", "load_weights"}


def test_declared_wake_tags_are_the_ones_the_backend_passes():
    tree = ast.parse(BACKEND.read_text())
    tags = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "tags" and isinstance(node.value, ast.List):
            tags |= {e.value for e in node.value.elts}
    assert tags == set(dict(API.VALUES)["vllm.LLM.wake_up"])


def test_the_install_extra_requires_the_checked_floor():
    text = (ROOT / "pyproject.toml").read_text()
    # the floor, and a cap below the next minor release where one is set (pyproject.toml says why)
    floor = rf'^vllm = \["vllm>={re.escape(API.MIN_VERSION)}(,<[0-9.]+)?"\]$'
    assert re.search(floor, text, re.M), "pyproject [vllm] extra"
