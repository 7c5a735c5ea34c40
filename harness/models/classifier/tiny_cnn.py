"""`tiny_cnn`: a small conv net for the tiny preset's classifier (issue 12 calibration, docs/calibration.md).

Trained from scratch on the phantom set, a 2-block ViT reads only the large shapes (test micro-F1 0.32-0.40),
while this net (5 conv-BN-ReLU-maxpool blocks, 32-128 channels, max over positions) reached 0.68 in the
calibration probe: the small findings (tubes, rib gaps, pneumothorax rims) are a few pixels wide, which suits
convolutions with their locality prior. torchvision / timm have no net this small, so it is written here.

Its weights and activations are channels-last (NHWC): oneDNN's convolutions ran a training batch about 2x faster
on a CPU core that way than on NCHW tensors in a micro-benchmark (issue 27; end to end, with the pixel cache, the
classifier took 0.88x the CPU time: benchmarks/RESULTS.md). The same function, summed
in another order: a net trained so matches an NCHW one to float rounding, not bit for bit.
"""

from __future__ import annotations

import torch
from torch import nn

# Channels of the conv blocks; each block halves the resolution (112 px -> 3 x 3 after five).
TINY_CNN_CHANNELS = (32, 64, 96, 128, 128)


class TinyCNN(nn.Module):
    def __init__(self, num_classes: int, channels: tuple[int, ...] = TINY_CNN_CHANNELS, in_chans: int = 3):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = in_chans
        for c_out in channels:
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2)]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)
        self.features.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Max over positions: a finding is present if it shows anywhere, however small.
        x = x.contiguous(memory_format=torch.channels_last)
        return self.head(self.features(x).amax(dim=(2, 3)))
