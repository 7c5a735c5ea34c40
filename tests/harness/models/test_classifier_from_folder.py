"""classifier.pretrained_path naming a classifier folder (issue 42): IU-Xray's classifier starts from MIMIC-CXR's
(official train_configs/stage2_cls/iuxray_stage2_cls.yaml, pretrained_cls_ckpt_mimic: every weight, the head
included), which a study's `upstream:` passes as the upstream classifier run's folder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.config import ConfigError, load_config
from harness.models.classifier import ClassifierConfig, build_classifier, save_classifier
from harness.models.classifier.model import read_state_dict


def _cfg(**kw) -> ClassifierConfig:
    return ClassifierConfig.preset("tiny", **kw)


@pytest.mark.parametrize("arch", ["tiny_vit", "tiny_cnn"])
def test_a_classifier_starts_from_a_saved_classifier_folder(tmp_path, arch):
    trained = build_classifier(_cfg(arch=arch, seed=3))
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)  # not what any seed draws
    folder = save_classifier(trained, _cfg(arch=arch, seed=3), np.full(14, 0.5), tmp_path / "clf")
    model = build_classifier(_cfg(arch=arch, seed=4, pretrained_path=str(folder)))
    mine, theirs = model.state_dict(), trained.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)  # every weight, the head too
    assert not torch.equal(mine[next(iter(mine))], build_classifier(_cfg(arch=arch, seed=4)).state_dict()[
        next(iter(mine))])


def test_the_classifier_stage_checks_the_folder_before_it_runs(tmp_path):
    from harness.checks.preflight import check_inputs

    folder = save_classifier(build_classifier(_cfg()), _cfg(), np.full(14, 0.5), tmp_path / "clf")
    assert set(read_state_dict(folder)) == set(build_classifier(_cfg()).state_dict())
    cfg = load_config(None, [f"classifier.pretrained_path={folder}", f"out_dir={tmp_path / 'run'}"])
    check_inputs(cfg, "classifier")  # no error: the folder's weights are read
    empty = tmp_path / "empty"
    empty.mkdir()
    cfg = load_config(None, [f"classifier.pretrained_path={empty}", f"out_dir={tmp_path / 'run'}"])
    with pytest.raises((FileNotFoundError, ValueError, ConfigError), match="classifier.pretrained_path"):
        check_inputs(cfg, "classifier")
