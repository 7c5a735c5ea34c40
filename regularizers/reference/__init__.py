"""Reference-policy strategies: which snapshot is pi_ref and when it changes (static, ema, vapr)."""

from regularizers.reference.ema import EMAReference
from regularizers.reference.static import StaticReference
from regularizers.reference.vapr import VAPRReference
from regularizers.registry import ReferenceStrategy, build_reference, register_reference

__all__ = [
    "EMAReference",
    "ReferenceStrategy",
    "StaticReference",
    "VAPRReference",
    "build_reference",
    "register_reference",
]
