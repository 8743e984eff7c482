"""An ImageNet-style training client on synthetic JPEGs: DataLoader workers decode, crop, flip and
normalize every image (the CPU work of torchvision's ImageNet example), the model trains on the
GPU. No tuimon import: run it under `tuimon run`. Fewer --workers make it input-bound.

    python imagenet_like.py [--workers 8] [--batch 128] [--seconds S] [--step-log FILE] [--device cuda]

The model is torchvision's ResNet-50 where torchvision is installed (and JPEGs are decoded with
torchvision.io), else a small CNN with the decode replaced by a resize of a raw image. --step-log:
every step's end (CLOCK_MONOTONIC s) and time (ms), a line each: the job's own throughput.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

try:
    import torchvision
    from torchvision.io import decode_jpeg, encode_jpeg
except ImportError:  # (a plain torch install)
    torchvision = None

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Jpegs(Dataset):
    """16 distinct 500x375 images (ImageNet's typical size), each sample decoded and augmented."""

    def __init__(self, n=10**9):
        g = torch.Generator().manual_seed(0)
        raw = [(torch.rand(3, 375, 500, generator=g) * 255).to(torch.uint8) for _ in range(16)]
        self.images = [encode_jpeg(x, quality=90) for x in raw] if torchvision is not None else raw
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        img = self.images[i % len(self.images)]
        x = decode_jpeg(img) if torchvision is not None else img
        h, w = x.shape[1:]
        s = int(min(h, w) * (0.35 + 0.65 * ((i * 7919) % 100) / 100))  # a random-resized crop
        top, left = (i * 31) % (h - s + 1), (i * 17) % (w - s + 1)
        x = x[:, top:top + s, left:left + s].float().unsqueeze(0) / 255
        x = nn.functional.interpolate(x, size=(224, 224), mode="bilinear", antialias=True, align_corners=False)[0]
        if i % 2:
            x = x.flip(2)
        return (x - MEAN) / STD, i % 1000


def model():
    if torchvision is not None:
        return torchvision.models.resnet50(num_classes=1000)
    return nn.Sequential(nn.Conv2d(3, 64, 7, stride=4, padding=3), nn.ReLU(), nn.Conv2d(64, 128, 3, stride=2, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 1000))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--step-log")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.backends.cudnn.benchmark = True
    net = model().to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loader = DataLoader(Jpegs(), batch_size=a.batch, num_workers=a.workers, pin_memory=dev.type == "cuda",
                        persistent_workers=a.workers > 0, prefetch_factor=2 if a.workers else None)
    log = open(a.step_log, "w", buffering=1 << 16) if a.step_log else None
    print(f"training: {'resnet50' if torchvision is not None else 'small CNN'}, batch {a.batch}, "
          f"{a.workers} workers, on {dev}", flush=True)
    end = time.monotonic() + a.seconds
    flushed = time.monotonic()
    t0 = time.perf_counter()
    for step, (x, y) in enumerate(loader):
        x = x.to(dev, non_blocking=True).to(memory_format=torch.channels_last)
        y = y.to(dev, non_blocking=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            loss.item()  # (the example logs its loss every few steps: a sync)
        t1 = time.perf_counter()
        if log is not None:
            log.write(f"{time.monotonic():.4f} {(t1 - t0) * 1e3:.3f}\n")
            if time.monotonic() - flushed >= 0.5:  # (a job killed keeps its log but for the last 0.5 s)
                log.flush()
                flushed = time.monotonic()
        t0 = t1
        if time.monotonic() >= end:
            break
    if log is not None:
        log.close()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
