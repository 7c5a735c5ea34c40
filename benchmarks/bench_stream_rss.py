"""Peak RSS of a warm-up run against the training-set size (issue 14: growth < 60 MB from 1,000 to 8,000 images).

Each measurement runs in a fresh subprocess: a tiny Qwen2.5-VL, stage-1 trainable parameters (the merger), a
training set of N studies whose images are decoded the way the stages get them (harness/stages/common.py
load_images: on demand) or, with --eager, all decoded up front (what main did before streaming), and a fixed
number of optimizer steps, so the work is the same for every N. The images are 16 distinct 512 px PNGs behind
N symlinks (disk stays small; every access still opens and decodes a file).

    PYTHONPATH=$PWD python benchmarks/bench_stream_rss.py                 # 1000 and 8000, streaming and eager
    PYTHONPATH=$PWD python benchmarks/bench_stream_rss.py --sizes 1000 8000 --modes stream
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORT = "the heart size is normal . there is no pleural effusion or pneumothorax ."


def make_images(folder: Path, n: int) -> list:
    import numpy as np
    from PIL import Image

    from harness.data.datasets import Sample

    rng = np.random.default_rng(0)
    real = []
    for k in range(16):
        path = folder / f"real{k}.png"
        if not path.exists():
            Image.fromarray(rng.integers(0, 255, (512, 512), dtype=np.uint8)).save(path)
        real.append(path)
    samples = []
    for i in range(n):
        link = folder / f"img{i}.png"
        if not link.exists():
            link.symlink_to(real[i % 16])
        samples.append(Sample(f"s{i}", REPORT, [link]))
    return samples


def child(n: int, mode: str, folder: Path, steps: int) -> dict:
    sys.path.insert(0, str(HERE))
    import torch
    from proc_status import status_kb

    from harness.config import TrainConfig
    from harness.data.datasets import load_views
    from harness.models.tiny import build_processor, build_tiny_model, train_tokenizer
    from harness.models.trainable import set_trainable
    from harness.runs.records import RunDir
    from harness.stages.lm_train import LMData, train_lm
    from harness.stages.prompts import load_images

    torch.set_num_threads(1)
    size = 112
    samples = make_images(folder, n)
    tok = train_tokenizer([REPORT] * 20, vocab_size=400)
    processor = build_processor(tok, size)
    model = build_tiny_model(tok, seed=0, text_hidden=64, text_layers=2, vision_hidden=32, vision_depth=2,
                             image_size=size)
    set_trainable(model, "warmup")
    before = status_kb("VmRSS")
    images = load_images(samples, size) if mode == "stream" else [load_views(s, size) for s in samples]
    train = LMData(images, ["Write the findings."] * n, [s.report for s in samples])
    cfg = TrainConfig(epochs=1, batch_size=4, lr=1e-4, max_steps=steps, checkpoint_every=0, scheduler="constant")
    with tempfile.TemporaryDirectory() as out:
        train_lm(model, processor, train, None, cfg, RunDir(Path(out)), seed=0, max_report_tokens=32,
                 progress=False)
    return {"n": n, "mode": mode, "steps": steps, "rss_before_data_mb": before / 1024,
            "peak_rss_mb": status_kb("VmHWM") / 1024}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 8000])
    ap.add_argument("--modes", nargs="+", default=["stream", "eager"], choices=["stream", "eager"])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--child", nargs=2, metavar=("N", "MODE"))
    ap.add_argument("--folder")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(int(args.child[0]), args.child[1], Path(args.folder), args.steps)))
        return
    with tempfile.TemporaryDirectory() as folder:
        rows = []
        for mode in args.modes:
            for n in args.sizes:
                out = subprocess.run([sys.executable, __file__, "--child", str(n), mode, "--folder", folder,
                                      "--steps", str(args.steps)], check=True, capture_output=True, text=True)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(json.dumps(rows[-1]), flush=True)
    for mode in args.modes:
        peaks = [r["peak_rss_mb"] for r in rows if r["mode"] == mode]
        print(f"{mode}: peak RSS {' / '.join(f'{p:.0f}' for p in peaks)} MB for {args.sizes} images; "
              f"growth {peaks[-1] - peaks[0]:.1f} MB")


if __name__ == "__main__":
    main()
