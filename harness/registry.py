"""One registry for every kind of plug-in (regularizers, reference strategies, rewards, loss aggregations).

A plug-in is one module in a plug-in package with one decorator; the registry imports every module of its
packages on first use, so nothing lists the plug-ins by hand:

    REGULARIZERS = Registry("regularizer", ("regularizers", "regularizers.reference"), base=Regularizer,
                            decorator="register_regularizer", name_attr="name")

    @REGULARIZERS.register("rer")
    @dataclass
    class RER(Regularizer): ...

    REGULARIZERS.lookup("rer")   # the class; an unknown name is a ValueError listing the registered names
    REGULARIZERS.lookup("my_pkg.my_module:MyKL")   # a class in the user's code, imported (as rl.reward=mod:fn)
    REGULARIZERS.names()         # sorted registered names

A registered class's config is its dataclass fields (the builders pass the config values whose names match). A class
that declares config fields (annotated, non-ClassVar class attributes) without being a dataclass would have them
silently ignored, so registering one is a TypeError that says to add ``@dataclass``.

This module imports only the standard library: the plug-in packages import it, so it sits at the bottom of the
import graph.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import re
import typing
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

__all__ = ["Registry", "undeclared_config_fields"]

T = TypeVar("T")

_CLASSVAR = re.compile(r"^\s*(?:typing\.|t\.)?ClassVar\b")


def _is_classvar(annotation: Any) -> bool:
    if isinstance(annotation, str):  # `from __future__ import annotations`: the annotation as written
        return _CLASSVAR.match(annotation) is not None
    return annotation is typing.ClassVar or typing.get_origin(annotation) is typing.ClassVar


def undeclared_config_fields(cls: type, base: type | None = None) -> list[str]:
    """Names that ``cls`` or a class between it and ``base`` annotates as instance attributes (not ``ClassVar``) but
    that are not fields of ``cls`` as a dataclass: config values meant for them would never reach the instance.
    ``base``'s own annotations (and its ancestors') are the interface's, not config, and are not counted."""
    known = set(getattr(cls, "__dataclass_fields__", {})) if dataclasses.is_dataclass(cls) else set()
    interface = set(base.__mro__) if base is not None else {object}
    missing: list[str] = []
    for klass in cls.__mro__:
        if klass in interface:
            continue
        for attr, annotation in inspect.get_annotations(klass).items():
            if not _is_classvar(annotation) and attr not in known and attr not in missing:
                missing.append(attr)
    return missing


class Registry(Generic[T]):
    """Plug-ins of one ``kind``, registered by name with :meth:`register` and found with :meth:`lookup`.

    ``packages``: the dotted names of the plug-in packages; on first lookup or listing every module in them (but
    those named in ``skip``) is imported, which runs their registrations. ``base``: registered classes must subclass
    it. ``decorator``: the public name of the registering decorator, for error messages. ``name_attr``: the
    attribute of a registered object that is set to its registered name (``None``: none).

    ``entries`` is the plain ``{name: plug-in}`` dict (tests may copy and restore it).
    """

    def __init__(self, kind: str, packages: Iterable[str], *, base: type | None = None, decorator: str = "register",
                 name_attr: str | None = None, skip: Iterable[str] = ("registry",)) -> None:
        self.kind = kind
        self.packages = tuple(packages)
        self.base = base
        self.decorator = decorator
        self.name_attr = name_attr
        self.skip = frozenset(skip)
        self.entries: dict[str, T] = {}
        self._loaded = False
        self._loading = False

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {sorted(self.entries)})"

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the class or function under ``name`` and return it unchanged."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name`` (what :meth:`register` does)."""
        label = getattr(obj, "__qualname__", repr(obj))
        where = f"{label} (module {getattr(obj, '__module__', '?')})"
        if isinstance(obj, type):
            if self.base is not None and not issubclass(obj, self.base):
                raise TypeError(f"{where} must subclass {self.base.__name__} to be a {self.kind}")
            missing = undeclared_config_fields(obj, self.base)
            if missing:
                raise TypeError(
                    f"{self.kind} {name!r}: class {where} declares config field(s) {missing} but is not a dataclass, "
                    f"so values given for them would be silently ignored (the class defaults used); fix: add "
                    f"@dataclass to {label}, directly under @{self.decorator}({name!r})")
        old = self.entries.get(name, obj)
        if old is not obj:
            raise ValueError(f"{self.kind} {name!r} is already registered by {getattr(old, '__qualname__', old)!s}")
        if self.name_attr is not None:
            setattr(obj, self.name_attr, name)
        self.entries[name] = obj

    def load(self) -> None:
        """Import every module of the plug-in packages, once (again after a failed import)."""
        if self._loaded or self._loading:
            return
        self._loading = True
        try:
            for package in self.packages:
                module = importlib.import_module(package)
                for info in pkgutil.iter_modules(module.__path__):
                    if info.name not in self.skip:
                        importlib.import_module(f"{package}.{info.name}")
            self._loaded = True
        finally:
            self._loading = False

    def lookup(self, name: str) -> T:
        """The plug-in registered as ``name``, or the class that ``package.module:Class`` names (imported, checked
        as a registration checks it); an unknown name is a ValueError listing the registered ones."""
        self.load()
        if ":" in name and name not in self.entries:
            return self.import_path(name)
        if name not in self.entries:
            raise ValueError(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}")
        return self.entries[name]

    def import_path(self, path: str) -> T:
        """The class ``package.module:Class`` (``Class`` may be dotted) from the user's code, with the checks of
        :meth:`add` (subclass of ``base``, dataclass when it declares fields); its ``name_attr`` is set to ``path``.
        A ValueError names what is wrong (module, attribute, base class)."""
        obj = import_object(path, self.kind, "a registered name or look like package.module:Class")
        if self.base is not None and not (isinstance(obj, type) and issubclass(obj, self.base)):
            raise ValueError(f"{self.kind} {path!r} is {obj!r}, not a subclass of {self.base.__name__}")
        missing = undeclared_config_fields(obj, self.base)
        if missing:
            raise ValueError(f"{self.kind} {path!r} declares config field(s) {missing} but is not a dataclass, so "
                             "values given for them would be silently ignored; add @dataclass to it")
        if self.name_attr is not None and not getattr(obj, self.name_attr, ""):
            setattr(obj, self.name_attr, path)
        return obj

    def names(self) -> list[str]:
        """The registered names, sorted."""
        self.load()
        return sorted(self.entries)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self.entries


def import_object(path: str, kind: str, form: str) -> Any:
    """The object ``package.module:name`` names (``name`` may be dotted) from the user's code; a ValueError names
    what is wrong (the form, the module, the attribute). `kind` and `form` word the errors ("reward",
    "look like package.module:function")."""
    module_name, _, attr = path.partition(":")
    if not module_name.strip() or not attr.strip():
        raise ValueError(f"{kind} {path!r} must {form}")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"{kind} {path!r}: cannot import module '{module_name}' ({e}); is its folder on the Python "
                         "path (PYTHONPATH)?") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{kind} {path!r}: module '{module_name}' has no attribute '{attr}'")
        obj = getattr(obj, part)
    return obj
