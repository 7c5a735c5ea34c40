"""KL regularizers (one beta per response) and reference-policy strategies, built by name from registries."""

# The class modules are imported for their registrations.
from regularizers.adaptive import AdaptiveKL
from regularizers.constant import ConstantKL
from regularizers.none import NoKL
from regularizers.reference import EMAReference, StaticReference, VAPRReference
from regularizers.registry import (
    REFERENCES,
    REGULARIZERS,
    ReferenceStrategy,
    Regularizer,
    available_references,
    available_regularizers,
    build_reference,
    build_regularizer,
    register_reference,
    register_regularizer,
)
from regularizers.rer import RER, rer_betas

__all__ = [
    "REFERENCES",
    "REGULARIZERS",
    "RER",
    "AdaptiveKL",
    "ConstantKL",
    "EMAReference",
    "NoKL",
    "ReferenceStrategy",
    "Regularizer",
    "StaticReference",
    "VAPRReference",
    "available_references",
    "available_regularizers",
    "build_reference",
    "build_regularizer",
    "register_reference",
    "register_regularizer",
    "rer_betas",
]
