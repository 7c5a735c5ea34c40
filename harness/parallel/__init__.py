"""Several processes for one model stage: the process group (accelerate), the gradient updater (DDP, fp16, ZeRO),
and glibc's malloc settings every training or decoding process starts with (allocator).
May import only torch, accelerate and DeepSpeed; nothing of the harness above it."""
