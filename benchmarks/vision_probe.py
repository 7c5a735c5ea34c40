"""Calibration probe (issue 12): can a vision model, trained from scratch, read the phantom's findings?

    python benchmarks/vision_probe.py --n 2000 --epochs 20 [--arch qwen|cnn] [--size 112] [--hidden 64] ...

Trains a vision model plus a linear head on the ground-truth findings (`present`, 14 labels, BCE) of a phantom
set synthesized with seed 1000 (stage 0's data seed), and prints test micro-F1 / exact match (per-label thresholds
tuned on val) every 10 epochs. `qwen`: the tiny preset's Qwen2.5-VL vision tower (harness/models/tiny.py settings:
2 heads, MLP 2x, 2x2 merge), mean-pooled; `--base DIR` starts it from a stage-0 base, `--freeze` trains the head
only (a linear probe of what stage 0 learned). `cnn`: a 5-block conv net with batch norm (what the pixels carry
at this size). The set is cached under /tmp/regbench_probe per size and phantom generator version, so a
run at two commits compares their renderings. One torch thread.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

CLIP_MEAN = np.array([0.48145466, 0.4578275, 0.40821073])  # Qwen2-VL's image processor normalisation
CLIP_STD = np.array([0.26862954, 0.26130258, 0.27577711])
ROOT = Path("/tmp/regbench_probe")


def phantom_set(n: int, px: int) -> Path:
    from harness.data.phantom import GENERATOR_VERSION
    from harness.stages.common import ensure_phantom

    return ensure_phantom(ROOT / f"n{n}-s1000-px{px}-g{GENERATOR_VERSION}", n, 1000, px, False)


def load_split(ann: Path, split: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    items = json.loads(ann.read_text())[split]
    images = [np.asarray(Image.open(ann.parent / it["image_path"][0]).convert("RGB").resize((size, size),
                                                                                              Image.BICUBIC))
              for it in items]
    return np.stack(images), np.array([it["present"] for it in items], dtype=np.float32)


def qwen_patches(x: np.ndarray, patch: int, temporal: int = 2) -> torch.Tensor:
    """[B, S, S, 3] uint8 -> [B, g*g, 3*T*P*P] in the Qwen2-VL processor's layout (2x2 merge order)."""
    g = x.shape[1] // patch
    x = ((x / 255.0 - CLIP_MEAN) / CLIP_STD).astype(np.float32).transpose(0, 3, 1, 2)
    b = x.shape[0]
    x = np.repeat(x[:, None], temporal, axis=1)
    x = x.reshape(b, temporal, 3, g // 2, 2, patch, g // 2, 2, patch).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    return torch.from_numpy(np.ascontiguousarray(x.reshape(b, g * g, 3 * temporal * patch * patch)))


def qwen_tower(args):
    from transformers import Qwen2_5_VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel

    vision = dict(depth=args.depth, hidden_size=args.hidden, intermediate_size=2 * args.hidden, num_heads=2,
                  out_hidden_size=64, patch_size=args.patch, spatial_merge_size=2, temporal_patch_size=2,
                  window_size=args.size, fullatt_block_indexes=list(range(args.depth)))
    cfg = Qwen2_5_VLConfig(vision_config=vision, text_config=dict(hidden_size=64, num_attention_heads=4,
                                                                  num_key_value_heads=2))
    cfg.vision_config._attn_implementation = "eager"
    tower = Qwen2_5_VisionTransformerPretrainedModel._from_config(cfg.vision_config)
    if args.base:
        from safetensors.torch import load_file

        weights = load_file(str(Path(args.base) / "model.safetensors"))
        print("load", tower.load_state_dict({k.split("visual.", 1)[1]: v for k, v in weights.items()
                                            if "visual." in k}, strict=False))
    g = args.size // args.patch
    grid = torch.tensor([[1, g, g]])

    def feats(xb):
        b = xb.shape[0]
        h = tower(xb.reshape(b * g * g, -1), grid_thw=grid.repeat(b, 1))
        return h.reshape(b, -1, h.shape[-1]).mean(1)

    return tower, feats, 64, lambda x: qwen_patches(x, args.patch)


def cnn_tower(args):
    layers, c_in = [], 3
    for c_out in (32, 64, 96, 128, 128):
        layers += [torch.nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c_out),
                   torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
        c_in = c_out
    tower = torch.nn.Sequential(*layers)

    def inputs(x):
        gray = ((x[..., :1] / 255.0 - 0.5) / 0.25).astype(np.float32).transpose(0, 3, 1, 2)
        return torch.from_numpy(gray).repeat(1, 3, 1, 1)

    return tower, lambda xb: tower(xb).amax((2, 3)), 128, inputs


def f1(pred: np.ndarray, y: np.ndarray) -> float:
    tp, fp, fn = (pred & (y == 1)).sum(), (pred & (y != 1)).sum(), (~pred & (y == 1)).sum()
    return float(2 * tp / max(1, 2 * tp + fp + fn))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--px", type=int, default=128, help="rendered image side")
    ap.add_argument("--size", type=int, default=112, help="side fed to the model")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--patch", type=int, default=14)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--arch", choices=("qwen", "cnn"), default="qwen")
    ap.add_argument("--base", default=None)
    ap.add_argument("--freeze", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    t0 = time.time()
    ann = phantom_set(args.n, args.px)
    tower, feats, dim, to_input = (qwen_tower if args.arch == "qwen" else cnn_tower)(args)
    data = {s: load_split(ann, s, args.size) for s in ("train", "val", "test")}
    xs = {s: to_input(v[0]) for s, v in data.items()}
    ys = {s: torch.from_numpy(v[1]) for s, v in data.items()}
    head = torch.nn.Linear(dim, 14)
    params = list(head.parameters()) + ([] if args.freeze else list(tower.parameters()))
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    n, bs = len(ys["train"]), 32
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=args.epochs * -(-n // bs), pct_start=0.1)

    def predict(split):
        tower.eval()
        with torch.no_grad():
            return torch.cat([torch.sigmoid(head(feats(xs[split][i:i + 64])))
                              for i in range(0, len(ys[split]), 64)]).numpy()

    for epoch in range(args.epochs):
        tower.train()
        perm = torch.randperm(n)
        for i in range(0, n, bs):
            idx = perm[i:i + bs]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(head(feats(xs["train"][idx])),
                                                                        ys["train"][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        if epoch % 10 == 9 or epoch == args.epochs - 1:
            pv, yv = predict("val"), ys["val"].numpy()
            grid = np.linspace(0.05, 0.95, 19)
            th = np.array([max(grid, key=lambda t, j=j: f1(pv[:, j] > t, yv[:, j])) for j in range(14)])
            pt, yt = predict("test") > th, ys["test"].numpy()
            per = [round(f1(pt[:, j], yt[:, j]), 2) for j in range(14)]
            print(f"ep {epoch + 1} loss {loss.item():.3f} val {f1(pv > th, yv):.3f} test {f1(pt, yt):.3f} exact "
                  f"{(pt == (yt == 1)).all(1).mean():.3f} per {per} t {time.time() - t0:.0f}s", flush=True)
    print("ARGS", vars(args))


if __name__ == "__main__":
    main()
