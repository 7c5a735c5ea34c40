"""harness/registry.py: the one registry behind regularizers, reference strategies, rewards and aggregations."""

from __future__ import annotations

import ast
import dataclasses
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from harness.registry import Registry, undeclared_config_fields


class Widget:
    """An interface: its own annotations are not config."""

    name: ClassVar[str] = ""
    shared: int | None = None


def _widgets(**kw) -> Registry:
    return Registry("widget", (), base=Widget, decorator="register_widget", name_attr="name", **kw)


def test_register_lookup_and_names():
    reg = _widgets()

    @reg.register("b")
    @dataclasses.dataclass
    class B(Widget):
        size: int = 1

    @reg.register("a")
    class A(Widget):  # no config fields: a plain class is fine
        pass

    assert reg.lookup("b") is B and B.name == "b" and A.name == "a"
    assert reg.names() == ["a", "b"] and "a" in reg and "c" not in reg
    assert reg.entries == {"a": A, "b": B}
    reg.register("a")(A)  # the same object again is a no-op (a module imported twice)
    with pytest.raises(ValueError, match=r"unknown widget 'c'; available: a, b"):
        reg.lookup("c")
    with pytest.raises(ValueError, match="widget 'a' is already registered by .*A"):
        reg.register("a")(B)
    with pytest.raises(TypeError, match="must subclass Widget to be a widget"):
        reg.register("d")(int)


def test_functions_register_too():
    reg = Registry("reward", ())

    @reg.register("one")
    def one(candidates, references, **context):
        return [1.0] * len(candidates)

    assert reg.lookup("one") is one and reg.names() == ["one"]


def test_a_class_with_config_fields_that_is_not_a_dataclass_is_refused():
    reg = _widgets()

    class Forgot(Widget):
        size: int = 3
        label: ClassVar[str] = "not config"

    with pytest.raises(TypeError) as err:
        reg.register("forgot")(Forgot)
    message = str(err.value)
    for part in ("widget 'forgot'", "Forgot", f"module {__name__}", "['size']", "silently ignored", "add @dataclass",
                 "@register_widget('forgot')"):
        assert part in message
    assert reg.names() == []  # nothing registered


def test_fields_hidden_in_an_undecorated_class_of_the_hierarchy_are_refused():
    class Mid(Widget):  # not a dataclass: its `beta` is no field of the dataclass below
        beta: float = 0.1

    @dataclasses.dataclass
    class Leaf(Mid):
        scale: float = 1.0

    @dataclasses.dataclass
    class Parent(Widget):
        beta: float = 0.1

    class UndecoratedChild(Parent):  # a dataclass by inheritance, but `scale` is no field
        scale: float = 1.0

    assert undeclared_config_fields(Leaf, Widget) == ["beta"]
    assert undeclared_config_fields(UndecoratedChild, Widget) == ["scale"]
    reg = _widgets()
    for cls in (Leaf, UndecoratedChild):
        with pytest.raises(TypeError, match=f"{cls.__name__}.*not a dataclass.*add @dataclass"):
            reg.register(cls.__name__)(cls)


def test_what_is_not_config_is_accepted():
    @dataclasses.dataclass
    class Full(Widget):
        size: int = 1
        count: int = dataclasses.field(init=False, default=0)  # state, still a field
        kind: ClassVar[str] = "x"
        seed: dataclasses.InitVar[int] = 0

        def __post_init__(self, seed):
            pass

    assert undeclared_config_fields(Full, Widget) == []
    # Annotations as objects (not the strings of `from __future__ import annotations`).
    plain = type("Plain", (Widget,), {"__annotations__": {"kind": ClassVar[str], "other": ClassVar}})
    assert undeclared_config_fields(plain, Widget) == []
    with_field = type("WithField", (Widget,), {"__annotations__": {"size": int}})
    assert undeclared_config_fields(with_field, Widget) == ["size"]
    # The interface's own annotation (Widget.shared) is not the plug-in's config.
    assert undeclared_config_fields(type("Bare", (Widget,), {}), Widget) == []
    assert undeclared_config_fields(Widget, None) == ["shared"]


@pytest.fixture
def plugin_package(tmp_path, monkeypatch):
    """A package `widgets_pkg` with a registry module and two plug-in modules (plus one that fails once)."""
    root = tmp_path / "widgets_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "registry.py").write_text(textwrap.dedent("""
        from harness.registry import Registry
        WIDGETS = Registry("widget", ("widgets_pkg",))
    """))
    for name in ("alpha", "beta"):
        (root / f"{name}.py").write_text(textwrap.dedent(f"""
            from widgets_pkg.registry import WIDGETS
            @WIDGETS.register("{name}")
            def {name}():
                return "{name}"
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for mod in [m for m in sys.modules if m == "widgets_pkg" or m.startswith("widgets_pkg.")]:
        del sys.modules[mod]


def test_plugin_modules_are_imported_on_first_use(plugin_package):
    from widgets_pkg.registry import WIDGETS

    assert WIDGETS.entries == {} and "widgets_pkg.alpha" not in sys.modules  # lazily: nothing imported yet
    assert WIDGETS.names() == ["alpha", "beta"]
    assert WIDGETS.lookup("beta")() == "beta"


def test_a_failed_plugin_import_is_retried(plugin_package):
    broken = plugin_package / "gamma.py"
    broken.write_text("raise ImportError('gamma is broken')\n")
    from widgets_pkg.registry import WIDGETS

    with pytest.raises(ImportError, match="gamma is broken"):
        WIDGETS.names()
    broken.write_text("from widgets_pkg.registry import WIDGETS\nWIDGETS.register('gamma')(print)\n")
    sys.modules.pop("widgets_pkg.gamma", None)
    assert WIDGETS.names() == ["alpha", "beta", "gamma"]


def test_the_helper_imports_only_the_standard_library():
    # rewards/, regularizers/ and harness/aggregation/ all import it: it must sit at the bottom of the import graph.
    tree = ast.parse((Path(__file__).resolve().parents[2] / "harness" / "registry.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}


def test_the_four_registries_share_the_helper():
    from harness.aggregation import registry as aggregations
    from regularizers import registry as regularizers
    from rewards import registry as rewards

    tables = {"regularizer": regularizers.REGULARIZERS, "reference strategy": regularizers.REFERENCES,
              "reward": rewards.REWARDS, "aggregation": aggregations._REGISTRY}
    registries = [regularizers._REGULARIZER_REGISTRY, regularizers._REFERENCE_REGISTRY, rewards._REWARD_REGISTRY,
                  aggregations._AGGREGATION_REGISTRY]
    for reg in registries:
        assert isinstance(reg, Registry) and tables[reg.kind] is reg.entries
    assert regularizers.available_regularizers() == regularizers._REGULARIZER_REGISTRY.names()
    with pytest.raises(ValueError, match="unknown aggregation 'token_maen'; available: .*token_mean"):
        aggregations.get_aggregation("token_maen")
    with pytest.raises(ValueError, match="unknown reward 'nope'; available: .*bleu4"):
        rewards.get_reward("nope")


def test_the_preset_check_reads_the_presets(monkeypatch):
    # harness/config/presets.py is the one list of presets: one added there is accepted by the config check.
    from harness.config import ConfigError, load_config
    from harness.config.presets import PRESETS, Preset

    with pytest.raises(ConfigError, match="'model.preset' = 'tiny-b' must be one of tiny, "):
        load_config(None, ["model.preset=tiny-b"])
    monkeypatch.setitem(PRESETS, "tiny-b", Preset("tiny-b", None, 112, "float32", "eager"))
    assert load_config(None, ["model.preset=tiny-b"]).model.image_size == 112
