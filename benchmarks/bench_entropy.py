"""Peak memory and time of the chunked `token_entropy` / `token_logprobs` against a naive implementation.

    python benchmarks/bench_entropy.py                      # N=4 rows x T=160 tokens, V=151,936 (Qwen2.5)
    python benchmarks/bench_entropy.py --ops entropy --dtypes bf16 --repeats 5

Naive = `torch.log_softmax(logits.float() / temperature, -1)`, then `-(p * logp).sum(-1)` (entropy) or a
gather (log-probs). Chunked = `harness.grpo.token_entropy` / `token_logprobs` (harness/policy/logprobs.py) with
their default chunking (`chunk_size=None`: positions of the N*T grid per chunk, sized so one fp32 chunk is
about 16 MiB; the trainer's default, `rl.logprob_chunk_positions=null`), and with explicit `chunk_size`
positions per chunk.

How memory is measured, so that it is sound:
- every variant runs in two fresh subprocesses, one measuring memory, one timing (peaks of different
  variants never mix; no allocator cache carried over);
- the inputs (logits in the given dtype, created directly in that dtype, tokens, and the upstream gradient)
  are allocated first; the baseline is taken after that, and the reported peak is "peak minus baseline",
  i.e. what the operation itself adds. For forward+backward it includes the gradient of the logits (same
  size and dtype as the logits), which every implementation must produce; that floor is printed too;
- CUDA: `torch.cuda.reset_peak_memory_stats()` then `max_memory_allocated() - memory_allocated()` before;
- CPU (tracemalloc does not see torch's allocations): the process's resident set. Linux's peak RSS (VmHWM)
  is reset by writing "5" to /proc/self/clear_refs right before the operation and read after it; where that
  is not allowed, `ru_maxrss` is used (the subprocess has done nothing bigger than allocating the inputs
  before, so its earlier peak is the baseline). The memory subprocess runs with glibc's
  MALLOC_MMAP_THRESHOLD_=65536 (which also turns off its dynamic threshold): every block above 64 KiB is
  mmap-ed and returned to the OS when freed, so RSS follows the live tensors instead of freed memory the
  allocator keeps (with the default, freed ~10 MiB chunks stay resident and inflate the chunked peaks).
  The measured call is the first one in that process;
- the timing subprocess uses the default allocator: one warm-up call, then the median of `--repeats` calls.
The goal stated in the issue: chunked peak at most a tenth of naive.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from proc_status import status_kb  # noqa: E402

DTYPES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}


# ------------------------------------------------------------------------------------------- worker side


class _PeakMeter:
    """Peak memory added by the code run between start() and stop(), in bytes."""

    def __init__(self, device):
        self.device = device
        self.method = ""

    def start(self) -> None:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            self.method = "cuda max_memory_allocated"
            return
        self.base_rss = status_kb("VmRSS")
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM (peak RSS) to the current RSS
            self.method = "RSS: VmHWM after clear_refs"
        except OSError:
            self.method = "RSS: ru_maxrss delta"
        self.base_maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def stop(self) -> int:
        import torch

        if self.device.type == "cuda":
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.base
        if self.method.startswith("RSS: VmHWM"):
            return (status_kb("VmHWM") - self.base_rss) * 1024
        return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - self.base_maxrss) * 1024


def _naive(logits, tokens, op: str, temperature: float):
    import torch

    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    if op == "entropy":
        return -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def _chunked(logits, tokens, op: str, temperature: float, impl: str, chunk: int, grad: bool):
    from harness.grpo import token_entropy, token_logprobs

    # impl "default": chunk_size=None (sized by CHUNK_BUDGET_BYTES); "positions": `chunk` positions per chunk.
    size = None if impl == "default" else chunk
    if op == "entropy":
        return token_entropy(logits, temperature, size, requires_grad=grad)
    return token_logprobs(logits, tokens, temperature, size)


def run_worker(spec: dict) -> dict:
    import torch

    torch.manual_seed(0)
    device = torch.device(spec["device"])
    dtype = getattr(torch, DTYPES[spec["dtype"]])
    n, t, v = spec["n"], spec["t"], spec["vocab"]
    grad = spec["pass"] == "fwd+bwd"
    logits = (torch.randn(n, t, v, dtype=dtype, device=device) * 3).requires_grad_(grad)
    tokens = torch.randint(0, v, (n, t), device=device)
    upstream = torch.randn(n, t, device=device)

    def call():
        with torch.set_grad_enabled(grad):
            if spec["impl"] == "naive":
                out = _naive(logits, tokens, spec["op"], spec["temperature"])
            else:
                out = _chunked(logits, tokens, spec["op"], spec["temperature"], spec["impl"], spec["chunk"], grad)
            if grad:
                (out * upstream).sum().backward()
                logits.grad = None
            return out

    if spec["measure"] == "memory":
        meter = _PeakMeter(device)
        meter.start()
        first = call()
        peak = meter.stop()
        return {**spec, "peak": peak, "method": meter.method, "checksum": float(first.detach().double().sum()),
                "grad_floor": n * t * v * logits.element_size() if grad else 0}
    call()  # warm-up
    times = []
    for _ in range(spec["repeats"]):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return {**spec, "time": statistics.median(times)}


# ------------------------------------------------------------------------------------------- driver side


def _subprocess(spec: dict, env: dict) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                          env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"variant {spec} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_variant(spec: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    memory = _subprocess({**spec, "measure": "memory"}, {**env, "MALLOC_MMAP_THRESHOLD_": "65536"})
    timing = _subprocess({**spec, "measure": "time"}, env)
    return {**memory, "time": timing["time"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4, help="rows (responses)")
    parser.add_argument("--t", type=int, default=160, help="tokens per row")
    parser.add_argument("--vocab", type=int, default=151_936, help="vocabulary (Qwen2.5: 151,936)")
    parser.add_argument("--temperature", type=float, default=0.7, help="logprob temperature (the sampling one)")
    parser.add_argument("--dtypes", nargs="+", default=["bf16", "fp32"], choices=sorted(DTYPES))
    parser.add_argument("--ops", nargs="+", default=["entropy", "logprobs"], choices=["entropy", "logprobs"])
    parser.add_argument("--passes", nargs="+", default=["fwd", "fwd+bwd"], choices=["fwd", "fwd+bwd"])
    parser.add_argument("--chunk-positions", type=int, nargs="*", default=[16],
                        help="also run with this many positions per chunk (besides the default, chunk_size=None)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(json.loads(args.worker))))
        return 0

    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    impls = [("naive", 0), ("default", 0)] + [("positions", c) for c in args.chunk_positions]
    base = {"n": args.n, "t": args.t, "vocab": args.vocab, "temperature": args.temperature, "device": device,
            "repeats": args.repeats}
    fp32_tensor_mb = args.n * args.t * args.vocab * 4 / 2**20
    print(f"N={args.n} x T={args.t} x V={args.vocab:,} on {device}; one fp32 [N,T,V] tensor = {fp32_tensor_mb:.0f} MiB;"
          f" temperature {args.temperature}; median of {args.repeats} timed calls")
    header = (f"{'op':9s} {'dtype':5s} {'pass':8s} {'impl':16s} {'peak MiB':>9s} {'vs naive':>8s} "
              f"{'floor MiB':>9s} {'time ms':>9s} {'vs naive':>8s}  max|diff|")
    print(header)
    print("-" * len(header))
    ok = True
    for op in args.ops:
        for dtype in args.dtypes:
            for pas in args.passes:
                rows = [run_variant({**base, "op": op, "dtype": dtype, "pass": pas, "impl": impl, "chunk": c})
                        for impl, c in impls]
                naive = rows[0]
                for (impl, c), r in zip(impls, rows, strict=True):
                    name = "naive" if impl == "naive" else f"{impl}={c}"
                    diff = abs(r["checksum"] - naive["checksum"]) / max(1.0, abs(naive["checksum"]))
                    print(f"{op:9s} {dtype:5s} {pas:8s} {name:16s} {r['peak'] / 2**20:9.0f} "
                          f"{r['peak'] / max(naive['peak'], 1):8.3f} {r['grad_floor'] / 2**20:9.0f} "
                          f"{r['time'] * 1e3:9.1f} {r['time'] / naive['time']:8.2f}  {diff:.1e}")
                    ok = ok and diff < 1e-4
    print(f"memory: {rows[0]['method']}; 'peak' = peak added by the call above the inputs; 'floor' = the logits'"
          " gradient, which any implementation must hold; 'max|diff|' = relative difference of sum(output)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
