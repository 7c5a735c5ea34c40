"""Run configuration: the dataclasses (one `RunConfig` of sections, each field's help in its metadata), building
them from YAML / dotted overrides / nested dicts, and validation. Importers use `harness.config` as one module.

sections.py, training.py, rl.py, run.py: the dataclasses; loading.py: files, overrides, merging, `build_config`;
validation.py: `validate`; describe.py: the resolved config as commented YAML (`regbench config show`).
retired.py: fields removed because nothing read them, still in a run's hashes at the value they held.
"""

from harness.config.loading import (
    PRESET_KEYS,
    apply_overrides,
    build_config,
    expand_dotted,
    from_dict,
    load_config,
    load_yaml,
    preset_overrides,
    read_yaml_mapping,
    set_key,
    stage_view,
    to_dict,
)
from harness.config.rl import RLConfig
from harness.config.run import RunConfig
from harness.config.sections import (
    ClassifierConfigSection,
    DataConfig,
    EvalConfig,
    GenerationConfig,
    ModelConfig,
    PromptConfig,
)
from harness.config.training import PretrainConfig, StepConfig, TrainConfig
from harness.config.validation import validate
from harness.errors import ConfigError

__all__ = [
    "PRESET_KEYS", "ClassifierConfigSection", "ConfigError", "DataConfig", "EvalConfig", "GenerationConfig",
    "ModelConfig", "PretrainConfig", "PromptConfig", "RLConfig", "RunConfig", "StepConfig", "TrainConfig",
    "apply_overrides", "build_config", "expand_dotted", "from_dict", "load_config", "load_yaml", "preset_overrides",
    "read_yaml_mapping",
    "set_key", "stage_view", "to_dict", "validate",
]
