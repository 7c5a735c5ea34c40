"""Several processes for one model stage: the process group (accelerate), the gradient updater (DDP, fp16, ZeRO).
May import only torch, accelerate and DeepSpeed; nothing of the harness above it."""
